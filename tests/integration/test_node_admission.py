"""The serve node's dispatcher applies admission to real runs: a concurrency cap, a tag's
budget, a window."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import Clock, FakeClock, SystemClock
from cadenza.domain.states import RunState
from cadenza.home import Home
from cadenza.node import Node
from cadenza.node.dispatcher import PREFETCH_SHORT, quick_window
from cadenza.store import Store

LOOPS = 4
"""Loops of a node without a scheduler that wait on its clock: keeper, reaper, config watch,
dispatcher."""
PLUGIN = "import time\n\ndef nap(seconds=0.4):\n    time.sleep(seconds)\n    return 1\n"


def make_home(tmp_path: Path, job_extra: str, settings_extra: str = "") -> Home:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home)]).exit_code == 0
    (home / "plugins" / "adm_tasks.py").write_text(PLUGIN)
    (home / "jobs.toml").write_text(
        "[jobs.work]\ntags = [\"scraping\"]\ntimezone = \"UTC\"\n" + job_extra +
        '\n[[jobs.work.steps]]\nname = "nap"\ntype = "python"\n'
        'callable = "adm_tasks:nap"\nisolation = "thread"\n')
    if settings_extra:
        cfg = home / "cadenza.toml"
        cfg.write_text(cfg.read_text() + settings_extra)
    return Home(home.resolve())


@pytest.fixture
def node_for() -> Iterator[object]:
    started: list[tuple[Node, Store]] = []

    def start(home: Home, runs: int, workers: int = 4,
              clock: Clock | None = None) -> tuple[Node, Store]:
        clock = clock or SystemClock()
        config = home.load_config()
        store = home.open_store(config, clock=clock)
        for _ in range(runs):
            store.create_run("work", "manual:test")
        node = Node(home, config, store, clock=clock, workers=workers, scheduler=False)
        node.start()
        started.append((node, store))
        return node, store

    yield start
    for node, store in started:
        node.stop(timeout=30)
        store.close()


def wait_for(probe: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return
        time.sleep(0.1)  # real runs of a real node; no schedule is waited for
    raise AssertionError("timed out")


def test_max_concurrency_two_never_overlaps_more_than_two(tmp_path: Path, node_for: object) -> None:
    home = make_home(tmp_path, "max_concurrency = 2")
    _, store = node_for(home, 5)  # type: ignore[operator]
    wait_for(lambda: all(r.state is RunState.SUCCEEDED for r in store.list_runs(job="work")), 60)
    runs = store.list_runs(job="work")
    assert len(runs) == 5
    moments = sorted([(r.started_at, 1) for r in runs] + [(r.finished_at, -1) for r in runs],
                     key=lambda m: (m[0], m[1]))
    level = peak = 0
    for _, delta in moments:
        level += delta
        peak = max(peak, level)
    assert peak == 2


def test_tag_budget_starts_three_and_says_why_the_rest_waits(
    tmp_path: Path, node_for: object
) -> None:
    home = make_home(tmp_path, "", "\n[limits.tags.scraping]\nbudget_per_hour = 3\n")
    clock = FakeClock("2027-03-01T10:00:00+00:00")
    _, store = node_for(home, 5, clock=clock)  # type: ignore[operator]
    wait_for(lambda: len([r for r in store.list_runs(job="work")
                          if r.state is RunState.SUCCEEDED]) == 3)
    # More dispatch rounds, up to a minute of the node's clock later, start no fourth.
    for _ in range(3):
        clock.advance_idle(20, LOOPS)
    runs = store.list_runs(job="work")
    assert sorted(r.state for r in runs).count(RunState.SUCCEEDED) == 3
    waiting = [r for r in runs if r.state is RunState.QUEUED]
    assert len(waiting) == 2
    for run in waiting:
        assert run.wait_reason and "budget 3/h for tag scraping" in run.wait_reason
        assert "next slot" in run.wait_reason


def test_run_outside_its_window_waits_for_it(tmp_path: Path, node_for: object) -> None:
    hour = datetime.now(UTC).hour
    closed = f"{(hour + 2) % 24:02d}:00-{(hour + 3) % 24:02d}:00"
    home = make_home(tmp_path, f'windows = ["{closed}"]')
    _, store = node_for(home, 1)  # type: ignore[operator]
    wait_for(lambda: store.list_runs(job="work")[0].wait_reason)
    run = store.list_runs(job="work")[0]
    assert run.state is RunState.QUEUED
    assert "window" in run.wait_reason and closed.split("-")[0] in run.wait_reason


def two_jobs_home(tmp_path: Path) -> Home:
    """``capped`` (max_concurrency 1, a short nap) and ``open`` (max_concurrency 10)."""
    home = make_home(tmp_path, "")
    steps = ('\n[[jobs.{0}.steps]]\nname = "nap"\ntype = "python"\n'
             'callable = "adm_tasks:nap"\nisolation = "thread"\n'
             '[jobs.{0}.steps.op_kwargs]\nseconds = 0.05\n')
    (home.path / "jobs.toml").write_text(
        "[jobs.capped]\nmax_concurrency = 1\n" + steps.format("capped")
        + "[jobs.open]\nmax_concurrency = 10\n" + steps.format("open"))
    return home


def test_a_quick_decision_reads_its_free_slots_and_a_few_more() -> None:
    """The free slots' worth and 16 more, not 4 per free slot: a decision that claims 16
    runs judged 64 (a full decision's 200 at most)."""
    assert quick_window(16, 200) == 32
    assert quick_window(1, 200) == 17
    assert quick_window(300, 200) == 200


def test_a_quick_decision_reads_a_few_runs_per_free_worker(tmp_path: Path) -> None:
    """With a backlog, a decision reads a page sized by the free workers, not the whole
    window of 200 (reading and judging 200 runs to start one was most of a run's cost)."""
    home = two_jobs_home(tmp_path)
    config = home.load_config()
    store = home.open_store(config)
    for _ in range(300):
        store.create_run("open", "manual:test")
    reads: list[int] = []
    original = store.queued_candidates

    def counting(now: datetime, limit: int, **kw: object) -> object:
        reads.append(limit)
        return original(now, limit, **kw)  # type: ignore[arg-type]

    store.queued_candidates = counting  # type: ignore[method-assign]
    opening = store.open_decision

    def opening_counted(conn: object, now: datetime, limit: int) -> object:
        reads.append(limit)  # a decision's first read
        return opening(conn, now, limit)  # type: ignore[arg-type]

    store.open_decision = opening_counted  # type: ignore[method-assign]
    node = Node(home, config, store, clock=SystemClock(), workers=2, scheduler=False)
    node.start()
    try:
        wait_for(lambda: all(r.state is RunState.SUCCEEDED
                             for r in store.list_runs(job="open", limit=1000)), 120)
    finally:
        node.stop(timeout=30)
        store.close()
    quick = [n for n in reads if n < 200]
    assert quick and max(quick) <= 2 * (1 + PREFETCH_SHORT) + 16  # the slots of 2 workers
    assert len(quick) > len(reads) / 2  # full reads only once a second


def test_runs_behind_a_capped_backlog_start_at_once(tmp_path: Path,
                                                    node_for: object) -> None:
    """A quick page full of a capped job's runs does not hide the runs of another job
    behind it: the decision then judges the full window."""
    home = two_jobs_home(tmp_path)
    config = home.load_config()
    store = home.open_store(config)
    for _ in range(60):
        store.create_run("capped", "manual:test")
    opened = [store.create_run("open", "manual:test") for _ in range(3)]
    store.close()
    _, store = node_for(home, 0)  # type: ignore[operator]
    wait_for(lambda: all(store.get_run(r).state is RunState.SUCCEEDED for r in opened), 30)
    waiting = [r for r in store.list_runs(job="capped", limit=100)
               if r.state is RunState.QUEUED]
    assert len(waiting) > 40  # the open job's runs did not wait for the capped backlog


def test_a_node_filling_the_cluster_cap_itself_writes_no_cap_reason(tmp_path: Path) -> None:
    """As many workers as max_concurrent_runs on one node (16 and 16 by default; 4 here):
    the runs of a backlog wait for this node's own workers, which is no reason worth a
    RUN_WAITING event each (it was one per run on its way, and a third slower). The node
    never asks for more than the cap leaves it either."""
    home = two_jobs_home(tmp_path)
    cfg = home.path / "cadenza.toml"
    cfg.write_text(cfg.read_text() + "\n[workers]\nmax_concurrent_runs = 4\n")
    config = home.load_config()
    store = home.open_store(config)
    made = [store.create_run("open", "manual:test") for _ in range(40)]
    node = Node(home, config, store, clock=SystemClock(), workers=4, scheduler=False)
    node.start()
    try:
        wait_for(lambda: all(store.get_run(r).state is RunState.SUCCEEDED for r in made), 120)
    finally:
        node.stop(timeout=30)
    waiting = store.list_events(event_type="RUN_WAITING")
    store.close()
    assert waiting == []


def _claims(store: Store) -> list[int]:
    """How many runs each claim took (runs claimed together share their started_at)."""
    sizes: dict[object, int] = {}
    for run in store.list_runs(job="work", limit=1000):
        sizes[run.started_at] = sizes.get(run.started_at, 0) + 1
    return sorted(sizes.values(), reverse=True)


def test_short_runs_are_claimed_further_ahead(tmp_path: Path, node_for: object) -> None:
    """One worker, 80 runs of a millisecond: once the node has seen that its runs are short,
    a decision claims several runs ahead per worker, not one."""
    home = make_home(tmp_path, "max_concurrency = 100\n[jobs.work.params]\nseconds = 0.001")
    _, store = node_for(home, 80, workers=1)  # type: ignore[operator]
    wait_for(lambda: all(r.state is RunState.SUCCEEDED
                         for r in store.list_runs(job="work", limit=1000)), 60)
    assert _claims(store)[0] >= 4, _claims(store)


def test_long_runs_are_claimed_one_ahead(tmp_path: Path, node_for: object) -> None:
    """Runs of 0.1 s: a worker holds its run and one claimed ahead, never more (a run does
    not wait, RUNNING in a local queue, behind several long ones)."""
    home = make_home(tmp_path, "max_concurrency = 100\n[jobs.work.params]\nseconds = 0.1")
    _, store = node_for(home, 8, workers=1)  # type: ignore[operator]
    wait_for(lambda: all(r.state is RunState.SUCCEEDED
                         for r in store.list_runs(job="work", limit=1000)), 60)
    assert _claims(store)[0] <= 2, _claims(store)


@pytest.mark.postgres
@pytest.mark.reliability_case(51)
def test_two_nodes_on_one_postgresql_hold_one_jobs_cap(tmp_path: Path, pg_url: str) -> None:
    """Two nodes, each with its own store connection and one worker, dispatch the same
    job's nine queued runs from one PostgreSQL database with ``max_concurrency = 3``:
    both nodes run the job at the same time, the cap is reached across them and never
    passed, whichever node decides."""
    home = make_home(tmp_path, "max_concurrency = 3")
    settings = home.path / "cadenza.toml"
    settings.write_text(settings.read_text().replace('url = "sqlite:///data/cadenza.db"',
                                                     f'url = "{pg_url}"', 1))
    config = home.load_config()
    stores = [home.open_store(config) for _ in range(2)]
    for _ in range(9):
        stores[0].create_run("work", "manual:test")
    nodes = [Node(home, config, store, clock=SystemClock(), workers=1, scheduler=False,
                  owner=f"node-{k}")
             for k, store in enumerate(stores)]
    try:
        for node in nodes:
            node.start()

        def done() -> bool:
            listed = stores[0].list_runs(job="work")
            owners.update(r.lease_owner for r in listed if r.state is RunState.RUNNING)
            return all(r.state is RunState.SUCCEEDED for r in listed)

        owners: set[str | None] = set()
        wait_for(done, 60)
    finally:
        for node in nodes:
            node.stop(timeout=30)
    runs = stores[0].list_runs(job="work")
    for store in stores:
        store.close()
    assert len(runs) == 9
    moments = sorted([(r.started_at, 1) for r in runs] + [(r.finished_at, -1) for r in runs],
                     key=lambda m: (m[0], m[1]))
    level = peak = 0
    for _, delta in moments:
        level += delta
        peak = max(peak, level)
    assert peak == 3
    assert owners == {"node-0", "node-1"}, owners  # seen running on each node


@pytest.mark.postgres
@pytest.mark.reliability_case(51)
def test_two_schedulers_on_one_postgresql_apply_on_overlap_once(pg_url: str) -> None:
    """Two schedulers, each on its own store connection to one PostgreSQL database, tick at
    the same instant (FakeClock) while a run of each job is RUNNING: the busy job with
    ``on_overlap = "skip"`` gets its fire recorded once, MISSED with the overlap reason;
    the one with ``on_overlap = "queue"`` gets it once, QUEUED behind the running run."""
    import threading
    from datetime import timedelta

    from tests.support.store_helpers import start_run

    from cadenza.config.schema_jobs import JobConfig
    from cadenza.scheduler.service import Scheduler

    clock = FakeClock(datetime(2027, 3, 1, 1, 59, 30, tzinfo=UTC))
    jobs = {name: JobConfig.model_validate({
        "id": name, "schedule": "0 2 * * *", "timezone": "UTC", "max_concurrency": 1,
        "on_overlap": policy}) for name, policy in (("skipper", "skip"), ("queuer", "queue"))}
    stores = [Store.open(pg_url, clock=clock) for _ in range(2)]
    try:
        for name in jobs:
            running = stores[0].create_run(name, "manual:test")
            assert running is not None and start_run(stores[0], running, owner="elsewhere")
        schedulers = [Scheduler(store, jobs, clock=clock) for store in stores]
        for scheduler in schedulers:
            scheduler.tick(clock.now())
        clock.advance(timedelta(seconds=30))  # 02:00: the fire is due on both
        barrier = threading.Barrier(2)

        def tick(scheduler: Scheduler) -> None:
            barrier.wait(10)
            scheduler.tick(clock.now())

        threads = [threading.Thread(target=tick, args=(s,)) for s in schedulers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        fired = {name: [r for r in stores[0].list_runs(job=name) if r.scheduled_for]
                 for name in jobs}
    finally:
        for store in stores:
            store.close()
    [skipped] = fired["skipper"]
    assert skipped.state is RunState.MISSED and "overlap" in (skipped.reason or ""), \
        skipped.reason
    [queued] = fired["queuer"]
    assert queued.state is RunState.QUEUED
