"""A whole node (scheduler, dispatcher, workers, lease keeper, reaper, retention, config
watch) started on a SQLite file and driven by a FakeClock, with no real sleep: a cron fire
at a minute boundary, a retry delay, a run lease that expires.

Every loop of the node waits on the clock; after each move of the clock the test waits
(with a real-time bound) until every loop has caught up (``FakeClock.advance_idle``), and
polls the store for what must happen. What must not happen yet is checked once the loops
caught up with a time just short of the moment it may.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.home import Home
from cadenza.node import Node
from cadenza.scheduler.service import LOOKAHEAD
from cadenza.store import Store

START = datetime.fromisoformat("2027-03-01T01:59:30+00:00")
FIRE = datetime.fromisoformat("2027-03-01T02:00:00+00:00")
LEASE = timedelta(seconds=30)
RETRY = timedelta(seconds=40)
LOOPS = 9
"""Loops of the node that wait on its clock: keeper, reaper, the data directory's probe,
scheduler, retention, dispatcher (which also watches the config files), route health
checks, cooldown ends, notification sender (the workers wait on their queue)."""

# Imported once per process (thread isolation): the same text for every home of this file.
TASKS = '''
import os

import cadenza


def noop():
    return 1


def flaky(marker):
    """Fails (retryably) on its first try, succeeds on the next."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise cadenza.Retryable("not yet")
    return 2
'''


def _step(job: str, name: str, extra: str = "") -> str:
    return (f'[[jobs.{job}.steps]]\nname = "{name}"\ntype = "python"\n'
            f'callable = "cz_node_clock_tasks:{name}"\nisolation = "thread"\n{extra}\n')


def make_home(tmp_path: Path) -> Home:
    path = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(path)]).exit_code == 0
    (path / "plugins" / "cz_node_clock_tasks.py").write_text(TASKS)
    marker = (tmp_path / "flaky-tried").as_posix()
    (path / "jobs.toml").write_text(
        '[jobs.nightly]\nschedule = "0 2 * * *"\ntimezone = "UTC"\n' + _step("nightly", "noop")
        + "[jobs.flaky]\n[jobs.flaky.retry]\nattempts = 2\nbackoff = \"fixed\"\n"
        f"base_seconds = {int(RETRY.total_seconds())}\njitter = 0\n"
        + _step("flaky", "flaky", f'op_kwargs = {{ marker = "{marker}" }}')
        + "[jobs.held]\n" + _step("held", "noop"))
    config = path / "cadenza.toml"
    config.write_text(config.read_text()
                      + f'\n[workers]\ncount = 4\nlease = "{int(LEASE.total_seconds())}s"\n')
    return Home(path.resolve())


T = TypeVar("T")


def eventually(probe: Callable[[], T | None], what: str, seconds: float = 20.0) -> T:
    """Poll the store (real time, bounded) until ``probe`` returns something true."""
    deadline = time.monotonic() + seconds
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)  # polling real progress of the node's threads, not waiting on time


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Node, Store, FakeClock]]:
    clock = FakeClock(START)
    home = make_home(tmp_path)
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock, workers=4)
    try:
        yield node, store, clock
    finally:
        node.stop(timeout=10)
        store.close()


def runs_of(store: Store, job: str) -> list[object]:
    return list(store.list_runs(job=job, limit=100))


def test_a_whole_node_under_a_fake_clock(served: tuple[Node, Store, FakeClock]) -> None:
    node, store, clock = served
    # A run RUNNING under the lease of a process of another host that is gone: nobody
    # renews it; only the reaper, once the lease ran out, may give it back to the queue.
    held_id = store.create_run("held", "manual:test")
    (held,) = store.claim_runs("elsewhere:4242:1", clock.now() + LEASE, run_ids=[held_id])
    lease_until = held.lease_until
    assert lease_until == START + LEASE
    flaky_id = store.create_run("flaky", "manual:test")

    node.start()
    assert clock.wait_until_idle(LOOPS), f"only {clock.idle} loops settled"
    assert {s.name for s in node.services} >= {"keeper", "reaper", "scheduler", "retention",
                                                 "config", "dispatcher"}

    # -- a retry delay: the first try fails at once, its retry waits RETRY on the clock.
    def flaky_waits() -> object:
        run = store.get_run(flaky_id)
        return run is not None and run.state is RunState.QUEUED and run.not_before
    not_before = eventually(flaky_waits, "the flaky run to wait for its retry")
    assert not_before == START + RETRY
    (first,) = store.list_step_runs(flaky_id)
    assert first.state is StepState.FAILED and first.attempt == 1

    # -- a minute boundary: nothing of the 02:00 fire runs before 02:00.
    clock.advance_idle(FIRE - LOOKAHEAD - clock.now() - timedelta(seconds=1), LOOPS)
    assert runs_of(store, "nightly") == []  # not even recorded 3 s before its fire
    # The reaper came by (every lease/3) but the held run's lease (until 02:00) still runs.
    held = store.get_run(held_id)
    assert held is not None and held.state is RunState.RUNNING
    assert held.lease_owner == "elsewhere:4242:1" and node.reaper.reaped == 0
    clock.advance_idle(timedelta(seconds=1.5), LOOPS)  # 01:59:58.5: recorded ahead
    (ahead,) = eventually(lambda: runs_of(store, "nightly"), "the fire recorded ahead")
    assert ahead.state is RunState.QUEUED and ahead.not_before == FIRE
    clock.advance_idle(FIRE - clock.now() - timedelta(milliseconds=1), LOOPS)
    (ahead,) = runs_of(store, "nightly")
    assert ahead.state is RunState.QUEUED and ahead.started_at is None  # 1 ms before

    clock.advance(timedelta(milliseconds=1))  # 02:00:00: the fire
    done = eventually(lambda: [r for r in runs_of(store, "nightly")
                               if r.state is RunState.SUCCEEDED], "the fire to run")
    assert [(r.scheduled_for, r.started_at) for r in done] == [(FIRE, FIRE)]

    # -- the held run's lease ran out at 02:00:00 but nobody renews it: the reaper, every
    # lease/3, re-queues it at its next round (02:00:07) and the node runs it.
    held = store.get_run(held_id)
    assert held is not None and held.state is RunState.RUNNING and node.reaper.reaped == 0

    # The retry is due at START + 40 s (02:00:10): one second before, it has not run again.
    clock.advance_idle(START + RETRY - clock.now() - timedelta(seconds=1), LOOPS)
    assert len(store.list_step_runs(flaky_id)) == 1
    assert store.get_run(flaky_id).state is RunState.QUEUED  # type: ignore[union-attr]
    recovered = eventually(lambda: (r := store.get_run(held_id)) is not None
                           and r.state is RunState.SUCCEEDED and r, "the held run to recover")
    assert recovered.lease_epoch > held.lease_epoch  # re-queued, then claimed here
    assert node.reaper.reaped == 1
    assert [e.run_id for e in store.list_events(event_type="RUN_RECOVERED")] == [held_id]

    clock.advance(timedelta(seconds=1))  # 02:00:10: the retry is due
    eventually(lambda: (r := store.get_run(flaky_id)) is not None
               and r.state is RunState.SUCCEEDED, "the retry to run")
    attempts = store.list_step_runs(flaky_id)
    assert [(s.attempt, s.state) for s in attempts] == [(1, StepState.FAILED),
                                                        (2, StepState.SUCCEEDED)]
    assert attempts[0].started_at == START and attempts[1].started_at == START + RETRY

    # The next night: the 02:00 fire once more, once, at its time.
    next_fire = FIRE + timedelta(days=1)
    clock.advance_idle(next_fire - LOOKAHEAD - clock.now() - timedelta(seconds=1), LOOPS)
    assert len(runs_of(store, "nightly")) == 1
    clock.advance_idle(timedelta(seconds=1.5), LOOPS)
    clock.advance_idle(next_fire - clock.now() - timedelta(milliseconds=1), LOOPS)
    assert [r.state for r in runs_of(store, "nightly")
            if r.scheduled_for == next_fire] == [RunState.QUEUED]
    clock.advance(timedelta(milliseconds=1))
    done = eventually(lambda: [r for r in runs_of(store, "nightly")
                               if r.state is RunState.SUCCEEDED and r.started_at == next_fire],
                      "the next night's fire")
    assert len(done) == 1 and len(runs_of(store, "nightly")) == 2


def test_an_idle_node_writes_nothing(tmp_path: Path) -> None:
    """With nothing queued and nothing to notify, a node's polls (the dispatcher's each
    second, the sender's) are reads: no write transaction, so an idle server neither
    grows the SQLite WAL nor takes the write lock from a CLI in the meantime."""
    import sqlalchemy as sa

    clock = FakeClock(START)
    home = make_home(tmp_path)
    (home.path / "jobs.toml").write_text('[jobs.held]\n' + _step("held", "noop"))
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock, workers=4, scheduler=False)
    writes: list[str] = []

    def count(conn: sa.Connection) -> None:
        writes.append("commit")

    try:
        node.start()
        clock.wait_until_idle(LOOPS - 1, 3)
        loops = clock.idle  # those of this node without a scheduler
        clock.advance_idle(timedelta(seconds=5), loops)  # the first passes decide
        sa.event.listen(store.engine, "commit", count)
        for _ in range(40):  # the reaper's round (lease / 3) comes too
            clock.advance_idle(timedelta(seconds=1), loops)
        assert writes == []
        # A run queued by another process (no wake) is still found by the next poll.
        run_id = store.create_run("held", "manual:cli")
        clock.advance_idle(timedelta(seconds=1), loops)
        eventually(lambda: store.get_run(run_id).state is RunState.SUCCEEDED,
                   "the queued run to run")
    finally:
        node.stop(timeout=10)
        store.close()
