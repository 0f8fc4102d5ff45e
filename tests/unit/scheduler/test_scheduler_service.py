"""The scheduler service on a FakeClock and a real SQLite file: fires become runs once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from scheduler_helpers import MakeScheduler, at, fires_of, job, jobs, states

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.store import Store

NIGHTLY = job("nightly", schedule="0 2 * * *")  # Europe/Paris


def stopped_between(make_scheduler: MakeScheduler, clock: FakeClock, config: object,
                    stop: str, start: str) -> None:
    """A server that ran until ``stop``, then was down until ``start`` (a new process)."""
    clock.set(stop)
    make_scheduler(config).tick(clock.now())
    clock.set(start)
    make_scheduler(config).tick(clock.now())


def test_first_start_does_not_backfill(make_scheduler: MakeScheduler, clock: FakeClock,
                                       store: Store) -> None:
    clock.set("2027-03-01T12:00:00+01:00")
    result = make_scheduler(jobs(NIGHTLY)).tick(clock.now())
    assert result.created == ()
    assert fires_of(store) == []
    assert result.next_wakeup == at("2027-03-02T02:00:00+01:00")
    assert store.get_cursors() == {("nightly", "job"): at("2027-03-01T12:00:00+01:00")}


def test_a_fire_on_time_is_queued_with_its_schedule(make_scheduler: MakeScheduler,
                                                    clock: FakeClock, store: Store) -> None:
    config = jobs(job("nightly", schedule="0 2 * * *", priority=5))
    scheduler = make_scheduler(config)
    clock.set("2027-03-01T01:00:00+01:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T02:00:00.02+01:00")
    result = scheduler.tick(clock.now())
    assert len(result.queued) == 1
    run = store.get_run(result.queued[0].run_id)
    assert run is not None
    assert (run.state, run.trigger, run.schedule) == (RunState.QUEUED, "scheduled", "job")
    assert run.scheduled_for == at("2027-03-01T02:00:00+01:00")
    assert run.priority == 5 and run.not_before is None and run.overrides == {}
    assert store.get_cursors()[("nightly", "job")] == run.scheduled_for
    assert result.next_wakeup == at("2027-03-02T02:00:00+01:00")


@pytest.mark.reliability_case(15)
def test_downtime_across_a_fire_with_skip_records_one_missed_run(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    stopped_between(make_scheduler, clock, jobs(NIGHTLY), "2027-03-01T01:55:00+01:00",
                    "2027-03-01T02:10:00+01:00")
    runs = fires_of(store)
    assert states(runs) == [("2027-03-01T01:00:00+00:00", RunState.MISSED)]
    assert "scheduler was not running at 02:00 Europe/Paris on 2027-03-01" in str(runs[0].reason)
    assert "downtime" in str(runs[0].reason)
    events = store.list_events(run_id=runs[0].id)
    assert [e.event_type for e in events] == ["RUN_MISSED"]


@pytest.mark.reliability_case(15)
def test_downtime_with_run_latest_gives_one_run(make_scheduler: MakeScheduler,
                                                clock: FakeClock, store: Store) -> None:
    config = jobs(job("nightly", schedule="0 2 * * *", on_missed="run_latest"))
    stopped_between(make_scheduler, clock, config, "2027-03-01T01:55:00+01:00",
                    "2027-03-01T02:10:00+01:00")
    runs = fires_of(store)
    assert states(runs) == [("2027-03-01T01:00:00+00:00", RunState.QUEUED)]
    assert "catch-up" in str(runs[0].reason)


@pytest.mark.reliability_case(15)
def test_three_days_down_with_run_all_and_catchup_max_two(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    config = jobs(job("nightly", schedule="0 2 * * *", on_missed="run_all", catchup_max=2))
    stopped_between(make_scheduler, clock, config, "2027-03-01T01:55:00+01:00",
                    "2027-03-04T02:10:00+01:00")
    assert states(fires_of(store)) == [
        ("2027-03-01T01:00:00+00:00", RunState.MISSED),
        ("2027-03-02T01:00:00+00:00", RunState.MISSED),
        ("2027-03-03T01:00:00+00:00", RunState.QUEUED),
        ("2027-03-04T01:00:00+00:00", RunState.QUEUED),
    ]


def test_missed_grace_boundary(make_scheduler: MakeScheduler, clock: FakeClock,
                               store: Store) -> None:
    config = jobs(NIGHTLY, job("other", schedule="0 3 * * *"))
    scheduler = make_scheduler(config)
    clock.set("2027-03-01T01:00:00+01:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T02:01:00+01:00")  # exactly missed_grace (60s) late: on time
    scheduler.tick(clock.now())
    clock.set("2027-03-01T03:01:00.000001+01:00")  # a microsecond more: missed
    scheduler.tick(clock.now())
    assert [r.state for r in fires_of(store, "nightly")] == [RunState.QUEUED]
    assert [r.state for r in fires_of(store, "other")] == [RunState.MISSED]


def test_overlap_skip_records_missed_and_queue_queues(make_scheduler: MakeScheduler,
                                                      clock: FakeClock, store: Store) -> None:
    config = jobs(NIGHTLY, job("queueing", schedule="0 2 * * *", on_overlap="queue"))
    clock.set("2027-03-01T01:00:00+01:00")
    scheduler = make_scheduler(config)
    scheduler.tick(clock.now())
    store.create_run("nightly", "manual")
    store.create_run("queueing", "manual")
    clock.set("2027-03-01T02:00:01+01:00")
    scheduler.tick(clock.now())
    skipped = [r for r in fires_of(store, "nightly") if r.trigger == "scheduled"]
    assert [r.state for r in skipped] == [RunState.MISSED]
    assert str(skipped[0].reason).startswith("overlap:")
    queued = [r for r in fires_of(store, "queueing") if r.trigger == "scheduled"]
    assert [r.state for r in queued] == [RunState.QUEUED]


def test_a_preset_schedule_fires_with_its_values_while_the_job_is_disabled(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    config = jobs(job(
        "sales", schedule="0 2 * * *", enabled=False, priority=3,
        params={"period": "current"},
        presets={"month-end": {"schedule": "0 6 1 * *", "params": {"period": "previous"},
                               "log_level": "DEBUG", "disabled_steps": ["notify"]}},
    ))
    scheduler = make_scheduler(config)
    clock.set("2027-02-28T12:00:00+01:00")
    scheduler.tick(clock.now())
    for stamp in ("2027-03-01T02:00:05+01:00", "2027-03-01T06:00:05+01:00"):
        clock.set(stamp)
        scheduler.tick(clock.now())
    runs = fires_of(store)
    assert [(r.schedule, r.state) for r in runs] == [("preset:month-end", RunState.QUEUED)]
    assert runs[0].scheduled_for == at("2027-03-01T06:00:00+01:00")
    assert runs[0].priority == 3
    assert runs[0].overrides == {
        "preset": "month-end", "params": {"period": "previous"}, "step_args": {},
        "disabled_steps": ["notify"], "log_level": "DEBUG",
    }


def test_jitter_sets_not_before_and_keeps_scheduled_for(make_scheduler: MakeScheduler,
                                                        clock: FakeClock, store: Store) -> None:
    config = jobs(job("nightly", schedule="0 2 * * *", jitter="10m"))
    scheduler = make_scheduler(config)
    clock.set("2027-03-01T01:00:00+01:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T02:00:00+01:00")
    scheduler.tick(clock.now())
    (run,) = fires_of(store)
    assert run.scheduled_for == at("2027-03-01T02:00:00+01:00")
    assert run.not_before is not None
    assert timedelta(0) <= run.not_before - run.scheduled_for <= timedelta(minutes=10)


@pytest.mark.reliability_case(48)
def test_a_clock_stepping_back_never_refires(make_scheduler: MakeScheduler, clock: FakeClock,
                                             store: Store) -> None:
    scheduler = make_scheduler(jobs(NIGHTLY))
    clock.set("2027-03-01T01:00:00+01:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T02:00:10+01:00")
    assert len(scheduler.tick(clock.now()).created) == 1
    clock.set("2027-03-01T01:30:00+01:00")  # one hour... and a half back
    assert scheduler.tick(clock.now()).created == ()
    assert scheduler.next_wakeup(clock.now()) == at("2027-03-02T02:00:00+01:00")
    clock.set("2027-03-01T02:00:10+01:00")
    assert scheduler.tick(clock.now()).created == ()
    # A new process after the step back does not refire either.
    assert make_scheduler(jobs(NIGHTLY)).tick(clock.now()).created == ()
    assert len(fires_of(store)) == 1


@pytest.mark.reliability_case(48)
def test_a_clock_stepping_forward_is_downtime(make_scheduler: MakeScheduler,
                                             clock: FakeClock, store: Store) -> None:
    hourly = jobs(job("hourly", schedule="0 * * * *", timezone="UTC"))
    scheduler = make_scheduler(hourly)
    clock.set("2027-03-01T00:30:00+00:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T03:30:00+00:00")
    result = scheduler.tick(clock.now())
    assert [c.state for c in result.created] == [RunState.MISSED] * 3
    assert result.next_wakeup == at("2027-03-01T04:00:00+00:00")


@pytest.mark.reliability_case(12)
def test_new_york_autumn_fold_through_the_service(make_scheduler: MakeScheduler,
                                                  clock: FakeClock, store: Store) -> None:
    config = jobs(job("hourly", schedule="0 * * * *", timezone="America/New_York",
                      on_overlap="queue"),
                  job("fixed", schedule="30 1 * * *", timezone="America/New_York"))
    scheduler = make_scheduler(config)
    clock.set("2027-11-07T00:00:00-04:00")
    scheduler.tick(clock.now())
    ticks = 0
    while clock.now() < at("2027-11-07T04:00:00-05:00"):
        wake = scheduler.next_wakeup(clock.now())
        assert wake is not None
        clock.set(wake)
        scheduler.tick(clock.now())
        ticks += 1
    hourly = [r.scheduled_for.isoformat() for r in fires_of(store, "hourly")]
    assert hourly == [
        "2027-11-07T05:00:00+00:00",  # 01:00 EDT
        "2027-11-07T06:00:00+00:00",  # 01:00 EST
        "2027-11-07T07:00:00+00:00",
        "2027-11-07T08:00:00+00:00",
        "2027-11-07T09:00:00+00:00",
    ]
    assert [r.scheduled_for.isoformat() for r in fires_of(store, "fixed")] == [
        "2027-11-07T05:30:00+00:00",  # 01:30 EDT, once
    ]
    assert {r.state for r in fires_of(store)} == {RunState.QUEUED}
    assert ticks == 6


@pytest.mark.reliability_case(11)
def test_paris_spring_gap_through_the_service(make_scheduler: MakeScheduler,
                                              clock: FakeClock, store: Store) -> None:
    config = jobs(job("quarter", schedule="*/15 * * * *", on_overlap="queue"),
                  job("fixed", schedule="30 2 * * *"))
    scheduler = make_scheduler(config)
    clock.set("2027-03-28T01:40:00+01:00")
    scheduler.tick(clock.now())
    while clock.now() < at("2027-03-28T03:20:00+02:00"):
        wake = scheduler.next_wakeup(clock.now())
        assert wake is not None
        clock.set(wake)
        scheduler.tick(clock.now())
    quarter = [r.scheduled_for.isoformat() for r in fires_of(store, "quarter")]
    assert quarter == [
        "2027-03-28T00:45:00+00:00",  # 01:45 CET
        "2027-03-28T01:00:00+00:00",  # 03:00 CEST: nothing in the gap
        "2027-03-28T01:15:00+00:00",
        "2027-03-28T01:30:00+00:00",
    ]
    assert [r.scheduled_for.isoformat() for r in fires_of(store, "fixed")] == [
        "2027-03-28T01:00:00+00:00",  # 03:00 CEST, right after the gap
    ]


def test_next_wakeup(make_scheduler: MakeScheduler, clock: FakeClock) -> None:
    clock.set("2027-03-01T12:00:00+00:00")
    scheduler = make_scheduler(jobs(job("a", schedule="0 13 * * *", timezone="UTC"),
                                    job("b", schedule="30 12 * * *", timezone="UTC"),
                                    job("manual")))
    assert scheduler.next_wakeup(clock.now()) == clock.now()  # cursors not read yet
    scheduler.tick(clock.now())
    assert scheduler.next_wakeup(clock.now()) == at("2027-03-01T12:30:00+00:00")
    assert make_scheduler(jobs(job("manual"))).tick(clock.now()).next_wakeup is None


@pytest.mark.parametrize("jobs_count", [3])
def test_many_jobs_due_together_are_all_recorded(make_scheduler: MakeScheduler,
                                                 clock: FakeClock, store: Store,
                                                 jobs_count: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from cadenza.scheduler import service

    monkeypatch.setattr(service, "RUNS_PER_TRANSACTION", 2)  # force several transactions
    config = jobs(*(job(f"j{k}", schedule="*/5 * * * *", timezone="UTC", on_missed="run_all",
                        on_overlap="queue") for k in range(jobs_count)))
    clock.set("2027-03-01T00:00:00+00:00")
    make_scheduler(config).tick(clock.now())
    clock.set("2027-03-01T01:00:00+00:00")
    result = make_scheduler(config).tick(clock.now())
    assert len(result.created) == jobs_count * 12
    for k in range(jobs_count):
        assert len(fires_of(store, f"j{k}")) == 12
    assert store.get_cursors()[("j0", "job")] == at("2027-03-01T01:00:00+00:00")
