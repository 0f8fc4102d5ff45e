"""The lease keeper and the node's reaper on real stores (executor/lease_keeper.py, node/reaper.py;
docs/leases.md): a renewal round is one UPDATE and one commit for 64 runs; a cancel request
or a lost lease stops the run's control; a store that cannot be reached stops the runs once
their lease ran out locally; a node reclaims at start what a dead process of its host left,
and re-queues expired leases."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from executor_home import make_home
from tests.support.statements import statement_kinds

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.executor.control import RunControl, StopKind
from cadenza.executor.lease_keeper import LeaseKeeper
from cadenza.executor.runner import default_owner
from cadenza.home import Home
from cadenza.node import Node
from cadenza.store import Store
from cadenza.store.boundary import NewRun
from cadenza.store.engine import READ_ONLY
from cadenza.store.run_leases import owner_parts

LEASE = timedelta(seconds=30)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-05-01T10:00:00+00:00")


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[Store]:
    s = Store.open(store_url, clock=clock)
    yield s
    s.close()


def _claimed(store: Store, n: int, owner: str) -> list[tuple[str, int]]:
    ids = store.create_runs([NewRun("j", "manual:test") for _ in range(n)])
    runs = store.claim_runs(owner, store.clock.now() + LEASE, limit=n, run_ids=ids)
    return [(r.id, r.lease_epoch) for r in runs]


def _commits(store: Store) -> list[int]:
    counter = [0]

    def on_commit(conn: sa.Connection) -> None:
        if not conn.get_execution_options().get(READ_ONLY):
            counter[0] += 1

    sa.event.listen(store.engine, "commit", on_commit)
    return counter


def test_a_round_for_64_runs_is_one_commit_and_moves_every_lease(
        store: Store, clock: FakeClock) -> None:
    keeper = LeaseKeeper(store, LEASE)
    controls = {}
    for run_id, epoch in _claimed(store, 64, "me:1:1"):
        controls[run_id] = RunControl(run_id)
        keeper.register(run_id, epoch, "me:1:1", controls[run_id])
    keeper.stop()  # rounds driven by hand
    clock.advance(10)
    commits = _commits(store)
    seen = statement_kinds(store)
    result = keeper.renew_once()
    assert result is not None and len(result.renewed) == 64
    assert commits[0] == 1
    # The cost is the number of statements, not a wall-clock bet (a loaded CI machine took
    # 920 ms once): one UPDATE for the round, however many runs it holds.
    writes = [w for w in seen if w in ("UPDATE", "INSERT", "DELETE")]
    assert writes == ["UPDATE"], seen
    assert len(seen) <= 3, seen
    assert {r.lease_until for r in store.list_runs(limit=100)} == {clock.now() + LEASE}
    assert not any(c.stopped for c in controls.values())


def test_cancel_and_lost_leases_stop_the_controls(store: Store, clock: FakeClock) -> None:
    keeper = LeaseKeeper(store, LEASE)
    (a, ea), (b, eb), (c, ec) = _claimed(store, 3, "me:1:1")
    ca, cb, cc = RunControl(a), RunControl(b), RunControl(c)
    keeper.register(a, ea, "me:1:1", ca)
    keeper.register(b, eb, "me:1:1", cb)
    keeper.register(c, ec, "me:1:1", cc)
    keeper.stop()  # rounds driven by hand: the clock moved below must not start one
    try:
        store.request_cancel(a, "hank")
        assert keeper.poll_cancels_once() == 1  # the cheap read between renewals
        assert ca.request is not None and ca.request.kind is StopKind.CANCELED
        assert ca.request.by == "hank"
        clock.advance(LEASE + timedelta(seconds=1))
        store.reap_expired_run_leases()  # b and c are lost (a's cancel ends it CANCELED)
        keeper.renew_once()
        assert cb.request is not None and cb.request.kind is StopKind.LEASE_LOST
        assert cc.request is not None and cc.request.kind is StopKind.LEASE_LOST
        assert keeper.held() == []
    finally:
        keeper.stop()


def test_the_keeper_sleeps_while_it_holds_no_run(store: Store, clock: FakeClock,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With no run held there is nothing to renew and no cancel to look for: the thread
    waits for a registration, not for the next second (an idle node's CPU is its
    wake-ups). Registered, it polls cancels every second and renews a third of the lease
    after the registration; once the last run is gone it sleeps again."""
    keeper = LeaseKeeper(store, LEASE)
    rounds: list[str] = []
    polls = keeper.poll_cancels_once
    monkeypatch.setattr(keeper, "poll_cancels_once", lambda: rounds.append("poll") or polls())
    keeper.start()
    try:
        assert clock.wait_for_waiters(1)
        for _ in range(5):
            clock.advance_idle(1, 1)
        assert rounds == [] and keeper.rounds == 0
        ((run_id, epoch),) = _claimed(store, 1, "me:1:1")
        control = RunControl(run_id)
        keeper.register(run_id, epoch, "me:1:1", control)
        assert clock.wait_until_idle(1)
        for _ in range(3):
            clock.advance_idle(1, 1)
        assert rounds == ["poll"] * 3 and keeper.rounds == 0
        clock.advance_idle(LEASE / 3, 1)
        assert keeper.rounds == 1  # a third of the lease after the registration
        # The last run leaves and the next comes (one worker, a run at a time): the wake-up
        # of that registration reads nothing before a poll is due.
        ((other, other_epoch),) = _claimed(store, 1, "me:1:1")
        polled = len(rounds)
        keeper.unregister(run_id)
        keeper.register(other, other_epoch, "me:1:1", RunControl(other))
        assert clock.wait_until_idle(1)
        assert len(rounds) == polled and keeper.rounds == 1
        keeper.unregister(other)
        clock.advance_idle(1, 1)  # the round that finds nothing held any more
        before = len(rounds)
        for _ in range(5):
            clock.advance_idle(1, 1)
        assert len(rounds) == before and keeper.rounds == 1
    finally:
        keeper.stop()


@pytest.mark.postgres
def test_an_unreachable_store_stops_runs_once_their_lease_ran_out(
        pg_url: str, clock: FakeClock) -> None:
    store = Store.open(pg_url, clock=clock)
    admin = sa.create_engine(pg_url.rsplit("/", 1)[0] + "/postgres",
                             isolation_level="AUTOCOMMIT")
    name = pg_url.rsplit("/", 1)[1]
    try:
        keeper = LeaseKeeper(store, LEASE)
        ((run_id, epoch),) = _claimed(store, 1, "me:1:1")
        control = RunControl(run_id)
        keeper.register(run_id, epoch, "me:1:1", control)
        keeper.stop()  # drive the rounds by hand
        store.engine.dispose()
        with admin.connect() as c:  # the database goes away for real
            c.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            c.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = :n"), {"n": name})
        clock.advance(10)
        assert keeper.renew_once() is None and keeper.failures == 1
        assert not control.stopped  # our lease still runs: keep trying
        clock.advance(LEASE)
        assert keeper.renew_once() is None
        assert control.request is not None and control.request.kind is StopKind.LEASE_LOST
        assert "could not be renewed" in control.request.reason
        assert keeper.held() == []
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()
        store.close()


JOBS = """
[jobs.j]
[[jobs.j.steps]]
name = "one"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
"""


@pytest.fixture
def node(tmp_path: Path, clock: FakeClock) -> Iterator[Node]:
    root = make_home(tmp_path / "home", JOBS)
    home = Home(root.resolve())
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    n = Node(home, config, store, clock=clock, scheduler=False, workers=1)
    yield n
    n.keeper.stop()
    store.close()


def test_serve_start_reclaims_runs_of_dead_processes_of_this_host(node: Node) -> None:
    host, _ = owner_parts(node.owner)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        store = node.store
        (gone, _), = _claimed(store, 1, f"{host}:{dead.pid}:1")
        (alive, _), = _claimed(store, 1, f"{host}:{live.pid}:1")
        (mine, _), = _claimed(store, 1, node.owner)  # a previous incarnation with our pid
        (remote, _), = _claimed(store, 1, f"elsewhere:{dead.pid}:1")
        assert node.reaper.reclaim_at_start() == 2
        states = {r.id: r.state for r in store.list_runs(limit=10)}
        assert states == {gone: RunState.QUEUED, mine: RunState.QUEUED,
                          alive: RunState.RUNNING, remote: RunState.RUNNING}
    finally:
        live.kill()
        live.wait()


def test_the_reaper_requeues_expired_leases_and_the_node_runs_them(
        node: Node, clock: FakeClock) -> None:
    (run_id, _), = _claimed(node.store, 1, "elsewhere:1:1")
    assert node.reaper.reap_once() == 0
    clock.advance(LEASE + timedelta(seconds=1))
    assert node.reaper.reap_once() == 1
    run = node.store.get_run(run_id)
    assert run is not None and run.state is RunState.QUEUED
    node.dispatcher.dispatch_once(clock.now())
    started = node.dispatcher._queue.get_nowait()
    assert started is not None
    assert started.go().state is RunState.SUCCEEDED
    assert node.keeper.held() == []


def test_default_owner_names_this_host_and_process() -> None:
    host, pid = owner_parts(default_owner())
    assert host and pid == os.getpid()
