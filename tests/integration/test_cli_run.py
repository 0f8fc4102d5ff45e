"""``cadenza run`` and ``cadenza runs`` on a real home (SPEC §14): exit codes, usage errors,
the ``runs show --json`` document, logs."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest
from executor_home import make_home
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()

JOBS = """
[jobs.three]
params = { period = "${month.current}", region = "all" }
[jobs.three.presets.north]
params = { region = "north" }
step_args = { first = { n = "9" } }
[[jobs.three.steps]]
name = "first"
type = "python"
callable = "cz_exec_tasks:echo"
isolation = "thread"
op_kwargs = { n = 1 }
[[jobs.three.steps]]
name = "second"
type = "python"
callable = "cz_exec_tasks:fail"
isolation = "thread"
op_kwargs = { message = "no luck" }
[[jobs.three.steps]]
name = "third"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return make_home(tmp_path / "home", JOBS)


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_failed_step_fails_the_run_with_exit_1(home: Path) -> None:
    code, out, _ = cli(home, "run", "three")
    assert code == 1
    assert "step second: FAILED" in out and "ValueError: no luck" in out
    assert "step third: SKIPPED (earlier step failed)" in out
    assert "FAILED" in out.splitlines()[-1] and "step 'second' failed" in out.splitlines()[-1]


def test_disabling_the_failing_step_succeeds_with_exit_0(home: Path) -> None:
    code, out, _ = cli(home, "run", "three", "--disable", "second")
    assert code == 0, out
    assert "step second: SKIPPED (disabled)" in out
    assert "SUCCEEDED" in out.splitlines()[-1]


def test_json_output_is_the_runs_show_document(home: Path) -> None:
    code, out, err = cli(home, "run", "three", "--json", "--preset", "north",
                         "-p", "period=2026-01", "--arg", "first.extra=x")
    assert code == 1
    document = json.loads(out)  # progress went to stderr, stdout is JSON only
    assert "step first: RUNNING" in err
    assert list(document) == ["id", "job", "state", "trigger", "scheduled_for", "started_at",
                              "finished_at", "rows", "params", "error", "reason",
                              "wait_reason", "resumes", "not_before", "steps", "parent",
                              "children"]
    assert document["job"] == "three" and document["state"] == "FAILED"
    assert document["error"] and document["wait_reason"] is None
    assert document["trigger"] == f"manual:{getpass.getuser()}"
    assert document["params"] == {"period": "2026-01", "region": "north"}
    assert [list(s) for s in document["steps"]] == [
        ["name", "type", "state", "attempt", "rows", "error", "reason", "output"]] * 3
    first, second, third = document["steps"]
    # job params < preset < -p; op_kwargs < preset step_args < --arg; a value takes the
    # type of its declared default (the preset's "9" for op_kwargs n = 1 is the integer 9;
    # "extra" is declared nowhere and stays text)
    assert first["output"]["kwargs"] == {"period": "2026-01", "region": "north", "n": 9,
                                         "extra": "x"}
    assert second["error"] == "ValueError: no luck" and second["attempt"] == 1
    assert third["state"] == "SKIPPED" and third["reason"] == "earlier step failed"
    code, shown, _ = cli(home, "runs", "show", document["id"], "--json")
    assert code == 0 and json.loads(shown) == document


@pytest.mark.parametrize(("args", "message"), [
    (["run", "nope"], "no job 'nope'; known jobs: three"),
    (["run", "three", "-p", "colour=red"],
     "parameter 'colour' is not declared in job 'three''s params (declared: period, region)"),
    (["run", "three", "-p", "period"], "-p 'period': expected NAME=VALUE"),
    (["run", "three", "--arg", "first=1"], "--arg 'first=1': expected STEP.NAME=VALUE"),
    (["run", "three", "--arg", "fourth.n=1"], "--arg: job 'three' has no step 'fourth'"),
    (["run", "three", "--preset", "south"], "job 'three' has no preset 'south'"),
    (["run", "three", "--disable", "fourth"], "--disable: job 'three' has no step 'fourth'"),
    (["run", "three", "--log-level", "LOUD"], "unknown log level 'LOUD'"),
    (["run", "three", "--no-wait", "--local"], "choose one"),
    (["runs", "list", "--state", "DONE"], "unknown state DONE"),
])
@pytest.mark.reliability_case(18)
def test_usage_errors_exit_2_and_run_nothing(home: Path, args: list[str], message: str) -> None:
    code, _, err = cli(home, *args)
    assert code == 2, err
    assert message in err
    code, out, _ = cli(home, "runs", "list", "--json")
    assert code == 0 and json.loads(out) == []


def test_runs_list_filters_and_logs_print_each_line(home: Path) -> None:
    cli(home, "run", "three", "--disable", "second", "--log-level", "DEBUG")
    cli(home, "run", "three")
    code, out, _ = cli(home, "runs", "list", "--json")
    assert code == 0
    runs = json.loads(out)
    assert [r["state"] for r in runs] == ["FAILED", "SUCCEEDED"]
    code, out, _ = cli(home, "runs", "list", "--json", "--state", "succeeded", "--job", "three")
    assert [r["state"] for r in json.loads(out)] == ["SUCCEEDED"]
    code, table, _ = cli(home, "runs", "list")
    assert code == 0 and runs[0]["id"] in table
    ok = runs[1]["id"]
    code, out, _ = cli(home, "runs", "logs", ok)
    assert code == 0
    lines = out.splitlines()
    assert any(" DEBUG " in line and "config: " in line for line in lines)
    assert any(" INFO " in line and " second " in line and "skipped: disabled" in line
               for line in lines)
    code, out, _ = cli(home, "runs", "logs", ok, "--follow", "--json", "--level", "WARNING")
    assert code == 0 and json.loads(out) == []
    code, _, err = cli(home, "runs", "show", "01NOPE")
    assert code == 1 and "no run '01NOPE'" in err


def test_runs_show_for_people(home: Path) -> None:
    cli(home, "run", "three")
    _, out, _ = cli(home, "runs", "list", "--json")
    run_id = json.loads(out)[0]["id"]
    code, out, _ = cli(home, "runs", "show", run_id)
    assert code == 0
    assert f"run {run_id}" in out and "FAILED" in out
    assert "error: step 'second' failed: ValueError: no luck" in out
    assert "earlier step failed" in out


def test_no_wait_queues_the_run_for_the_server(home: Path) -> None:
    code, out, err = cli(home, "run", "three", "--no-wait", "-p", "region=east")
    assert code == 0, err
    run_id = out.strip()
    assert "is queued" in err
    code, shown, _ = cli(home, "runs", "show", run_id, "--json")
    document = json.loads(shown)
    assert document["state"] == "QUEUED" and document["steps"] == []
    assert document["params"] == {"region": "east"}
    code, out, _ = cli(home, "run", "three", "--no-wait", "--json")
    assert code == 0 and json.loads(out)["state"] == "QUEUED"


OPTION_NAMES = """
[jobs.plain]
[[jobs.plain.steps]]
name = "facts"
type = "python"
callable = "cz_exec_tasks:process_facts"

[jobs.options]
[jobs.options.params]
env = "LD_PRELOAD=/tmp/evil.so"
uid = 0
cwd = "/"
user = "root"
shell = true
executable = "/bin/sh"
stdin = "x"
[[jobs.options.steps]]
name = "facts"
type = "python"
callable = "cz_exec_tasks:process_facts"
"""


@pytest.mark.reliability_case(18)
def test_params_named_like_process_options_are_only_values(tmp_path: Path) -> None:
    """Parameters reach a step only as values (``${params.NAME}`` text, and keyword arguments
    of a python step's function), never as options of the process a step runs in: Cadenza
    starts that process itself with fixed options. A job whose params are named env, uid,
    cwd, user, shell, executable and stdin runs its step in the same directory, as the same
    user, with the same environment as a job without params, and its function gets them
    as plain arguments."""
    home = make_home(tmp_path / "home", OPTION_NAMES)
    facts = {}
    for job in ("plain", "options"):
        code, out, err = cli(home, "run", job, "--json")
        assert code == 0, err
        step = json.loads(out)["steps"][0]
        facts[job] = step["output"]
    plain, options = facts["plain"], facts["options"]
    assert options["kwargs"] == {"env": "LD_PRELOAD=/tmp/evil.so", "uid": 0, "cwd": "/",
                                 "user": "root", "shell": True, "executable": "/bin/sh",
                                 "stdin": "x"}
    assert plain["kwargs"] == {}
    for fact in ("cwd", "uid", "env", "path"):
        assert options[fact] == plain[fact], fact
    assert "LD_PRELOAD" not in options["env"]
