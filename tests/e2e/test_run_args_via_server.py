"""`cadenza run --arg` while a real `cadenza serve` runs the job: the server's executor
applies the step's field, and a refused arg is a usage error before anything is queued."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.e2e.serve_helpers import Served


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cadenza", "--home", str(home), "run", "sales-load", "--json",
         *args], capture_output=True, text=True, timeout=120)


def _staged(home: Path) -> int:
    con = sqlite3.connect(home / "data" / "warehouse.db", timeout=10)
    try:
        return int(con.execute("SELECT count(*) FROM staging_sales").fetchone()[0])
    finally:
        con.close()


def test_a_step_arg_reaches_the_servers_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home), "--example"]).exit_code == 0
    server = Served(home)
    try:
        server.wait_ready()
        first = _run(home)
        assert first.returncode == 0, first.stderr
        assert "queued for the running `cadenza serve`" in first.stderr
        loaded = json.loads(first.stdout)["steps"][0]["rows"]
        again = _run(home, "--arg", "load-file.mode=append",
                     "--arg", "load-file.skip_if_loaded=false")
        assert again.returncode == 0, again.stderr
        assert _staged(home) == 2 * loaded
        refused = _run(home, "--arg", "load-file.mode=sideways")
        assert refused.returncode == 2, refused.stderr
        assert "--arg load-file.mode: step 'load-file' (file_load)" in refused.stderr
        assert "queued" not in refused.stderr
    finally:
        server.stop()
