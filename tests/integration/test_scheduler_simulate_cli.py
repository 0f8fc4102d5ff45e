"""``cadenza simulate`` on the demo home: the DST week of the sales-load job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("simulate") / "demo"
    result = runner.invoke(app, ["init", str(path), "--example"])
    assert result.exit_code == 0, result.output
    return path


def test_simulate_json_over_the_spring_change(demo: Path) -> None:
    result = runner.invoke(app, ["--home", str(demo), "simulate", "--from",
                                 "2027-03-27T00:00:00+01:00", "--to", "2027-04-02", "--json"])
    assert result.exit_code == 0, result.stderr
    fires = json.loads(result.stdout)
    assert {tuple(sorted(f)) for f in fires} == {
        ("job", "outcome", "schedule", "scheduled_for", "start", "wait_reason")
    }
    by_time = [(f["scheduled_for"], f["schedule"], f["outcome"]) for f in fires]
    assert by_time[:2] == [("2027-03-27T02:00:00+01:00", "job", "run"),
                           ("2027-03-28T03:00:00+02:00", "job", "run")]
    assert ("2027-04-01T06:00:00+02:00", "preset:month-end", "run") in by_time
    assert all(f["start"] == f["scheduled_for"] for f in fires)


def test_simulate_text_and_errors(demo: Path) -> None:
    result = runner.invoke(app, ["--home", str(demo), "simulate", "--from",
                                 "2027-03-27T00:00Z", "--to", "2027-03-29T00:00Z"])
    assert result.exit_code == 0
    assert "sales-load" in result.stdout and "run" in result.stdout
    assert "2 run, 0 missed, 0 skipped" in result.stderr
    backwards = runner.invoke(app, ["--home", str(demo), "simulate", "--from", "2027-03-29",
                                    "--to", "2027-03-27"])
    assert backwards.exit_code == 2 and "--to must come after --from" in backwards.stderr
    garbage = runner.invoke(app, ["--home", str(demo), "simulate", "--from", "soon",
                                  "--to", "2027-03-27"])
    assert garbage.exit_code == 2 and "--from" in garbage.stderr
