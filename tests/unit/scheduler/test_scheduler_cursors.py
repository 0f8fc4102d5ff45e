"""Cursors: crash safety between deciding and recording, and config reloads (no backfill)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from scheduler_helpers import MakeScheduler, at, fires_of, job, jobs

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreError
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.tables import schedule_cursors

HOURLY = job("hourly", schedule="0 * * * *", timezone="UTC", on_overlap="queue")


@pytest.mark.reliability_case(39)
def test_a_crash_before_the_commit_records_nothing_then_exactly_once(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock.set("2027-03-01T00:30:00+00:00")
    make_scheduler(jobs(HOURLY)).tick(clock.now())
    clock.set("2027-03-01T01:00:05+00:00")
    crashing = make_scheduler(jobs(HOURLY))

    def crash(*args: Any, **kwargs: Any) -> None:
        raise StoreError("disk I/O error (simulated crash between runs and cursor)")

    monkeypatch.setattr(store, "advance_cursors", crash)
    with pytest.raises(StoreError):
        crashing.tick(clock.now())
    monkeypatch.undo()
    assert fires_of(store) == []  # the runs' insert was rolled back with the cursor
    assert store.get_cursors()[("hourly", "job")] == at("2027-03-01T00:30:00+00:00")
    assert len(crashing.tick(clock.now()).created) == 1  # retried by the same scheduler
    assert make_scheduler(jobs(HOURLY)).tick(clock.now()).created == ()  # and by a new one
    assert len(fires_of(store)) == 1


@pytest.mark.reliability_case(39)
def test_a_cursor_left_behind_never_doubles_a_fire(make_scheduler: MakeScheduler,
                                                   clock: FakeClock, store: Store) -> None:
    clock.set("2027-03-01T00:30:00+00:00")
    make_scheduler(jobs(HOURLY)).tick(clock.now())
    clock.set("2027-03-01T01:00:05+00:00")
    make_scheduler(jobs(HOURLY)).tick(clock.now())
    with store.write() as conn:  # as if the cursor update had been lost
        conn.execute(sa.update(schedule_cursors).values(last_fire=at("2027-03-01T00:30Z")))
    result = make_scheduler(jobs(HOURLY)).tick(clock.now())
    assert result.created == () and result.already_recorded == 1
    assert len(fires_of(store)) == 1
    assert store.get_cursors()[("hourly", "job")] == at("2027-03-01T01:00:00+00:00")


def test_cursors_only_move_forward(store: Store) -> None:
    store.init_cursors([("a", "job")], at("2027-03-01T01:00Z"))
    store.advance_cursors({("a", "job"): at("2027-03-01T02:00Z")}, create=False)
    store.advance_cursors({("a", "job"): at("2027-03-01T01:30Z")}, create=False)  # stays
    assert store.init_cursors([("a", "job")], at("2027-03-01T00:00Z")) == 0
    assert store.get_cursors([("a", "job"), ("b", "job")]) == {
        ("a", "job"): at("2027-03-01T02:00Z")
    }
    assert store.get_cursors([]) == {}


def test_reload_with_a_changed_schedule_does_not_backfill(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    daily = job("report", schedule="0 2 * * *", timezone="UTC")
    scheduler = make_scheduler(jobs(daily))
    clock.set("2027-03-01T00:00:00+00:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T10:00:00+00:00")  # the daily fire at 02:00 is long missed
    minutely = job("report", schedule="*/10 * * * *", timezone="UTC", on_overlap="queue")
    scheduler.reload(jobs(minutely))
    # The old config's due fire was recorded first; the new expression owes nothing before now.
    assert [(r.scheduled_for, r.state) for r in fires_of(store)] == [
        (at("2027-03-01T02:00Z"), RunState.MISSED)
    ]
    assert scheduler.next_wakeup(clock.now()) == at("2027-03-01T10:10Z")
    clock.set("2027-03-01T10:10:01+00:00")
    assert len(scheduler.tick(clock.now()).queued) == 1


def test_removed_then_re_added_schedule_starts_from_now(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    keeper = job("keeper", schedule="0 3 * * *", timezone="UTC")
    report = job("report", schedule="0 * * * *", timezone="UTC", on_overlap="queue")
    scheduler = make_scheduler(jobs(keeper, report))
    clock.set("2027-03-01T00:30:00+00:00")
    scheduler.tick(clock.now())
    scheduler.reload(jobs(keeper))
    assert ("report", "job") in store.get_cursors()  # kept
    clock.set("2027-03-01T05:30:00+00:00")
    scheduler.tick(clock.now())
    scheduler.reload(jobs(keeper, report))
    clock.set("2027-03-01T06:00:01+00:00")
    scheduler.tick(clock.now())
    assert [r.scheduled_for for r in fires_of(store, "report")] == [at("2027-03-01T06:00Z")]


def test_removed_while_down_then_re_added_does_not_backfill_the_gap(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    report = job("report", schedule="0 * * * *", timezone="UTC", on_overlap="queue")
    clock.set("2027-03-01T00:30:00+00:00")
    make_scheduler(jobs(report)).tick(clock.now())
    clock.set("2027-03-02T00:30:00+00:00")
    make_scheduler(jobs()).tick(clock.now())  # started a day later without it
    assert len(fires_of(store)) == 0
    clock.set("2027-03-02T01:00:01+00:00")
    make_scheduler(jobs(report)).tick(clock.now())  # re-added
    assert [r.scheduled_for for r in fires_of(store)] == [at("2027-03-02T01:00Z")]


def test_disabled_then_enabled_owes_nothing(make_scheduler: MakeScheduler, clock: FakeClock,
                                            store: Store) -> None:
    on = job("report", schedule="0 * * * *", timezone="UTC", on_overlap="queue")
    off = job("report", schedule="0 * * * *", timezone="UTC", on_overlap="queue",
              enabled=False)
    scheduler = make_scheduler(jobs(on))
    clock.set("2027-03-01T00:30:00+00:00")
    scheduler.tick(clock.now())
    scheduler.reload(jobs(off))
    clock.set("2027-03-01T04:30:00+00:00")
    assert scheduler.tick(clock.now()).created == ()
    assert scheduler.next_wakeup(clock.now()) is None
    scheduler.reload(jobs(on))
    clock.set("2027-03-01T05:00:01+00:00")
    scheduler.tick(clock.now())
    assert [r.scheduled_for for r in fires_of(store)] == [at("2027-03-01T05:00Z")]


def test_a_new_preset_schedule_starts_at_the_reload(make_scheduler: MakeScheduler,
                                                    clock: FakeClock, store: Store) -> None:
    plain = job("report", schedule="0 4 * * *", timezone="UTC")
    with_preset = job("report", schedule="0 4 * * *", timezone="UTC",
                      presets={"hourly": {"schedule": "0 * * * *", "params": {}}})
    scheduler = make_scheduler(jobs(plain))
    clock.set("2027-03-01T00:30:00+00:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T02:30:00+00:00")
    scheduler.reload(jobs(with_preset))
    assert scheduler.next_wakeup(clock.now()) == clock.now()  # new cursor to create
    clock.set("2027-03-01T03:00:01+00:00")
    scheduler.tick(clock.now())
    assert [(r.schedule, r.scheduled_for) for r in fires_of(store)] == [
        ("preset:hourly", at("2027-03-01T03:00Z"))
    ]
    assert store.get_cursors()[("report", "preset:hourly")] == at("2027-03-01T03:00Z")


@pytest.mark.reliability_case(14)
def test_a_changed_time_zone_neither_doubles_nor_backfills(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    paris = job("report", schedule="0 2 * * *", timezone="Europe/Paris")
    new_york = job("report", schedule="0 2 * * *", timezone="America/New_York")
    scheduler = make_scheduler(jobs(paris))
    clock.set("2027-03-01T00:00:00+00:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T01:00:30+00:00")  # 02:00 in Paris: fires
    scheduler.tick(clock.now())
    clock.set("2027-03-01T03:00:00+00:00")
    scheduler.reload(jobs(new_york))  # 02:00 in New York is 07:00 UTC, still ahead
    clock.set("2027-03-01T07:00:30+00:00")
    scheduler.tick(clock.now())
    assert [r.scheduled_for for r in fires_of(store)] == [
        at("2027-03-01T01:00:00+00:00"), at("2027-03-01T07:00:00+00:00"),
    ]
    clock.set("2027-03-01T09:00:00+00:00")
    scheduler.reload(jobs(paris))  # tomorrow 02:00 Paris is next; nothing owed today
    assert scheduler.next_wakeup(clock.now()) == at("2027-03-02T01:00:00+00:00")
