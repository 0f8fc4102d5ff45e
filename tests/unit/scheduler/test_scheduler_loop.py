"""run_forever: sleeps until the next fire (on a FakeClock), wakes on reload and stop, and
only ticks while it leads; leadership on a SQLite lock file."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from scheduler_helpers import MakeScheduler, at, fires_of, job, jobs

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreError
from cadenza.scheduler import service
from cadenza.scheduler.leader import AlwaysLeader, FileLeadership, leadership_for
from cadenza.scheduler.service import LEADER_RETRY, MAX_SLEEP, Scheduler
from cadenza.store import Store

QUARTER = job("quarter", schedule="*/15 * * * *", timezone="UTC", on_overlap="queue")


class Sleeper:
    """Stands for the interruptible sleep: advances the FakeClock, stops after ``limit``."""

    def __init__(self, clock: FakeClock, stop: threading.Event, limit: int) -> None:
        self.clock, self.stop, self.limit = clock, stop, limit
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.clock.advance(seconds)
        if len(self.waits) >= self.limit:
            self.stop.set()
        return False


def test_run_forever_sleeps_exactly_until_each_fire(make_scheduler: MakeScheduler,
                                                    clock: FakeClock, store: Store,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "MAX_SLEEP", 3600.0)
    clock.set("2027-03-01T00:05:00+00:00")
    stop = threading.Event()
    sleeper = Sleeper(clock, stop, limit=4)
    make_scheduler(jobs(QUARTER)).run_forever(stop, clock, wait=sleeper)
    assert sleeper.waits == [600.0, 900.0, 900.0, 900.0]
    assert [r.scheduled_for for r in fires_of(store)] == [
        at("2027-03-01T00:15Z"), at("2027-03-01T00:30Z"), at("2027-03-01T00:45Z"),
    ]


def test_long_sleeps_are_cut_so_a_clock_step_is_noticed(make_scheduler: MakeScheduler,
                                                        clock: FakeClock, store: Store) -> None:
    clock.set("2027-03-01T00:05:00+00:00")
    stop = threading.Event()
    sleeper = Sleeper(clock, stop, limit=11)
    make_scheduler(jobs(QUARTER)).run_forever(stop, clock, wait=sleeper)
    assert sleeper.waits == [MAX_SLEEP] * 11
    assert [r.scheduled_for for r in fires_of(store)] == [at("2027-03-01T00:15Z")]


def test_run_forever_caps_its_sleep_and_idles_without_schedules(
    make_scheduler: MakeScheduler, clock: FakeClock
) -> None:
    stop = threading.Event()
    sleeper = Sleeper(clock, stop, limit=3)
    make_scheduler(jobs(job("manual"))).run_forever(stop, clock, wait=sleeper)
    assert sleeper.waits == [MAX_SLEEP] * 3
    daily = job("daily", schedule="0 12 * * *", timezone="UTC")
    stop.clear()
    sleeper = Sleeper(clock, stop, limit=2)
    make_scheduler(jobs(daily)).run_forever(stop, clock, wait=sleeper)
    assert sleeper.waits == [MAX_SLEEP] * 2


def test_store_errors_back_off_and_the_loop_survives(make_scheduler: MakeScheduler,
                                                     clock: FakeClock, store: Store) -> None:
    scheduler = make_scheduler(jobs(QUARTER))
    failures = iter([False, True, True, False, False])
    real_tick = scheduler.tick

    def flaky(now: object) -> object:
        if next(failures):
            raise StoreError("database is locked")
        return real_tick(clock.now())

    scheduler.tick = flaky  # type: ignore[method-assign,assignment]
    clock.set("2027-03-01T00:14:58+00:00")
    stop = threading.Event()
    sleeper = Sleeper(clock, stop, limit=4)
    scheduler.run_forever(stop, clock, wait=sleeper)
    assert sleeper.waits[:3] == [2.0, 1.0, 2.0]  # until 00:15, then backing off
    assert [r.scheduled_for for r in fires_of(store)] == [at("2027-03-01T00:15Z")]


def test_a_non_leader_never_ticks(make_scheduler: MakeScheduler, clock: FakeClock,
                                  store: Store, tmp_path: Path) -> None:
    holder = FileLeadership(tmp_path / "lock")
    assert holder.acquire()
    stop = threading.Event()
    sleeper = Sleeper(clock, stop, limit=3)
    follower = make_scheduler(jobs(QUARTER), leader=FileLeadership(tmp_path / "lock"))
    follower.run_forever(stop, clock, wait=sleeper)
    assert sleeper.waits == [LEADER_RETRY] * 3
    assert store.get_cursors() == {}  # not even a cursor: it never ticked
    holder.release()
    stop.clear()
    sleeper = Sleeper(clock, stop, limit=2)
    follower.run_forever(stop, clock, wait=sleeper)
    assert store.get_cursors() != {}
    assert follower.leader is not None and not follower.leader.is_leader  # released on exit


def test_stop_and_reload_interrupt_the_wait(make_scheduler: MakeScheduler,
                                            clock: FakeClock, store: Store) -> None:
    daily = job("daily", schedule="0 12 * * *", timezone="UTC")
    scheduler: Scheduler = make_scheduler(jobs(daily))
    stop = threading.Event()
    sleeping = threading.Event()

    def wait(seconds: float) -> bool:  # the default sleep, plus a signal that it started
        sleeping.set()
        return clock.wait(scheduler._wake, seconds)

    thread = threading.Thread(target=scheduler.run_forever, args=(stop, clock),
                              kwargs={"wait": wait})
    thread.start()
    try:
        assert sleeping.wait(10)  # waiting MAX_SLEEP on the clock, which does not move
        sleeping.clear()
        scheduler.reload(jobs(daily, QUARTER))  # wakes the loop: it reads the new cursor
        assert sleeping.wait(10)
        assert ("quarter", "job") in store.get_cursors()
    finally:
        stop.set()  # interrupts the wait at once
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_file_leadership_is_exclusive_until_released(tmp_path: Path) -> None:
    first, second = FileLeadership(tmp_path / "db.lock"), FileLeadership(tmp_path / "db.lock")
    assert first.acquire() and first.acquire()
    assert not second.acquire() and not second.is_leader
    assert "pid" in first.who_holds()
    first.release()
    first.release()
    assert second.acquire() and second.is_leader
    second.release()


def test_leadership_for_each_store(store: Store, tmp_path: Path) -> None:
    leader = leadership_for(store.engine)
    assert isinstance(leader, FileLeadership)
    assert leader.path.name == "cadenza.db.scheduler.lock"
    memory = Store.open("sqlite://")
    try:
        assert isinstance(leadership_for(memory.engine), AlwaysLeader)
    finally:
        memory.close()
