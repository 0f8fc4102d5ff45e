"""What a run may change: an operator's run values set parameters and the step fields a step
type marks run-tunable, never what file a step reads or where data goes. The exploit this
guards against: a "report, then mail it" job run with ``template`` pointing at the home's key
and ``to`` at an outside address would mail the key. Refused (422, no run, an audit event
naming the actor, the job, the steps and fields but not the values)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env

REPORT_JOB = """
[jobs.monthly-report]
params = { month = "2027-01" }
[[jobs.monthly-report.steps]]
name = "r"
type = "report"
path = "reports/sales-${params.month}.html"
title = "Sales ${params.month}"
[[jobs.monthly-report.steps.sections]]
title = "Sales"
connection = "warehouse"
query = "SELECT 1 AS n"
[[jobs.monthly-report.steps]]
name = "mail"
type = "notify"
to = ["role:ops"]
subject = "Sales report ${params.month}"
attach = ["${steps.r.path}"]
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        jobs = made.services.home.jobs_file
        jobs.write_text(jobs.read_text(encoding="utf-8") + REPORT_JOB, encoding="utf-8")
        yield made


def test_an_operator_cannot_point_a_run_at_a_file_and_an_outside_address(env: ApiEnv) -> None:
    operator = env.session("operator")
    answer = operator.post("/api/jobs/monthly-report/runs", json={"step_args": {
        "r": {"template": "data/secret.key"},
        "mail": {"to": ["attacker@evil.example"]}}})
    assert answer.status_code == 422, answer.text
    text = answer.text
    assert "step r: field template cannot be set by a run (it chooses a file to read" in text
    assert "step mail: field to cannot be set by a run (it chooses where data goes" in text
    assert "an editor can change it in jobs.toml" in text
    assert env.store.list_runs(job="monthly-report") == []
    (event,) = env.store.list_events(event_type="RUN_VALUES_REFUSED")
    assert event.actor == "user:operator" and event.level == "WARNING"
    assert event.payload == {"job": "monthly-report", "fields": [
        {"step": "r", "field": "template"}, {"step": "mail", "field": "to"}]}
    assert "secret.key" not in event.message and "evil.example" not in event.message


@pytest.mark.parametrize(("step", "field", "value"), [
    ("r", "path", "../../data/secret.key"), ("r", "sections", []),
    ("mail", "attach", ["data/secret.key"]), ("mail", "channel", "other"),
    ("mail", "subject", "${secret.smtp_password}"), ("mail", "body", "x"),
    ("r", "title", "${secret.smtp_password}"),
])
def test_every_unmarked_field_is_refused(env: ApiEnv, step: str, field: str,
                                         value: object) -> None:
    answer = env.session("operator").post("/api/jobs/monthly-report/runs",
                                          json={"step_args": {step: {field: value}}})
    assert answer.status_code == 422, answer.text
    assert f"step {step}: field {field} cannot be set by a run" in answer.text
    assert env.store.list_runs(job="monthly-report") == []


def test_a_tunable_field_and_a_parameter_are_still_accepted(env: ApiEnv) -> None:
    answer = env.session("operator").post("/api/jobs/monthly-report/runs", json={
        "params": {"month": "2027-02"},
        "step_args": {"r": {"format": "html"}}})
    assert answer.status_code == 201, answer.text
    assert env.store.list_events(event_type="RUN_VALUES_REFUSED") == []


def test_the_run_form_shows_the_refusal_and_offers_no_locked_field(env: ApiEnv) -> None:
    operator = env.session("operator")
    form = operator.get("/jobs/monthly-report/run").text
    assert 'name="arg:r:path"' not in form and 'name="arg:mail:to"' not in form
    answer = operator.post("/jobs/monthly-report/run", headers={"HX-Request": "true"}, data={
        "more_args": "r.template=data/secret.key\nmail.attach=data/secret.key"})
    assert answer.status_code == 422, answer.text
    assert "step r: field template cannot be set by a run" in answer.text
    assert "step mail: field attach cannot be set by a run" in answer.text
    assert env.store.list_runs(job="monthly-report") == []
    (event,) = env.store.list_events(event_type="RUN_VALUES_REFUSED")
    assert event.actor == "user:operator" and "secret.key" not in event.message
