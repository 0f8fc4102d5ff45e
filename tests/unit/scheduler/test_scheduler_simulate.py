"""``simulate``: schedules and admission replayed on a virtual clock."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from scheduler_helpers import at, job, jobs
from tests.support.store_helpers import end_run, start_run

from cadenza.clock import FakeClock
from cadenza.config.admission_limits import limits_from_settings
from cadenza.config.schema_jobs import JobConfig
from cadenza.config.schema_settings import Settings
from cadenza.domain.states import RunState
from cadenza.scheduler import simulate as simulation
from cadenza.scheduler.simulate import (
    SimulatedFire,
    SimulationTooLarge,
    history_durations,
    median_durations,
    simulate,
)
from cadenza.store import Store


def run_sim(config: dict[str, JobConfig], start: str, end: str, *, workers: int = 4,
            settings: dict[str, Any] | None = None,
            durations: dict[str, timedelta] | None = None) -> list[SimulatedFire]:
    loaded = Settings.model_validate(settings or {})
    limits = limits_from_settings(loaded, config, "UTC")
    return simulate(config, limits, at(start), at(end), workers=workers, durations=durations)


def table(fires: list[SimulatedFire]) -> list[tuple[str, str, str, str | None]]:
    return [(f.job, f.scheduled_for.strftime("%d %H:%M"), f.outcome,
             f.start.strftime("%d %H:%M") if f.start else None) for f in fires]


def test_dst_gap_and_preset_fires_run_on_time() -> None:
    config = jobs(job("nightly", schedule="30 2 * * *",
                      presets={"early": {"schedule": "0 1 * * *"}}))
    fires = run_sim(config, "2027-03-27T00:00:00+01:00", "2027-03-29T00:00:00+02:00")
    assert [item.as_json() for item in fires] == [
        {"job": "nightly", "schedule": "preset:early", "scheduled_for": "2027-03-27T01:00:00+01:00",
         "outcome": "run", "start": "2027-03-27T01:00:00+01:00", "wait_reason": None},
        {"job": "nightly", "schedule": "job", "scheduled_for": "2027-03-27T02:30:00+01:00",
         "outcome": "run", "start": "2027-03-27T02:30:00+01:00", "wait_reason": None},
        {"job": "nightly", "schedule": "preset:early", "scheduled_for": "2027-03-28T01:00:00+01:00",
         "outcome": "run", "start": "2027-03-28T01:00:00+01:00", "wait_reason": None},
        {"job": "nightly", "schedule": "job", "scheduled_for": "2027-03-28T03:00:00+02:00",
         "outcome": "run", "start": "2027-03-28T03:00:00+02:00", "wait_reason": None},
    ]


def test_interval_includes_its_start_and_excludes_its_end() -> None:
    config = jobs(job("hourly", schedule="0 * * * *", timezone="UTC"))
    fires = run_sim(config, "2027-03-01T01:00:00+00:00", "2027-03-01T03:00:00+00:00")
    assert [f.scheduled_for.strftime("%H:%M") for f in fires] == ["01:00", "02:00"]


def test_overlap_skip_is_missed_and_queue_waits_for_the_previous_run() -> None:
    config = jobs(job("skipper", schedule="0 * * * *", timezone="UTC"),
                  job("queuer", schedule="0 * * * *", timezone="UTC", on_overlap="queue"))
    slow = {"skipper": timedelta(minutes=90), "queuer": timedelta(minutes=90)}
    fires = run_sim(config, "2027-03-01T00:00:00+00:00", "2027-03-01T03:00:00+00:00",
                    durations=slow)
    skipper = [f for f in fires if f.job == "skipper"]
    assert [(f.outcome, f.start and f.start.strftime("%H:%M")) for f in skipper] == [
        ("run", "00:00"), ("missed", None), ("run", "02:00"),
    ]
    assert str(skipper[1].wait_reason).startswith("overlap:")
    queuer = [f for f in fires if f.job == "queuer"]
    assert [f.start.strftime("%H:%M") for f in queuer if f.start] == ["00:00", "01:30", "03:00"]
    assert "max_concurrency" in str(queuer[1].wait_reason)


def test_tag_budget_starts_three_and_says_when_the_rest_may_start() -> None:
    config = jobs(*(job(f"scrape-{k}", schedule="0 9 * * *", timezone="UTC", tags=["scraping"])
                    for k in range(5)))
    fires = run_sim(config, "2027-03-01T00:00:00+00:00", "2027-03-02T00:00:00+00:00",
                    settings={"limits": {"tags": {"scraping": {"budget_per_hour": 3}}}})
    starts = sorted(f.start.strftime("%H:%M") for f in fires if f.start)
    assert starts == ["09:00", "09:00", "09:00", "10:00", "10:00"]
    late = [f for f in fires if f.start and f.start.hour == 10]
    assert all("budget 3/h for tag scraping used; next slot 10:00" in str(f.wait_reason)
               for f in late)


def test_a_run_outside_its_window_waits_for_it() -> None:
    config = jobs(job("office", schedule="0 7 * * *", timezone="UTC",
                      windows=["mon-fri 08:00-18:00"]))
    fires = run_sim(config, "2027-03-05T00:00:00+00:00", "2027-03-06T00:00:00+00:00")
    (only,) = fires
    assert only.outcome == "run" and only.start == at("2027-03-05T08:00:00+00:00")
    assert "outside window" in str(only.wait_reason)


def test_workers_and_global_limit_hold_runs() -> None:
    config = jobs(*(job(f"j{k}", schedule="0 9 * * *", timezone="UTC") for k in range(3)))
    fires = run_sim(config, "2027-03-01T00:00:00+00:00", "2027-03-02T00:00:00+00:00",
                    workers=1)
    assert table(fires) == [("j0", "01 09:00", "run", "01 09:00"),
                            ("j1", "01 09:00", "run", "01 09:01"),
                            ("j2", "01 09:00", "run", "01 09:02")]
    assert fires[2].wait_reason == "no free worker on this node"


def test_a_run_that_would_never_start_in_time_is_skipped() -> None:
    config = jobs(job("slow", schedule="0 9 * * *", timezone="UTC", on_overlap="queue"))
    fires = run_sim(config, "2027-03-01T00:00:00+00:00", "2027-03-03T00:00:00+00:00",
                    durations={"slow": timedelta(days=30)})
    assert [f.outcome for f in fires] == ["run", "skipped"]
    assert fires[1].start is None and "max_concurrency" in str(fires[1].wait_reason)


def test_bad_intervals(monkeypatch: pytest.MonkeyPatch) -> None:
    config = jobs(job("minutely", schedule="* * * * *", timezone="UTC"))
    with pytest.raises(ValueError, match="after its start"):
        run_sim(config, "2027-03-02T00:00:00+00:00", "2027-03-01T00:00:00+00:00")
    monkeypatch.setattr(simulation, "MAX_FIRES", 100)
    with pytest.raises(SimulationTooLarge, match="shorter interval"):
        run_sim(config, "2027-03-01T00:00:00+00:00", "2027-03-02T00:00:00+00:00")


def test_durations_are_medians_of_succeeded_runs(tmp_path: Any) -> None:
    clock = FakeClock("2027-03-01T00:00:00+00:00")
    store = Store.open(f"sqlite:///{(tmp_path / 'c.db').as_posix()}", clock=clock)
    try:
        for minutes in (2, 4, 30):
            run_id = store.create_run("etl", "manual")
            assert run_id is not None
            start_run(store, run_id)
            clock.advance(timedelta(minutes=minutes))
            end_run(store, run_id, RunState.SUCCEEDED)
        failed = store.create_run("etl", "manual")
        assert failed is not None
        start_run(store, failed)
        clock.advance(timedelta(hours=5))
        end_run(store, failed, RunState.FAILED)
        assert history_durations(store, ["etl", "new"]) == {"etl": timedelta(minutes=4)}
    finally:
        store.close()
    assert median_durations({"a": [], "b": [timedelta(seconds=1), timedelta(seconds=3)]}) == {
        "b": timedelta(seconds=2)
    }
