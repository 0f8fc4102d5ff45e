"""Several nodes on one PostgreSQL store share the cluster cap: each says how many workers it
has (the ``nodes`` table), and its runs claimed ahead take its share of the cap's room,
no more (cadenza.node.roster, cadenza.node.dispatcher.hold_limit)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from tests.integration.test_node_admission import make_home, wait_for

from cadenza.clock import SystemClock
from cadenza.domain.states import RunState
from cadenza.node import Node
from cadenza.node.dispatcher import hold_limit
from cadenza.node.roster import ROSTER_SECONDS
from cadenza.store.roster import Roster


def test_a_node_alone_may_fill_the_cap_with_runs_claimed_ahead() -> None:
    assert hold_limit(4, 16, 4) == 16  # the default cap, one node of four workers
    assert hold_limit(4, 16, 0) == 16  # nothing read yet: this node's own workers
    assert hold_limit(16, 16, 16) == 16
    assert hold_limit(32, 16, 32) == 32  # more workers than the cap: the cap binds


def test_nodes_share_the_room_beyond_every_nodes_workers() -> None:
    assert hold_limit(2, 16, 4) == 8  # two nodes of two: 2 + 12 * 2 // 4
    assert hold_limit(1, 16, 4) == 4  # a node of one beside one of three: 1 + 12 // 4
    assert hold_limit(3, 16, 4) == 12  # the node of three: 3 + 36 // 4
    assert hold_limit(4, 8, 12) == 4  # more workers than the cap: no run claimed ahead


def test_a_node_beside_others_holds_its_share_of_the_cap(tmp_path: Path) -> None:
    """A node of two workers that knows of two more workers elsewhere, the cap 8, a backlog
    of short runs (claimed seven ahead per worker once the node has seen them short): it
    never holds more than 2 + (8 - 4) * 2 // 4 = 4 runs, where it held the whole cap."""
    home = make_home(tmp_path, "max_concurrency = 1000\n[jobs.work.params]\nseconds = 0.003",
                     "\n[workers]\nmax_concurrent_runs = 8\n")
    config = home.load_config()
    store = home.open_store(config)
    made = [store.create_run("work", "manual:test") for _ in range(300)]
    node = Node(home, config, store, clock=SystemClock(), workers=2, scheduler=False)
    node.dispatcher.cluster_workers = lambda: 4  # as a roster would say beside a second node
    peak = 0

    def done() -> bool:
        nonlocal peak
        with store.read() as c:
            running = c.execute(sa.text(
                "SELECT count(*) FROM runs WHERE state = 'RUNNING'")).scalar_one()
        peak = max(peak, running)
        return all(store.get_run(r).state is RunState.SUCCEEDED for r in made[-5:])

    node.start()
    try:
        deadline = time.monotonic() + 120
        while not done():  # sampled every 2 ms: a claim of 8 stays RUNNING for ~10 ms
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.002)
    finally:
        node.stop(timeout=30)
    ended = [store.get_run(r).state for r in made]
    store.close()
    assert set(ended) == {RunState.SUCCEEDED}
    assert 3 <= peak <= 4, peak


@pytest.mark.postgres
def test_the_roster_counts_live_nodes_on_the_databases_clock(pg_url: str,
                                                             tmp_path: Path) -> None:
    home = make_home(tmp_path, "max_concurrency = 100")
    settings = home.path / "cadenza.toml"
    settings.write_text(settings.read_text().replace('url = "sqlite:///data/cadenza.db"',
                                                     f'url = "{pg_url}"', 1))
    store = home.open_store(home.load_config())
    try:
        roster = Roster(store)
        assert roster.seen("a", 2, 15) == 2
        assert roster.seen("b", 3, 15) == 5
        assert roster.seen("a", 4, 15) == 7  # a node's row is replaced, not added
        with store.write() as c:  # "b" wrote last a minute ago: gone, not counted
            c.execute(sa.text("UPDATE nodes SET seen_at = now() - interval '60 seconds'"
                              " WHERE owner = 'b'"))
        assert roster.live(15) == 4
        with store.write() as c:  # a node killed two days ago: its row is deleted
            c.execute(sa.text("UPDATE nodes SET seen_at = now() - interval '2 days'"
                              " WHERE owner = 'b'"))
        roster.seen("a", 4, 15)
        roster.gone("a")
        with store.read() as c:
            assert c.execute(sa.text("SELECT count(*) FROM nodes")).scalar_one() == 0
    finally:
        store.close()


@pytest.mark.postgres
def test_two_nodes_share_the_cap_and_write_no_cap_reason(pg_url: str,
                                                        tmp_path: Path) -> None:
    """Two nodes of two workers, the cluster cap 8, 160 short runs: each node holds 2 + 2
    runs at most (its share of the room beyond the 4 workers), so both nodes run the
    backlog, and no run gets a "max_concurrent_runs reached" reason: every worker had a
    run. Before the nodes knew of each other, the node that claimed first filled the cap
    with runs claimed ahead; the other's workers sat idle, its decisions refused by the
    cap, and the runs it read got a RUN_WAITING event each."""
    home = make_home(tmp_path, "max_concurrency = 1000\n[jobs.work.params]\nseconds = 0.005",
                     "\n[workers]\nmax_concurrent_runs = 8\n")
    settings = home.path / "cadenza.toml"
    settings.write_text(settings.read_text().replace('url = "sqlite:///data/cadenza.db"',
                                                     f'url = "{pg_url}"', 1))
    config = home.load_config()
    stores = [home.open_store(config) for _ in range(2)]
    nodes = [Node(home, config, store, clock=SystemClock(), workers=2, scheduler=False,
                  owner=f"node-{k}") for k, store in enumerate(stores)]
    try:
        for node in nodes:
            node.start()
        # Both nodes know of each other (an idle node reads the roster with its write).
        wait_for(lambda: all(node.roster is not None and node.roster.cluster_workers == 4
                             for node in nodes), ROSTER_SECONDS + 10)
        with stores[0].read() as c:
            rows = c.execute(sa.text("SELECT owner, workers FROM nodes ORDER BY owner"))
            assert [tuple(r) for r in rows] == [("node-0", 2), ("node-1", 2)]
        made = [stores[0].create_run("work", "manual:test") for _ in range(160)]
        for node in nodes:
            node.dispatcher.wake()
        wait_for(lambda: all(stores[0].get_run(r).state is RunState.SUCCEEDED
                             for r in made), 120)
    finally:
        for node in nodes:
            node.stop(timeout=30)
    with stores[0].read() as c:  # each node deleted its row when it stopped
        assert c.execute(sa.text("SELECT count(*) FROM nodes")).scalar_one() == 0
    waiting = stores[0].list_events(event_type="RUN_WAITING", limit=1000)
    started = stores[0].list_events(event_type="STEP_STARTED", limit=1000)
    for store in stores:
        store.close()
    assert [e.message for e in waiting] == []
    ran = Counter(e.payload["run"]["fields"]["lease_owner"] for e in started)
    assert sum(ran.values()) == 160
    assert min(ran["node-0"], ran["node-1"]) >= 40, ran  # each node ran its share


def test_a_node_alone_learns_no_other_node(tmp_path: Path) -> None:
    """On SQLite a single node serves the store: no roster, its own workers."""
    home = make_home(tmp_path, "max_concurrency = 100")
    config = home.load_config()
    store = home.open_store(config)
    node = Node(home, config, store, clock=SystemClock(), workers=3, scheduler=False)
    try:
        assert node.roster is None
        assert node.dispatcher.cluster_workers() == 3
    finally:
        node.stop(timeout=5)
        store.close()


class _Down:
    """A roster whose store cannot be reached."""

    def __init__(self) -> None:
        self.tries = 0

    def live(self, within: float) -> int:
        self.tries += 1
        raise OSError("connection refused")

    seen = live


def test_a_store_that_is_down_is_asked_once_a_second_at_most() -> None:
    """A failed read counts as a read: the dispatcher's decisions do not have the roster
    thread ask the store again at each decision while it is down; the last figure stays."""
    from cadenza.clock import FakeClock
    from cadenza.lifecycle import Lifecycle
    from cadenza.node.roster import READ_SECONDS, RosterService

    clock = FakeClock()
    roster = RosterService(object(), "node-0", 2, Lifecycle(clock))
    roster.cluster_workers = 4  # as read before the store went down
    down = _Down()
    roster.roster = down  # type: ignore[assignment]
    clock.advance(READ_SECONDS)
    assert roster.workers_now() == 4
    assert roster._wake.is_set()  # stale: a read is asked for
    roster._wake.clear()
    roster.read()
    assert down.tries == 1 and roster.cluster_workers == 4
    assert roster.workers_now() == 4
    assert not roster._wake.is_set()  # the failed read was a second ago at most
    clock.advance(READ_SECONDS)
    roster.workers_now()
    assert roster._wake.is_set()
