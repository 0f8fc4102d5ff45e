"""The serve node at a crowded due time, on a FakeClock (SQLite and PostgreSQL): the
scheduler records the fires ahead, the dispatcher claims them all at the due time in one
write transaction, and a fire recorded ahead shows no wait reason before its time."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.home import Home
from cadenza.node import Node
from cadenza.scheduler.service import LOOKAHEAD
from cadenza.store import Store
from cadenza.store.engine import READ_ONLY

FIRE = datetime.fromisoformat("2027-03-01T02:00:00+00:00")
JOBS = 20
WORKERS = 10  # with the prefetch of one run per worker: 20 free slots


def make_home(tmp_path: Path, store_url: str, jobs: int = JOBS) -> Home:
    path = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(path)]).exit_code == 0
    (path / "plugins" / "cz_dispatch_tasks.py").write_text("def noop():\n    return 1\n")
    (path / "jobs.toml").write_text("".join(
        f'[jobs.j{k:02d}]\nschedule = "0 2 * * *"\ntimezone = "UTC"\n'
        f'[[jobs.j{k:02d}.steps]]\nname = "noop"\ntype = "python"\n'
        'callable = "cz_dispatch_tasks:noop"\nisolation = "thread"\n\n'
        for k in range(jobs)))
    config = path / "cadenza.toml"
    text = config.read_text()
    if store_url != "default":
        text = text.replace('url = "sqlite:///data/cadenza.db"', f'url = "{store_url}"')
    config.write_text(text + f"\n[workers]\ncount = {WORKERS}\nmax_concurrent_runs = 1000\n")
    return Home(path.resolve())


def scheduled(store: Store) -> list[sa.Row[tuple[str, str]]]:
    with store.read() as c:
        return list(c.execute(sa.text(
            "SELECT id, state FROM runs WHERE trigger = 'scheduled' ORDER BY job_id")))


def test_fires_recorded_ahead_are_claimed_together_at_their_time(
    tmp_path: Path, store_url: str
) -> None:
    home = make_home(tmp_path, store_url)
    clock = FakeClock(FIRE - timedelta(hours=1))
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock)  # threads not started: driven by hand
    try:
        assert node.scheduler is not None and node.scheduler.lookahead == LOOKAHEAD
        assert node.scheduler.try_lead()  # its writes are fenced by the leadership
        node.scheduler.tick(clock.now())
        clock.set(FIRE - LOOKAHEAD)
        assert len(node.scheduler.tick(clock.now()).queued) == JOBS
        runs = store.list_runs(limit=100)
        assert {(r.state, r.not_before) for r in runs} == {(RunState.QUEUED, FIRE)}

        # Before the fire: nothing is claimed, the dispatcher is told to wake at the fire,
        # and no run gets a wait reason (it is not waiting; it is not due).
        clock.set(FIRE - timedelta(seconds=1))
        assert node.dispatcher.dispatch_once(clock.now()) == FIRE
        assert all(r.wait_reason is None for r in store.list_runs(limit=100))
        assert store.list_events(event_type="RUN_WAITING") == []
        assert node.dispatcher._queue.qsize() == 0

        # At the fire: one decision, one write transaction, every run claimed and started.
        clock.set(FIRE)
        commits = [0]

        def on_commit(conn: sa.Connection) -> None:
            if not conn.get_execution_options().get(READ_ONLY):
                commits[0] += 1

        sa.event.listen(store.engine, "commit", on_commit)
        node.dispatcher.dispatch_once(clock.now())
        sa.event.remove(store.engine, "commit", on_commit)
        assert commits[0] == 1
        assert [state for _, state in scheduled(store)] == ["RUNNING"] * JOBS
        assert node.dispatcher._queue.qsize() == JOBS
        for run in store.list_runs(limit=100):
            assert run.started_at == FIRE and run.lease_epoch == 1
            (step,) = store.list_step_runs(run.id)
            assert step.state is StepState.RUNNING and step.started_at == FIRE

        # The workers' part, in this thread: each run ends once.
        while not node.dispatcher._queue.empty():
            item = node.dispatcher._queue.get()
            assert item is not None
            item.go()
        node.recorder.flush()
        assert [state for _, state in scheduled(store)] == ["SUCCEEDED"] * JOBS
    finally:
        node.stop(timeout=5)
        node.recorder.close()
        store.close()


def test_a_decision_reads_as_many_candidates_as_free_slots(tmp_path: Path) -> None:
    home = make_home(tmp_path, "default", jobs=250)
    clock = FakeClock(FIRE)
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock, workers=300, scheduler=False)
    try:
        for k in range(250):
            store.create_run(f"j{k:02d}", "manual:test")
        node.dispatcher.dispatch_once(clock.now())
        assert node.dispatcher._queue.qsize() == 250  # more than CANDIDATES_PER_DECISION (200)
    finally:
        for _ in range(node.dispatcher._queue.qsize()):
            item = node.dispatcher._queue.get()
            if item is not None:
                item.go()
        node.stop(timeout=5)
        node.recorder.close()
        store.close()
