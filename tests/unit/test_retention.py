"""The daily retention sweep (cadenza.retention) on a FakeClock and a real SQLite store."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

from tests.support.store_helpers import end_run, start_run

from cadenza.clock import FakeClock
from cadenza.config.schema_settings import RetentionSettings
from cadenza.domain.states import RunState
from cadenza.retention import FIRST_DELAY, INTERVAL, RETRY_AFTER, RetentionSweeper
from cadenza.scheduler.leader import AlwaysLeader
from cadenza.store import Store


class NotLeader:
    is_leader = False


def old_runs(store: Store, clock: FakeClock, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        run_id = store.create_run("job", "manual")
        assert run_id is not None
        assert start_run(store, run_id)
        assert end_run(store, run_id, RunState.SUCCEEDED)
        ids.append(run_id)
    queued = store.create_run("job", "manual")
    assert queued is not None
    ids.append(queued)
    clock.advance(timedelta(days=100))
    return ids


def test_sweeps_shortly_after_start_then_daily_with_current_settings(tmp_path: Path) -> None:
    clock = FakeClock()
    settings = RetentionSettings(days=90, keep_last_per_job=1)
    with Store.open(f"sqlite:///{tmp_path / 'c.db'}", clock=clock) as store:
        ids = old_runs(store, clock, 4)
        sweeper = RetentionSweeper(store, lambda: settings, clock, leader=AlwaysLeader())
        assert sweeper.tick() is None  # not due yet: only shortly after start
        swept_at = clock.advance(FIRST_DELAY)
        report = sweeper.tick()  # its pauses between delete batches go by on the clock
        assert report is not None and report.runs == 3 and report.keep_last == 1
        assert {r.id for r in store.list_runs()} == {ids[3], ids[4]}  # newest done + queued
        assert sweeper.next_at == swept_at + INTERVAL
        settings = RetentionSettings(days=90, keep_last_per_job=0)  # a reload
        clock.advance(INTERVAL - timedelta(seconds=1))
        assert sweeper.tick() is None
        clock.advance(1)
        report = sweeper.tick()
        assert report is not None and report.runs == 1
        assert [r.state for r in store.list_runs()] == [RunState.QUEUED]


def test_a_node_that_does_not_lead_never_sweeps(tmp_path: Path) -> None:
    clock = FakeClock()
    with Store.open(f"sqlite:///{tmp_path / 'c.db'}", clock=clock) as store:
        ids = old_runs(store, clock, 3)
        sweeper = RetentionSweeper(store, lambda: RetentionSettings(days=1,
                                                                   keep_last_per_job=0),
                                   clock, leader=NotLeader(), first_delay=timedelta(0))
        assert sweeper.tick() is None
        assert {r.id for r in store.list_runs()} == set(ids)
        assert sweeper.next_at == clock.now() + INTERVAL


def test_a_failed_sweep_is_retried_later_and_the_loop_survives(tmp_path: Path) -> None:
    clock = FakeClock()
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}", clock=clock)
    calls: list[int] = []

    def settings() -> RetentionSettings:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the store is gone for a moment")
        return RetentionSettings()

    sweeper = RetentionSweeper(store, settings, clock, first_delay=timedelta(0))
    try:
        assert sweeper.tick() is None
        assert sweeper.next_at == clock.now() + RETRY_AFTER
        clock.advance(RETRY_AFTER)
        assert sweeper.tick() is not None
    finally:
        store.close()


def test_run_forever_sweeps_once_a_day_on_the_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    stop = threading.Event()
    with Store.open(f"sqlite:///{tmp_path / 'c.db'}", clock=clock) as store:
        sweeper = RetentionSweeper(store, RetentionSettings, clock)
        sweeps: list[object] = []
        prune = store.prune

        def counting_prune(**kwargs: object) -> object:
            sweeps.append(clock.now())
            if len(sweeps) == 3:
                stop.set()
            return prune(**kwargs)  # type: ignore[arg-type]

        store.prune = counting_prune  # type: ignore[method-assign]
        start = clock.now()
        sweeper.run_forever(stop, wait=clock.sleep)
    assert sweeps == [start + FIRST_DELAY, start + FIRST_DELAY + INTERVAL,
                      start + FIRST_DELAY + 2 * INTERVAL]
