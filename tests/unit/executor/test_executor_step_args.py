"""A run's step args on built-in step types: which keys set the step's config, which stay
arguments, what a run may not change, and the checks at request time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.states import RunState
from cadenza.executor.plan import (
    ConfigCache,
    PlanError,
    check_step_args,
    plan_run,
    plan_step,
    split_step_args,
)
from cadenza.executor.request import RequestError, RunRequest, check_request
from cadenza.steps.registry import registry
from cadenza.store.records import RunRecord

UTC_ZONE = ZoneInfo("UTC")
COPY = {"name": "copy", "type": "sql_copy", "source": {"connection": "a", "table": "src"},
        "target": {"connection": "b", "table": "dst"}, "op_kwargs": {"tag": "x"}}
LOAD = {"name": "load", "type": "file_load", "path": "in/${params.period}.csv",
        "connection": "wh", "table": "staging", "mode": "overwrite"}
QUERY = {"name": "q", "type": "sql_query", "connection": "wh", "query": "SELECT :n"}
PY = {"name": "py", "type": "python", "callable": "m:f", "isolation": "thread"}


def _job(*steps: dict[str, Any], **fields: Any) -> JobConfig:
    types = registry()
    job = JobConfig.model_validate({"id": "j", "params": {"period": "2027-01"}, **fields})
    return job.model_copy(update={"steps": [types[s["type"]].Config.model_validate(s)
                                            for s in steps]})


def _run(step_args: dict[str, dict[str, Any]]) -> RunRecord:
    now = datetime(2027, 1, 1, 0, 30, tzinfo=UTC)
    return RunRecord(
        id="01RUN", job_id="j", state=RunState.RUNNING, trigger="manual:ann", schedule=None,
        scheduled_for=None, created_at=now, started_at=now, finished_at=None,
        not_before=None, priority=0, params={}, overrides={"step_args": step_args},
        rows=None, error=None, reason=None, wait_reason=None, lease_owner=None,
        lease_until=None, lease_epoch=1, attempt=0, resumes=0, updated_at=now)


def _plan(job: JobConfig, step_args: dict[str, dict[str, Any]], name: str) -> Any:
    step = job.step(name)
    assert step is not None
    return plan_step(plan_run(job, _run(step_args), UTC_ZONE), step,
                     registry()[step.type], {}, ConfigCache())


def test_a_field_is_set_from_text_and_validated_again() -> None:
    job = _job(COPY, LOAD)
    planned = _plan(job, {"copy": {"mode": "append", "batch_size": "500", "create": "false",
                                   "target.table": "dst_2027", "tag": "y"}}, "copy")
    config = planned.config
    assert (config.mode, config.batch_size, config.create) == ("append", 500, False)
    assert config.target.table == "dst_2027" and config.target.connection == "b"
    assert planned.args == {"tag": "y"} and config.op_kwargs == {"tag": "y"}
    assert job.steps[0].mode == "overwrite"  # type: ignore[attr-defined]  # jobs.toml's
    load = _plan(job, {"load": {"path": "in/${params.period}-fix.csv", "csv.delimiter": ";"}},
                 "load").config
    assert load.path == "in/2027-01-fix.csv" and load.csv.delimiter == ";"
    assert load.mode == "overwrite" and load.csv.quote == '"'


def test_a_value_that_does_not_fit_when_the_run_starts_is_fatal() -> None:
    job = _job(COPY)
    with pytest.raises(PlanError, match="step 'copy': after substitution, batch_size"):
        _plan(job, {"copy": {"batch_size": "0"}}, "copy")


def test_python_args_and_unknown_keys_stay_arguments() -> None:
    job = _job(PY, LOAD)
    planned = _plan(job, {"py": {"isolation": "process", "n": "1"}}, "py")
    assert planned.config.isolation == "thread"
    assert planned.args == {"isolation": "process", "n": "1"}
    assert split_step_args(job, job.steps[1], {"period": "p", "mode": "append", "x": 1}) == (
        {"mode": "append"}, {"period": "p"}, {"x": 1})
    # a run recorded before its args were checked still runs, the key as an argument
    assert _plan(job, {"load": {"x": "1"}}, "load").args == {"x": "1"}


@pytest.mark.reliability_case(23)
def test_request_checks_name_the_step_and_the_key() -> None:
    job = _job(COPY, LOAD, QUERY, PY)
    types = registry()

    def problems(step: str, args: dict[str, Any]) -> list[str]:
        config = job.step(step)
        assert config is not None
        return check_step_args(job, config, args, types[config.type])

    assert problems("copy", {"mode": "append", "batch_size": "9", "tag": "z"}) == []
    assert problems("py", {"anything": "goes"}) == []
    [message] = problems("load", {"path": "${params.period}.csv"})  # a file: never a run's
    assert message == ("step load: field path cannot be set by a run (it chooses a file to "
                       "read or write); an editor can change it in jobs.toml")
    [bad] = problems("copy", {"batch_size": "many"})
    assert bad.startswith("--arg copy.batch_size: step 'copy' (sql_copy): ")
    for locked in ({"source.connection": "c"}, {"source.query": "DELETE FROM x"},
                   {"source": {"connection": "c", "table": "src"}},
                   {"target.connection": "a"}):
        [message] = problems("copy", locked)
        assert "cannot be set by a run" in message, message
    [message] = problems("q", {"query": "DROP TABLE t"})
    assert message.startswith("step q: field query cannot be set by a run")
    [message] = problems("load", {"retry": "none"})
    assert "has no setting or argument 'retry'" in message
    assert "arguments (op_kwargs): none" in message
    with pytest.raises(RequestError, match=r"--arg load\.mode: step 'load' \(file_load\)"):
        check_request(job, RunRequest(step_args={"load": {"mode": "sideways"}}))


def test_a_replayed_request_keeps_the_step_args_it_was_created_with() -> None:
    job = _job(QUERY, presets={"fix": {"step_args": {"q": {"query": "SELECT 2"}}}})
    with pytest.raises(RequestError, match="cannot be set by a run"):
        check_request(job, RunRequest(step_args={"q": {"query": "SELECT 2"}}))
    check_request(job, RunRequest(step_args={"q": {"query": "SELECT 2"}}, replayed=True))
    with pytest.raises(RequestError, match="has no step 'gone'"):
        check_request(job, RunRequest(step_args={"gone": {}}, replayed=True))
