"""`cadenza run JOB` without --local queues the run for a running server and follows it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.e2e.serve_helpers import Served


def test_run_is_executed_by_the_running_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home), "--example"]).exit_code == 0
    server = Served(home)
    try:
        server.wait_ready()
        done = subprocess.run(
            [sys.executable, "-m", "cadenza", "--home", str(home), "run", "hello", "--json"],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "queued for the running `cadenza serve`" in done.stderr
        run = json.loads(done.stdout)
        assert run["state"] == "SUCCEEDED" and run["steps"][0]["rows"] == 3
    finally:
        out = server.stop()
    assert f"run {run['id']} of hello ended SUCCEEDED" in out


def test_without_a_server_the_run_executes_here(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home), "--example"]).exit_code == 0
    result = CliRunner().invoke(app, ["--home", str(home), "run", "hello"])
    assert result.exit_code == 0, result.output
    assert "queued for the running" not in result.output
