"""Reading history needs only cadenza.toml and the store: with a broken jobs.toml,
``runs list``, ``runs show``, ``runs logs`` and ``events`` work and say so in one warning
line, while ``run`` and ``serve`` still refuse the file with located errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()

WARNING = re.compile(r"^warning: jobs\.toml has (\d+) problem\(s\); showing history only "
                     r"\(cadenza validate for details\)$")
LOCATED = re.compile(r"^jobs\.toml:\d+:\d+: error: ", re.MULTILINE)
BROKEN_JOB = '\n[jobs.broken]\nschedule = "every tuesday"\n'


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A demo home with one finished run of sales-load (real steps, logs and events)."""
    home = tmp_path_factory.mktemp("history") / "home"
    assert runner.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    code, out, err = cli(home, "run", "sales-load", "--local", "--json")
    assert code == 0, err
    return home, json.loads(out)["id"]


@pytest.fixture
def broken(ran: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """A copy of that home whose jobs.toml has an invalid job added."""
    source, run_id = ran
    home = tmp_path / "home"
    shutil.copytree(source, home)
    with (home / "jobs.toml").open("a", encoding="utf-8") as fh:
        fh.write(BROKEN_JOB)
    code, _, err = cli(home, "validate")
    assert code == 1 and LOCATED.search(err), err
    return home, run_id


def _one_warning(err: str) -> int:
    lines = err.splitlines()
    assert len(lines) == 1, err
    match = WARNING.match(lines[0])
    assert match is not None, err
    return int(match.group(1))


def test_runs_list_shows_history_with_a_warning(broken: tuple[Path, str]) -> None:
    home, run_id = broken
    code, out, err = cli(home, "runs", "list", "--json")
    assert code == 0, err
    assert [(r["id"], r["state"]) for r in json.loads(out)] == [(run_id, "SUCCEEDED")]
    assert _one_warning(err) >= 1


def test_runs_show_and_logs_and_events_work_with_a_warning(broken: tuple[Path, str]) -> None:
    home, run_id = broken
    code, out, err = cli(home, "runs", "show", run_id, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["state"] == "SUCCEEDED" and document["steps"]
    _one_warning(err)

    code, out, err = cli(home, "runs", "logs", run_id, "--json")
    assert code == 0, err
    assert json.loads(out)
    _one_warning(err)

    code, out, err = cli(home, "events", "--run", run_id, "--json")
    assert code == 0, err
    assert "RUN_FINISHED" in {e["type"] for e in json.loads(out)}
    _one_warning(err)


def test_events_by_actor(ran: tuple[Path, str]) -> None:
    home, _ = ran
    code, out, err = cli(home, "events", "--json", "--limit", "1000")
    assert code == 0, err
    every = json.loads(out)
    actors = {e["actor"] for e in every}
    assert len(actors) >= 2, actors  # the CLI's own actions and the system's
    for actor in actors:
        code, out, err = cli(home, "events", "--actor", actor, "--json", "--limit", "1000")
        assert code == 0, err
        assert [e["id"] for e in json.loads(out)] == [
            e["id"] for e in every if e["actor"] == actor]
    code, out, err = cli(home, "events", "--actor", "user:nobody", "--json")
    assert code == 0 and json.loads(out) == [], err


def test_history_of_an_unknown_run_still_fails(broken: tuple[Path, str]) -> None:
    home, _ = broken
    code, _, err = cli(home, "runs", "show", "no-such-run")
    assert code == 1
    assert "no run 'no-such-run'" in err


def test_run_and_serve_refuse_the_broken_file_with_located_errors(
        broken: tuple[Path, str]) -> None:
    home, _ = broken
    for args in (("run", "sales-load", "--local"), ("serve", "--no-web")):
        code, out, err = cli(home, *args)
        assert code == 1, (args, out, err)
        assert LOCATED.search(err), (args, err)
        assert "warning: jobs.toml" not in err
    code, out, _ = cli(home, "runs", "list", "--json")
    assert code == 0 and len(json.loads(out)) == 1  # nothing ran


def test_a_valid_home_prints_no_warning(ran: tuple[Path, str]) -> None:
    home, run_id = ran
    code, out, err = cli(home, "runs", "list", "--json")
    assert code == 0 and err == ""
    assert run_id in out


def test_a_broken_cadenza_toml_still_stops_history(broken: tuple[Path, str]) -> None:
    home, _ = broken
    settings = home / "cadenza.toml"
    settings.write_text(settings.read_text(encoding="utf-8") + "\n[store\n", encoding="utf-8")
    code, _, err = cli(home, "runs", "list")
    assert code == 1
    assert re.search(r"^cadenza\.toml:\d+:\d+: error: ", err, re.MULTILINE), err
