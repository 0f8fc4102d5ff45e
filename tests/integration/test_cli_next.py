"""``cadenza jobs next``: the preview of fires with offsets, schedules and DST marks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()

JOBS = """\
[jobs.nightly]
schedule = "30 2 * * *"
timezone = "Europe/Paris"

[[jobs.nightly.steps]]
name = "count"
type = "python"
callable = "demo_tasks:count"

[jobs.nightly.presets.early]
schedule = "0 1 * * *"
params = {}

[jobs.nightly.presets.paused]
schedule = "15 1 * * *"
enabled = false

[jobs.mondays]
schedule = "0 9 * * 0"
timezone = "America/New_York"

[[jobs.mondays.steps]]
name = "count"
type = "python"
callable = "demo_tasks:count"

[jobs.monthly]
schedule = "0 6 1 * *"
timezone = "UTC"

[[jobs.monthly.steps]]
name = "count"
type = "python"
callable = "demo_tasks:count"

[jobs.off]
schedule = "0 * * * *"
enabled = false

[[jobs.off.steps]]
name = "count"
type = "python"
callable = "demo_tasks:count"

[jobs.manual]

[[jobs.manual.steps]]
name = "count"
type = "python"
callable = "demo_tasks:count"
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("next") / "home"
    result = runner.invoke(app, ["init", str(path), "--example"])
    assert result.exit_code == 0, result.output
    (path / "jobs.toml").write_text(JOBS, encoding="utf-8")
    return path


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), "jobs", "next", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_lists_both_schedules_in_time_order_with_dst_marks(home: Path) -> None:
    code, out, err = cli(home, "nightly", "-n", "5", "--json", "--from", "2027-03-26T23:30:00Z")
    assert code == 0, err
    assert json.loads(out) == [
        {"at": "2027-03-27T01:00:00+01:00", "utc": "2027-03-27T00:00:00Z",
         "schedule": "preset:early", "dst": None, "calendar": None},
        {"at": "2027-03-27T02:30:00+01:00", "utc": "2027-03-27T01:30:00Z",
         "schedule": "job", "dst": None, "calendar": None},
        {"at": "2027-03-28T01:00:00+01:00", "utc": "2027-03-28T00:00:00Z",
         "schedule": "preset:early", "dst": None, "calendar": None},
        {"at": "2027-03-28T03:00:00+02:00", "utc": "2027-03-28T01:00:00Z",
         "schedule": "job", "dst": "gap", "calendar": None},
        {"at": "2027-03-29T01:00:00+02:00", "utc": "2027-03-28T23:00:00Z",
         "schedule": "preset:early", "dst": None, "calendar": None},
    ]


def test_autumn_fold_is_marked(home: Path) -> None:
    code, out, _ = cli(home, "nightly", "-n", "2", "--json", "--from", "2027-10-31T00:10:00Z")
    assert code == 0
    assert [(f["at"], f["dst"]) for f in json.loads(out)] == [
        ("2027-10-31T02:30:00+02:00", "fold"),
        ("2027-11-01T01:00:00+01:00", None),
    ]


def test_text_shows_offsets_day_names_and_disabled_schedules_on_stderr(home: Path) -> None:
    code, out, err = cli(home, "nightly", "-n", "4", "--from", "2027-03-27T12:00:00+01:00")
    assert code == 0
    assert "2027-03-28 03:00" in out and "Sunday" in out and "+02:00" in out
    assert "gap" in out and "preset:early" in out
    assert "preset:paused" not in out
    assert "preset:paused" in err and "disabled" in err


def test_day_zero_is_shown_as_monday(home: Path) -> None:
    code, out, _ = cli(home, "mondays", "-n", "3", "--from", "2027-03-01T00:00:00Z")
    assert code == 0
    assert out.count("Monday") >= 3  # the schedule line names the day, and every fire
    assert "Sunday" not in out
    code, out, _ = cli(home, "mondays", "-n", "2", "--json", "--from", "2027-03-10T00:00:00Z")
    assert [f["at"] for f in json.loads(out)] == [
        "2027-03-15T09:00:00-04:00", "2027-03-22T09:00:00-04:00",
    ]


def test_a_monthly_schedule_is_described_as_monthly(home: Path) -> None:
    code, out, _ = cli(home, "monthly", "-n", "2", "--from", "2027-03-10T00:00:00Z")
    assert code == 0
    assert "job: 0 6 1 * * (monthly on day 1 at 06:00, UTC)" in out
    assert "every day" not in out
    assert "2027-04-01 06:00" in out and "2027-05-01 06:00" in out


def test_a_disabled_job_or_a_manual_job_lists_nothing(home: Path) -> None:
    code, out, err = cli(home, "off", "--json")
    assert (code, json.loads(out)) == (0, [])
    code, out, err = cli(home, "off")
    assert code == 0 and "disabled" in err and "nothing will fire" in err
    code, out, err = cli(home, "manual")
    assert code == 0 and "no schedule" in err


def test_unknown_job_and_bad_input(home: Path) -> None:
    code, _, err = cli(home, "nope")
    assert code == 1 and "no job 'nope'" in err
    code, _, err = cli(home, "nightly", "--from", "yesterday")
    assert code == 2 and "--from" in err
    code, _, _ = cli(home, "nightly", "-n", "0")
    assert code == 2
