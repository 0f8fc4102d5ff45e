"""``cadenza stats`` for people: tables (tab-separated under a header when piped, as
``cadenza stats | cat`` gets them), never Python reprs; ``--json`` keeps the document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo home with one finished run of hello."""
    home = tmp_path_factory.mktemp("stats") / "home"
    assert runner.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    code, _, err = cli(home, "run", "hello", "--local")
    assert code == 0, err
    return home


def test_piped_stats_are_tab_separated_tables(home: Path) -> None:
    code, out, err = cli(home, "stats")
    assert code == 0, err
    tables = [block.splitlines() for block in out.strip().split("\n\n")]
    headers = [table[0] for table in tables]
    assert headers[:2] == ["figure\tvalue", "times\tcount\tmean s\tp95 s\tmax s"]
    assert "pool\tmembers\tby state\tleased\trunning" in headers  # the demo's pool
    overview = dict(line.split("\t") for line in tables[0][1:])
    assert overview["runs"] == "1" and overview["runs SUCCEEDED"] == "1"
    assert overview["retry rate"] == "0.0 %"
    hello = next(line for line in tables[1] if line.startswith("execution: hello\t"))
    assert hello.split("\t")[1] == "1" and float(hello.split("\t")[2]) > 0
    for table in tables:  # every row has its header's columns
        assert {line.count("\t") for line in table} == {table[0].count("\t")}
    assert "{" not in out and "'" not in out and "[" not in out


def test_json_is_the_document(home: Path) -> None:
    code, out, _ = cli(home, "stats", "--json")
    assert code == 0
    assert json.loads(out)["runs_by_state"] == {"SUCCEEDED": 1}
