"""The job editor's generated form (web/ui/editor_form.py): every value of jobs.toml shows
in its field and reads back as the same value, so an unchanged form changes nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from cadenza.services import job_drafts
from cadenza.web.ui.editor_form import OTHER, build, field_for, read, slot_id, walk

SAMPLES: list[tuple[str, Any]] = [
    ("description", "Load the month's sales"),
    ("description", "two\nlines"),
    ("tags", ["sales", "nightly"]),
    ("schedule", "0 2 * * *"),
    ("enabled", False),
    ("params", {"period": "${month.current}", "n": 3, "deep": {"a": [1, 2]}}),
    ("log_level", "DEBUG"),
    ("timeout", "2h"),
    ("priority", -5),
    ("max_concurrency", 4),
    ("windows", ["Mon-Fri 08:00-18:00"]),
    ("requires", {"egress": 1}),
    ("retry", {"attempts": 5, "base_seconds": 1.5, "backoff": "fixed"}),
    ("alerts", {"recipients": ["role:ops"], "long_run": "3h", "on_failure": True}),
    ("presets", {"month-end": {"schedule": "0 6 1 * *", "params": {"p": "x"}}}),
    ("params", {"when": dt.datetime(2027, 1, 2, 3, 4, 5)}),
    ("priority", "not a number"),  # kept as typed, so validation can say why
    ("tags", "not a list"),
]


@pytest.mark.parametrize(("key", "value"), SAMPLES)
def test_a_value_reads_back_as_itself(key: str, value: Any) -> None:
    fields = build(job_drafts.job_schema(), {key: value}, name="job", path="",
                   skip=("id", "steps"))
    form = {f.name: f.value for f in walk(fields) if f.kind != "group"}
    errors: dict[str, str] = {}
    assert read(fields, form, errors) == {key: value}
    assert errors == {}


def test_empty_inputs_are_not_written_and_unknown_keys_are_kept() -> None:
    fields = build(job_drafts.job_schema(), {"colour": "red"}, name="job", path="",
                   skip=("id", "steps"))
    form = {f.name: f.value for f in walk(fields) if f.kind != "group"}
    assert form[f"job.{OTHER}"] == 'colour = "red"'
    assert read(fields, form, {}) == {"colour": "red"}
    assert read(fields, {"job.params": "a = "}, errors := {}) == {}
    assert "expected TOML lines" in errors["job.params"]


def test_every_step_type_builds_and_problems_find_their_field() -> None:
    for kind, schema in job_drafts.step_schemas().items():
        fields = build(schema, {}, name="step.s1", path="steps[0]", skip=("name", "type"))
        assert fields, kind
        assert field_for(fields, "steps[0].timeout").key == "timeout"  # type: ignore[union-attr]
        assert field_for(fields, "steps[0].retry.attempts").key == "attempts"  # type: ignore[union-attr]
        assert field_for(fields, "steps[0].retry.nope").key == "retry"  # type: ignore[union-attr]


def test_slot_ids_are_plain_css_identifiers() -> None:
    assert slot_id("step.s1.max_rows") == "err-step_2e_s1_2e_max_5f_rows"
    assert slot_id('job."x y"[0]').replace("_", "").replace("-", "").isalnum()
