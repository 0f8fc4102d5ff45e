"""Parameters and step configs of a run (SPEC §5): precedence, dates in the job's zone,
rendering except raw fields, errors naming the step and the token."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.states import RunState
from cadenza.executor.plan import ConfigCache, PlanError, plan_run, plan_step
from cadenza.steps.registry import registry
from cadenza.store.records import RunRecord

UTC_ZONE = ZoneInfo("UTC")


def _job(**fields: Any) -> JobConfig:
    types = registry()
    steps = fields.pop("steps", [])
    job = JobConfig.model_validate({"id": "j", **fields})
    return job.model_copy(update={"steps": [
        types[s["type"]].Config.model_validate(s) for s in steps]})


def _run(params: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None,
         scheduled_for: datetime | None = None) -> RunRecord:
    now = datetime(2027, 1, 1, 0, 30, tzinfo=UTC)
    return RunRecord(
        id="01RUN", job_id="j", state=RunState.RUNNING, trigger="manual:ann", schedule=None,
        scheduled_for=scheduled_for, created_at=now, started_at=now, finished_at=None,
        not_before=None, priority=0, params=params or {}, overrides=overrides or {},
        rows=None, error=None, reason=None, wait_reason=None, lease_owner=None,
        lease_until=None, lease_epoch=1, attempt=0, resumes=0, updated_at=now)


def test_dates_come_from_the_scheduled_time_in_the_job_zone() -> None:
    job = _job(timezone="America/New_York", params={
        "month": "${month.current}", "prev": "${month.previous}", "day": "${today}",
        "stamp": "${date:%Y%m%d}", "who": "${run.trigger}/${job.id}"})
    plan = plan_run(job, _run(), UTC_ZONE)  # 00:30 UTC on Jan 1 is Dec 31 in New York
    assert plan.params == {"month": "2026-12", "prev": "2026-11", "day": "2026-12-31",
                           "stamp": "20261231", "who": "manual:ann/j"}
    scheduled = datetime(2027, 3, 1, 1, 0, tzinfo=UTC)
    plan = plan_run(job, _run(scheduled_for=scheduled), UTC_ZONE)
    assert plan.params["month"] == "2027-02"  # a caught-up run still means its own day


def test_a_presets_zone_wins_and_the_default_zone_applies_last() -> None:
    job = _job(params={"day": "${today}"},
               presets={"tokyo": {"timezone": "Asia/Tokyo"}})
    assert plan_run(job, _run(), UTC_ZONE).params["day"] == "2027-01-01"
    assert plan_run(job, _run(), ZoneInfo("America/Chicago")).params["day"] == "2026-12-31"
    tokyo = plan_run(job, _run(overrides={"preset": "tokyo"}), ZoneInfo("America/Chicago"))
    assert tokyo.params["day"] == "2027-01-01" and tokyo.timezone == "Asia/Tokyo"


def test_run_params_override_job_params_and_log_level_comes_from_overrides() -> None:
    job = _job(params={"a": "job", "b": "job"}, log_level="WARNING")
    plan = plan_run(job, _run(params={"a": "run"}, overrides={"params": {"b": "over"},
                                                             "log_level": "DEBUG",
                                                             "disabled_steps": ["x"]}),
                    UTC_ZONE)
    assert plan.params == {"a": "run", "b": "over"}
    assert plan.log_level == "DEBUG" and plan.disabled == {"x"}
    assert plan_run(job, _run(), UTC_ZONE).log_level == "WARNING"


def test_step_params_merge_shared_op_kwargs_and_step_args() -> None:
    job = _job(params={"a": "job", "b": "job"}, steps=[{
        "name": "s", "type": "python", "callable": "m:f",
        "op_kwargs": {"b": "op", "c": "op", "d": "${params.a}-${params.c}"}}])
    plan = plan_run(job, _run(overrides={"step_args": {"s": {"c": "arg"}}}), UTC_ZONE)
    step = plan_step(plan, job.steps[0], registry()["python"], {}, ConfigCache())
    assert step.params == {"a": "job", "b": "op", "c": "arg", "d": "job-arg"}
    assert step.args == {"b": "op", "c": "arg", "d": "job-arg"}
    assert step.config.op_kwargs == step.args


def test_op_kwargs_without_tokens_are_the_steps_own_and_never_shared_when_mutable() -> None:
    job = _job(params={"a": "job"}, steps=[
        {"name": "flat", "type": "python", "callable": "m:f",
         "op_kwargs": {"job": "j1", "n": 3, "x": 1.5, "on": True, "none": None}},
        {"name": "nested", "type": "python", "callable": "m:f",
         "op_kwargs": {"rows": [1, 2], "opts": {"k": "v"}}},
        {"name": "escaped", "type": "python", "callable": "m:f",
         "op_kwargs": {"text": "$${literal}"}}])
    plan = plan_run(job, _run(), UTC_ZONE)
    cache = ConfigCache()
    for _ in range(2):  # the second time from the cache
        flat = plan_step(plan, job.steps[0], registry()["python"], {}, cache)
        assert flat.args == {"job": "j1", "n": 3, "x": 1.5, "on": True, "none": None}
        assert flat.params == {"a": "job", **flat.args} and flat.config is job.steps[0]
        nested = plan_step(plan, job.steps[1], registry()["python"], {}, cache)
        nested.args["rows"].append(3)  # a step that changes its argument in place
        assert job.steps[1].op_kwargs == {"rows": [1, 2], "opts": {"k": "v"}}
        escaped = plan_step(plan, job.steps[2], registry()["python"], {}, cache)
        assert escaped.args == {"text": "${literal}"}


def test_exact_tokens_keep_their_type_and_raw_fields_stay_raw() -> None:
    job = _job(steps=[{"name": "q", "type": "sql_query", "connection": "wh",
                       "query": "SELECT * FROM t WHERE n = ${steps.a.rows}",
                       "params": {"n": "${steps.a.rows}", "label": "n=${steps.a.rows}"}}])
    plan = plan_run(job, _run(), UTC_ZONE)
    step = plan_step(plan, job.steps[0], registry()["sql_query"], {"a": {"rows": 3}},
                     ConfigCache())
    config: Any = step.config
    assert config.query == "SELECT * FROM t WHERE n = ${steps.a.rows}"
    assert config.params == {"n": 3, "label": "n=3"}


def test_errors_name_the_step_and_the_token() -> None:
    job = _job(steps=[{"name": "s", "type": "python", "callable": "m:f",
                       "op_kwargs": {"x": "${steps.gone.rows}"}}])
    plan = plan_run(job, _run(), UTC_ZONE)
    with pytest.raises(PlanError, match=r"step 's': op_kwargs: \$\{steps.gone.rows\}"):
        plan_step(plan, job.steps[0], registry()["python"], {}, ConfigCache())
    bad = _job(params={"p": "${date:}"})
    with pytest.raises(PlanError, match=r"parameter 'p': \$\{date:\}"):
        plan_run(bad, _run(), UTC_ZONE)


def test_a_value_that_no_longer_fits_after_rendering_is_fatal() -> None:
    job = _job(params={"level": "${run.trigger}"}, steps=[{
        "name": "h", "type": "http", "url": "https://example.org/${params.level}",
        "method": "GET"}])
    plan = plan_run(job, _run(), UTC_ZONE)
    step = plan_step(plan, job.steps[0], registry()["http"], {}, ConfigCache())
    assert step.config.url == "https://example.org/manual:ann"  # type: ignore[attr-defined]
    broken = _job(steps=[{"name": "h", "type": "http", "url": "${steps.a.url}"}])
    with pytest.raises(PlanError, match="step 'h': after substitution, url"):
        plan_step(plan_run(broken, _run(), UTC_ZONE), broken.steps[0], registry()["http"],
                  {"a": {"url": "not a url"}}, ConfigCache())
