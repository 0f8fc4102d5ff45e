"""Business calendars from a home: ``[calendars]`` in cadenza.toml checked with located
errors, ``cadenza calendars list|show`` in the reader's language, ``jobs next`` marking a
holiday, and the API's ``/api/calendars``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()

CALENDARS = """
[calendars.france]
country = "FR"
days_off = { 2027-12-24 = "Fermeture annuelle" }

[calendars.chine]
country = "CN"
"""
JOBS = """\
[jobs.nightly]
schedule = "0 2 * * *"
timezone = "Europe/Paris"
calendar = "france"
days = "business"

[[jobs.nightly.steps]]
name = "count"
type = "python"
callable = "demo_tasks:count"
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    result = runner.invoke(app, ["init", str(path), "--example"])
    assert result.exit_code == 0, result.output
    with (path / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write(CALENDARS)
    (path / "jobs.toml").write_text(JOBS, encoding="utf-8")
    return path


def cli(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_show_lists_holidays_and_closing_days_in_the_readers_language(home: Path) -> None:
    code, out, err = cli(home, "calendars", "show", "france", "--year", "2027",
                         env={"LANG": "fr_FR.UTF-8"})
    assert code == 0, err
    assert "2027-07-14\tWed\tpublic holiday\tFête nationale" in out
    assert "2027-12-24\tFri\tday off (this home's)\tFermeture annuelle" in out
    code, out, _ = cli(home, "calendars", "show", "france", "--year", "2027",
                       "--language", "en")
    assert "National Day" in out
    code, out, _ = cli(home, "calendars", "show", "chine", "--year", "2026", "--json",
                       "--language", "zh_Hans")
    days = {d["date"]: d for d in json.loads(out)["days"]}
    assert days["2026-02-17"]["name"] == "春节" and not days["2026-02-17"]["working"]
    assert days["2026-02-14"]["kind"] == "extra_working" and days["2026-02-14"]["working"]


def test_jobs_next_marks_14_juillet_skipped(home: Path) -> None:
    code, out, err = cli(home, "jobs", "next", "nightly", "-n", "2", "--json",
                         "--from", "2027-07-13T12:00:00+02:00")
    assert code == 0, err
    first, second = json.loads(out)
    assert first["at"] == "2027-07-14T02:00:00+02:00"
    assert first["calendar"]["kind"] == "skipped"
    assert first["calendar"]["days"] == [{"date": "2027-07-14", "name": "Fête nationale"}]
    assert second["calendar"] is None


@pytest.mark.parametrize(("table", "where", "says"), [
    ('[calendars.x]\ncountry = "XX"\n', "calendars.x", "unknown country 'XX'"),
    ('[calendars.x]\ncountry = "FR"\nsubdivision = "99"\n', "calendars.x",
     "unknown subdivision '99' of FR"),
    ('[calendars.x]\ndays_off = { "24/12/2027" = "Noël" }\n', "calendars.x.days_off",
     "expected a date like 2027-12-24"),
])
def test_a_bad_calendar_is_a_located_error(home: Path, table: str, where: str,
                                           says: str) -> None:
    with (home / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write(table)
    code, _out, err = cli(home, "validate")
    assert code != 0
    assert where in err and says in err, err


@pytest.mark.parametrize(("job", "says"), [
    ('calendar = "nowhere"\n', "unknown calendar 'nowhere'"),
    ('days = "business"\n', "days needs a business calendar"),
    ('calendar = "france"\nshift = "next"\n', 'expected days = "business" as well'),
    ('calendar = "france"\nbusiness_day = 0\n', "expected 1..23"),
])
def test_calendar_keys_of_a_job_are_checked(home: Path, job: str, says: str) -> None:
    text = JOBS.replace('calendar = "france"\ndays = "business"\n', job)
    (home / "jobs.toml").write_text(text, encoding="utf-8")
    code, _out, err = cli(home, "validate")
    assert code != 0
    assert "jobs.toml:" in err and says in err, err


def test_business_day_needs_a_time_only_schedule(home: Path) -> None:
    text = JOBS.replace('schedule = "0 2 * * *"', 'schedule = "0 2 * * mon"').replace(
        'days = "business"', "business_day = 3")
    (home / "jobs.toml").write_text(text, encoding="utf-8")
    code, _, err = cli(home, "validate")
    assert code != 0 and "jobs.nightly.schedule: with business_day" in err, err
