"""Pure decisions: which fires are due, missed, caught up, skipped for overlap; jitter;
the schedules of a job and the merged preview."""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from scheduler_helpers import at, job

from cadenza.domain.states import RunState
from cadenza.scheduler import fires as fires_module
from cadenza.scheduler.fires import (
    CreatedRun,
    DueFires,
    TickResult,
    fires_between,
    log_result,
    plan_job,
    upcoming,
)
from cadenza.scheduler.schedules import policy_of, schedules_of

UTC_ZONE = ZoneInfo("UTC")
RNG = random.Random(7)


def plan(job_fields: dict[str, object], fires: list[str], now: str, active: int = 0,
         rng: random.Random = RNG) -> list[tuple[str, RunState, str | None]]:
    config = job(**job_fields)
    spec = schedules_of(config, UTC_ZONE)[0]
    planned = plan_job(policy_of(config), [DueFires(spec, [at(f) for f in fires])], at(now),
                       active, rng)
    return [(p.scheduled_for.strftime("%d %H:%M"), p.state, p.reason) for p in planned]


DAILY = {"schedule": "0 2 * * *", "timezone": "UTC"}
THREE_DAYS = ["2027-03-01T02:00Z", "2027-03-02T02:00Z", "2027-03-03T02:00Z",
              "2027-03-04T02:00Z"]


def test_grace_boundary_is_inclusive() -> None:
    on_time = plan(DAILY, ["2027-03-01T02:00Z"], "2027-03-01T02:01:00Z")
    assert on_time == [("01 02:00", RunState.QUEUED, None)]
    late = plan(DAILY, ["2027-03-01T02:00Z"], "2027-03-01T02:01:00.000001Z")
    assert late[0][1] is RunState.MISSED
    wider = plan({**DAILY, "missed_grace": "10m"}, ["2027-03-01T02:00Z"], "2027-03-01T02:09Z")
    assert wider[0][1] is RunState.QUEUED


def test_on_missed_skip_records_every_missed_fire_with_its_time() -> None:
    out = plan(DAILY, ["2027-03-01T02:00Z"], "2027-03-01T02:10Z")
    assert len(out) == 1
    _when, state, reason = out[0]
    assert state is RunState.MISSED
    assert reason is not None
    assert "scheduler was not running at 02:00 UTC on 2027-03-01" in reason
    assert "downtime" in reason and "on_missed = skip" in reason


def test_on_missed_run_latest_runs_only_the_latest() -> None:
    out = plan({**DAILY, "on_missed": "run_latest"}, THREE_DAYS, "2027-03-04T02:10Z")
    assert [(w, s) for w, s, _ in out] == [
        ("01 02:00", RunState.MISSED), ("02 02:00", RunState.MISSED),
        ("03 02:00", RunState.MISSED), ("04 02:00", RunState.QUEUED),
    ]
    assert "runs only the latest missed fire (02:00 UTC on 2027-03-04)" in str(out[0][2])
    assert "catch-up" in str(out[3][2])


@pytest.mark.reliability_case(15)
def test_on_missed_run_all_runs_the_most_recent_catchup_max() -> None:
    out = plan({**DAILY, "on_missed": "run_all", "catchup_max": 2}, THREE_DAYS,
               "2027-03-04T02:10Z")
    assert [s for _, s, _ in out] == [RunState.MISSED, RunState.MISSED, RunState.QUEUED,
                                      RunState.QUEUED]
    assert "catchup_max = 2" in str(out[0][2])
    everything = plan({**DAILY, "on_missed": "run_all", "catchup_max": 10}, THREE_DAYS,
                      "2027-03-04T02:10Z")
    assert {s for _, s, _ in everything} == {RunState.QUEUED}
    none = plan({**DAILY, "on_missed": "run_all", "catchup_max": 0}, THREE_DAYS,
                "2027-03-04T02:10Z")
    assert {s for _, s, _ in none} == {RunState.MISSED}


def test_missed_and_on_time_fires_in_one_tick() -> None:
    quarter = {"schedule": "*/15 * * * *", "timezone": "UTC", "on_missed": "run_latest",
               "on_overlap": "queue"}
    out = plan(quarter, ["2027-03-01T02:00Z", "2027-03-01T02:15Z", "2027-03-01T02:30Z"],
               "2027-03-01T02:30:20Z")
    assert [(w, s) for w, s, _ in out] == [
        ("01 02:00", RunState.MISSED), ("01 02:15", RunState.QUEUED),
        ("01 02:30", RunState.QUEUED),
    ]


@pytest.mark.reliability_case(51)
def test_overlap_skip_and_queue() -> None:
    skipped = plan(DAILY, ["2027-03-01T02:00Z"], "2027-03-01T02:00:05Z", active=1)
    assert skipped[0][1] is RunState.MISSED
    assert str(skipped[0][2]).startswith("overlap: 1 run of nightly already queued or running")
    queued = plan({**DAILY, "on_overlap": "queue"}, ["2027-03-01T02:00Z"],
                  "2027-03-01T02:00:05Z", active=1)
    assert queued[0][1] is RunState.QUEUED
    wide = plan({**DAILY, "max_concurrency": 2}, ["2027-03-01T02:00Z"],
                "2027-03-01T02:00:05Z", active=1)
    assert wide[0][1] is RunState.QUEUED


def test_runs_queued_in_the_same_tick_count_toward_overlap() -> None:
    minutely = {"schedule": "* * * * *", "timezone": "UTC", "missed_grace": "5m"}
    out = plan(minutely, ["2027-03-01T02:00Z", "2027-03-01T02:01Z"], "2027-03-01T02:01:10Z")
    assert [s for _, s, _ in out] == [RunState.QUEUED, RunState.MISSED]


def test_catch_up_runs_do_not_overlap_skip_each_other() -> None:
    out = plan({**DAILY, "on_missed": "run_all", "catchup_max": 2}, THREE_DAYS,
               "2027-03-04T02:10Z", active=0)
    assert sum(1 for _, s, _ in out if s is RunState.QUEUED) == 2


def test_jitter_delays_not_before_only() -> None:
    config = job(schedule="0 2 * * *", timezone="UTC", jitter="5m")
    spec = schedules_of(config, UTC_ZONE)[0]
    fire = at("2027-03-01T02:00Z")
    delays = set()
    for seed in range(20):
        planned = plan_job(policy_of(config), [DueFires(spec, [fire])], fire, 0,
                           random.Random(seed))[0]
        assert planned.scheduled_for == fire
        assert planned.not_before is not None
        delay = planned.not_before - fire
        assert timedelta(0) <= delay <= timedelta(minutes=5)
        delays.add(delay)
    assert len(delays) > 10
    plain = plan_job(policy_of(job(schedule="0 2 * * *")), [DueFires(spec, [fire])], fire, 0,
                     RNG)[0]
    assert plain.not_before is None


def test_schedules_of_a_job_and_their_enabled_rules() -> None:
    config = job(
        schedule="0 2 * * *",
        enabled=False,
        timezone="America/New_York",
        presets={
            "month-end": {"schedule": "0 6 1 * *", "params": {"period": "prev"},
                          "step_args": {"load": {"limit": 5}}, "disabled_steps": ["notify"],
                          "log_level": "DEBUG", "timezone": "Europe/Paris"},
            "off": {"schedule": "0 7 * * *", "enabled": False},
            "manual-only": {"params": {"period": "x"}},
        },
    )
    specs = {s.name: s for s in schedules_of(config, UTC_ZONE)}
    assert set(specs) == {"job", "preset:month-end", "preset:off"}
    assert not specs["job"].enabled and "job is disabled" in str(specs["job"].disabled_because)
    assert specs["preset:month-end"].enabled
    assert specs["preset:month-end"].zone.key == "Europe/Paris"
    assert specs["preset:off"].zone.key == "America/New_York"
    assert not specs["preset:off"].enabled
    assert specs["preset:month-end"].overrides == {
        "preset": "month-end", "params": {"period": "prev"},
        "step_args": {"load": {"limit": 5}}, "disabled_steps": ["notify"], "log_level": "DEBUG",
    }
    assert specs["job"].overrides == {}
    assert schedules_of(job(), UTC_ZONE) == []
    assert schedules_of(job(schedule="@daily", timezone=None), ZoneInfo("Asia/Tokyo"))[
        0].zone.key == "Asia/Tokyo"


def test_upcoming_merges_schedules_in_time_order_and_leaves_out_disabled_ones() -> None:
    config = job(schedule="0 2 * * *", presets={
        "early": {"schedule": "0 1 * * *"},
        "off": {"schedule": "30 1 * * *", "enabled": False},
    })
    fires = upcoming(schedules_of(config, UTC_ZONE), at("2027-03-26T23:30Z"), 5)
    assert [(f.local.isoformat(), f.schedule, f.dst) for f in fires] == [
        ("2027-03-27T01:00:00+01:00", "preset:early", None),
        ("2027-03-27T02:00:00+01:00", "job", None),
        ("2027-03-28T01:00:00+01:00", "preset:early", None),
        ("2027-03-28T03:00:00+02:00", "job", "gap"),
        ("2027-03-29T01:00:00+02:00", "preset:early", None),
    ]
    assert fires[3].as_json() == {"at": "2027-03-28T03:00:00+02:00",
                                  "utc": "2027-03-28T01:00:00Z", "schedule": "job",
                                  "dst": "gap", "calendar": None}
    assert fires[3].day_name == "Sunday"


def test_fires_between_is_half_open() -> None:
    spec = schedules_of(job(schedule="*/15 * * * *", timezone="UTC"), UTC_ZONE)[0]
    got = fires_between(spec, at("2027-03-01T02:00Z"), at("2027-03-01T03:00Z"))
    assert [f.strftime("%H:%M") for f in got] == ["02:15", "02:30", "02:45", "03:00"]
    assert all(f.tzinfo is UTC for f in got)
    assert fires_between(spec, at("2027-03-01T03:00Z"), at("2027-03-01T02:00Z")) == []


@pytest.mark.parametrize("tz", ["Europe/Paris", "America/New_York"])
def test_fires_between_spans_the_fold_with_distinct_instants(tz: str) -> None:
    spec = schedules_of(job(schedule="0 * * * *", timezone=tz), UTC_ZONE)[0]
    start = datetime(2027, 10, 30, tzinfo=UTC)
    got = fires_between(spec, start, start + timedelta(days=9))
    assert len(got) == len(set(got)) == 9 * 24


def test_a_tick_logs_its_queued_fires_per_due_time_and_each_missed_one(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One INFO line per due time (per 50 fires): a crowded minute is not a logging record
    per run; a lone fire keeps its line, and every missed fire its WARNING."""
    monkeypatch.setattr(fires_module, "QUEUED_PER_LINE", 2)
    due, later = at("2027-03-01T02:00Z"), at("2027-03-01T02:05Z")

    def run(job_id: str, when: datetime, state: RunState = RunState.QUEUED,
            schedule: str = "job") -> CreatedRun:
        return CreatedRun(f"r-{job_id}", job_id, schedule, when, state,
                          "missed by 3 min" if state is RunState.MISSED else None, None)

    created = (run("a", due), run("b", due, schedule="preset:eu"),
               run("gone", due, RunState.MISSED),
               run("c", due), run("d", later))
    caplog.set_level(logging.INFO, logger="cadenza.scheduler")
    log_result(TickResult(due, created, 0, None))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", "gone job missed 2027-03-01T02:00:00+00:00: missed by 3 min"),
        ("INFO", "2 runs queued for 2027-03-01T02:00:00+00:00: a (job), b (preset:eu)"),
        ("INFO", "c job queued for 2027-03-01T02:00:00+00:00"),
        ("INFO", "d job queued for 2027-03-01T02:05:00+00:00"),
    ]
