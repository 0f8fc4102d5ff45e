"""``cadenza run --arg STEP.NAME=VALUE`` on the demo home: a built-in step's field is set for
that run (``--arg load-file.mode=append``, as docs/running.md shows), validated again with
the step type's config; a name or value the step refuses is a usage error naming the step
and the key, and no run is recorded."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from tests.integration.services_home import demo_services
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.services.errors import InvalidRequest
from cadenza.services.runs import RunRequestInput

runner = CliRunner()


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    assert runner.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    return home


def staged_rows(home: Path) -> int:
    con = sqlite3.connect(home / "data" / "warehouse.db")
    try:
        return int(con.execute("SELECT count(*) FROM staging_sales").fetchone()[0])
    finally:
        con.close()


def test_arg_sets_a_built_in_steps_field_for_that_run(demo: Path) -> None:
    code, out, err = cli(demo, "run", "sales-load", "--local", "--json")
    assert code == 0, err
    loaded = json.loads(out)["steps"][0]["rows"]
    assert loaded > 0 and staged_rows(demo) == loaded  # jobs.toml: mode = "overwrite"
    code, out, err = cli(demo, "run", "sales-load", "--local", "--json",
                         "--arg", "load-file.mode=append",
                         "--arg", "load-file.skip_if_loaded=false")  # text to a boolean
    assert code == 0, err
    assert json.loads(out)["steps"][0]["rows"] == loaded
    assert staged_rows(demo) == 2 * loaded  # appended, not replaced


@pytest.mark.parametrize(("arg", "expected"), [
    ("load-file.mode=appendx",
     "--arg load-file.mode: step 'load-file' (file_load): Input should be 'append', "
     "'overwrite' or 'upsert'"),
    ("load-file.csv.delimiter=;;", "--arg load-file.csv.delimiter: step 'load-file'"),
    ("load-file.nope=1",
     "--arg load-file.nope: step 'load-file' (file_load) has no setting or argument 'nope'"),
    ("load-file.timeout=1s", "has no setting or argument 'timeout'"),
    ("load-file.connection=downstream",
     "step load-file: field connection cannot be set by a run (it chooses where data goes "
     "or comes from); an editor can change it in jobs.toml"),
    ("refresh-aggregates.query=DELETE FROM staging_sales",
     "step refresh-aggregates: field query cannot be set by a run"),
    ("tell-downstream.method=FETCH", "step tell-downstream: field method cannot be set"),
    ("load-file.path=../data/secret.key",
     "step load-file: field path cannot be set by a run (it chooses a file to read"),
])
def test_a_name_or_value_the_step_refuses_exits_2_and_records_nothing(
        demo: Path, arg: str, expected: str) -> None:
    code, _, err = cli(demo, "run", "sales-load", "--local", "--arg", arg)
    assert code == 2, err
    assert expected in " ".join(err.split()), err
    code, out, _ = cli(demo, "runs", "list", "--json")
    assert code == 0 and json.loads(out) == []


def test_the_service_layer_checks_step_args_for_every_shell(tmp_path: Path) -> None:
    services = demo_services(tmp_path)
    try:
        runs = services.runs
        bad = RunRequestInput("sales-load", step_args={"load-file": {"mode": "sideways"}})
        with pytest.raises(InvalidRequest, match=r"--arg load-file\.mode: step 'load-file'"):
            runs.enqueue(bad)
        good = RunRequestInput("sales-load", step_args={"load-file": {"mode": "append"}})
        run_id = runs.enqueue(good)
        assert services.history.get_run(run_id).as_json()["state"] == "QUEUED"
    finally:
        services.close()
