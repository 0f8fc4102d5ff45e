"""The scheduler on a business calendar, on a FakeClock and a real SQLite file: a fire on a
holiday is recorded MISSED with the holiday's name (no missed alert), an ordinary weekend is
no fire, a moved fire runs on the next working day with its reason, previews say which."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from scheduler_helpers import MakeScheduler, at, fires_of, job, jobs

from cadenza.clock import FakeClock
from cadenza.domain.calendar import Calendar
from cadenza.domain.states import RunState
from cadenza.scheduler.fires import upcoming
from cadenza.scheduler.schedules import schedules_of
from cadenza.store import Store
from cadenza.store.hooks import StoreHooks

FRANCE = {"france": Calendar("france", country="FR")}


def config(*items: Any) -> SimpleNamespace:
    """What the scheduler reads of a loaded configuration: jobs and the calendars."""
    return SimpleNamespace(jobs=jobs(*items), settings=SimpleNamespace(calendar_objects=FRANCE))


def run_days(make_scheduler: MakeScheduler, clock: FakeClock, conf: Any, start: str,
             days: int) -> None:
    scheduler = make_scheduler(conf, lookahead=timedelta(0))
    clock.set(start)
    scheduler.tick(clock.now())
    for _ in range(days * 24):
        clock.advance(timedelta(hours=1))
        scheduler.tick(clock.now())


def test_14_juillet_is_recorded_as_skipped_with_its_name_and_alerts_nobody(
        make_scheduler: MakeScheduler, clock: FakeClock, store: Store) -> None:
    alerted: list[object] = []
    store.use_hooks(StoreHooks(missed=(lambda conn, missed, now: alerted.extend(missed),)))
    nightly = job("nightly", schedule="0 2 * * *", calendar="france", days="business",
                  max_concurrency=10)  # nothing runs them here: no overlap
    # 2027-07-14 is a Wednesday; 10 and 11 July a weekend.
    run_days(make_scheduler, clock, config(nightly), "2027-07-09T12:00:00+02:00", 7)
    runs = [(r.scheduled_for.astimezone(at("2027-07-01T00:00:00+02:00").tzinfo).date()
             .isoformat(), r.state, r.reason) for r in fires_of(store, "nightly")]
    assert [(d, s) for d, s, _ in runs] == [
        ("2027-07-12", RunState.QUEUED), ("2027-07-13", RunState.QUEUED),
        ("2027-07-14", RunState.MISSED), ("2027-07-15", RunState.QUEUED),
        ("2027-07-16", RunState.QUEUED),
    ]
    reason = runs[2][2] or ""
    assert reason.startswith("day off: 2027-07-14 Fête nationale (calendar france")
    assert alerted == []  # a holiday is no missed fire to alert about


def test_a_missed_fire_on_a_working_day_still_alerts(
        make_scheduler: MakeScheduler, clock: FakeClock, store: Store) -> None:
    alerted: list[object] = []
    store.use_hooks(StoreHooks(missed=(lambda conn, missed, now: alerted.extend(missed),)))
    nightly = job("nightly", schedule="0 2 * * *", calendar="france", days="business")
    conf = config(nightly)
    clock.set("2027-07-12T12:00:00+02:00")
    make_scheduler(conf).tick(clock.now())
    clock.set("2027-07-13T12:00:00+02:00")  # down across 13 July 02:00
    make_scheduler(conf).tick(clock.now())
    assert len(alerted) == 1


def test_shift_next_runs_a_holiday_fire_the_next_working_day_with_its_reason(
        make_scheduler: MakeScheduler, clock: FakeClock, store: Store) -> None:
    monthly = job("monthly", schedule="0 6 1 * *", calendar="france", days="business",
                  shift="next")
    # 1 May 2027 is a Saturday (and a holiday): Monday 3 May.
    run_days(make_scheduler, clock, config(monthly), "2027-04-30T12:00:00+02:00", 4)
    runs = fires_of(store, "monthly")
    assert [(r.scheduled_for, r.state) for r in runs] == [
        (at("2027-05-03T06:00:00+02:00"), RunState.QUEUED)]
    assert runs[0].reason == "moved from 2027-05-01 Fête du Travail (calendar france)"


def test_the_preview_marks_the_skipped_and_the_nth_working_day() -> None:
    nightly = job("nightly", schedule="0 2 * * *", calendar="france", days="business")
    specs = schedules_of(nightly, None, FRANCE)
    fires = upcoming(specs, at("2027-07-13T12:00:00+02:00"), 3, "fr")
    assert [(f.local.date().isoformat(), f.skipped) for f in fires] == [
        ("2027-07-14", True), ("2027-07-15", False), ("2027-07-16", False)]
    shown = fires[0].as_json()["calendar"]
    assert shown["kind"] == "skipped"
    assert shown["days"] == [{"date": "2027-07-14", "name": "Fête nationale"}]
    third = job("third", schedule="0 6 * * *", calendar="france", business_day=3)
    fires = upcoming(schedules_of(third, None, FRANCE), at("2027-04-30T00:00:00+02:00"), 2)
    # May 2027: 1 (Sat, holiday), 3, 4, 5 → the 5th; June: 1, 2, 3 → the 3rd.
    assert [f.local.date().isoformat() for f in fires] == ["2027-05-05", "2027-06-03"]
    assert fires[0].as_json()["calendar"]["note"].startswith("3rd working day of the month")


def test_simulate_shows_a_holiday_fire_as_missed_with_its_reason() -> None:
    from cadenza.config.admission_limits import limits_from_settings
    from cadenza.config.schema_settings import Settings
    from cadenza.scheduler.simulate import simulate

    nightly = job("nightly", schedule="0 2 * * *", calendar="france", days="business")
    limits = limits_from_settings(Settings.model_validate({}), jobs(nightly), "UTC")
    fires = simulate(jobs(nightly), limits, at("2027-07-13T00:00:00+02:00"),
                     at("2027-07-16T00:00:00+02:00"), workers=2, calendars=FRANCE)
    shown = [(f.scheduled_for.date().isoformat(), f.outcome, f.wait_reason) for f in fires]
    assert [s[:2] for s in shown] == [("2027-07-13", "run"), ("2027-07-14", "missed"),
                                      ("2027-07-15", "run")]
    assert (shown[1][2] or "").startswith("day off: 2027-07-14 Fête nationale")
