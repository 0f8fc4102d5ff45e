"""Run requests: checks against the job, the overrides stored with the run, CLI parsing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from cadenza.config.schema_jobs import JobConfig
from cadenza.executor.request import (
    RequestError,
    RunRequest,
    check_request,
    new_run,
    overrides_of,
    request_from_cli,
)
from cadenza.steps.registry import registry


def _job() -> JobConfig:
    step: dict[str, Any] = {"type": "python", "callable": "m:f"}
    job = JobConfig.model_validate({
        "id": "j", "params": {"period": "x", "region": "all"}, "priority": 3,
        "presets": {"north": {"params": {"region": "north"}, "step_args": {"a": {"k": 1}},
                              "disabled_steps": ["b"], "log_level": "DEBUG"}},
    })
    python = registry()["python"].Config
    return job.model_copy(update={"steps": [python.model_validate({**step, "name": "a"}),
                                            python.model_validate({**step, "name": "b"})]})


@pytest.mark.reliability_case(18)
def test_every_problem_is_named_at_once() -> None:
    request = RunRequest(params={"colour": 1}, preset="south", step_args={"c": {}},
                         disabled_steps=["d"], log_level="loud")
    with pytest.raises(RequestError) as info:
        check_request(_job(), request)
    message = str(info.value)
    assert "no preset 'south' (presets: north)" in message
    assert "parameter 'colour' is not declared in job 'j''s params (declared: period, region)" \
        in message
    assert "--arg: job 'j' has no step 'c' (steps: a, b)" in message
    assert "--disable: job 'j' has no step 'd'" in message
    assert "unknown log level 'loud'" in message


def test_the_preset_is_copied_in_with_the_request_on_top() -> None:
    request = RunRequest(params={"period": "2026-01"}, preset="north",
                         step_args={"a": {"k": 2, "x": "y"}}, disabled_steps=["a"],
                         log_level="warning")
    assert overrides_of(_job(), request) == {
        "preset": "north",
        "params": {"region": "north", "period": "2026-01"},
        "step_args": {"a": {"k": 2, "x": "y"}},
        "disabled_steps": ["b", "a"],
        "log_level": "WARNING",
    }
    assert overrides_of(_job(), RunRequest(preset="north"))["log_level"] == "DEBUG"


def test_a_manual_run_is_scheduled_at_its_creation() -> None:
    now = datetime(2027, 5, 1, 12, tzinfo=UTC)
    spec = new_run(_job(), RunRequest(params={"period": "p"}), "manual:ann", now=now,
                   actor="ann")
    assert spec.scheduled_for == now and spec.trigger == "manual:ann"
    assert spec.params == {"period": "p"} and spec.priority == 3 and spec.actor == "ann"


def test_cli_assignments() -> None:
    request = request_from_cli(["a=1", "b==2", "a=3"], ["s.k=v=w", "s.j="],
                               disabled=["x", "x"], log_level="INFO")
    assert request.params == {"a": "3", "b": "=2"}
    assert request.step_args == {"s": {"k": "v=w", "j": ""}}
    assert list(request.disabled_steps) == ["x"]
    for bad in (["a"], ["=1"]):
        with pytest.raises(RequestError, match="expected NAME=VALUE"):
            request_from_cli(bad, [])
    for bad_arg in (["s=1"], [".k=1"], ["s.=1"]):
        with pytest.raises(RequestError, match=r"expected STEP\.NAME=VALUE"):
            request_from_cli([], bad_arg)
