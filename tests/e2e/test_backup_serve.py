"""`cadenza backup` / `cadenza restore` against a real `cadenza serve` process (SPEC §18)."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.domain.states import RunState
from cadenza.store import Store
from tests.e2e.serve_helpers import Served, eventually
from tests.support.store_helpers import start_run


def cadenza(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cadenza", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.reliability_case(54, 55)
def test_backup_while_serving_then_restore_refused_until_stopped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home), "--example"]).exit_code == 0
    db = home / "data" / "cadenza.db"
    url = f"sqlite:///{db.as_posix()}"
    with Store.open(url) as store:  # a run that was RUNNING when the backup was taken
        running = store.create_run("hello", "manual")
        assert running is not None
        assert start_run(store, running, owner="gone:1:w",
                         lease_until=datetime.now(UTC) + timedelta(hours=1))
    backup = tmp_path / "b.db"
    server = Served(home)
    try:
        server.wait_ready()
        for _ in range(4):
            assert cadenza(home, "run", "hello", "--no-wait").returncode == 0
        done = cadenza(home, "backup", str(backup), "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["integrity"] == "ok"
        refused = cadenza(home, "restore", str(backup))
        assert refused.returncode == 1
        assert "`cadenza serve` is running on this home" in refused.stderr
        assert not list(db.parent.glob("*before-restore*"))
    finally:
        server.stop()
    con = sqlite3.connect(backup)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    if sys.platform != "win32":
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600

    restored = cadenza(home, "restore", str(backup), "--json")
    assert restored.returncode == 0, restored.stderr
    report = json.loads(restored.stdout)
    assert running in report["expired_leases"]
    assert Path(report["previous_database_kept_as"]).exists()
    with Store.open(url) as store:
        run = store.get_run(running)
        assert run is not None and run.lease_until is not None
        assert run.lease_until < datetime.now(UTC)

    # The next start reclaims the run whose lease the restore expired, and runs it again.
    server = Served(home)
    try:
        server.wait_ready()

        def finished() -> bool:
            with Store.open(url) as store:
                record = store.get_run(running)
                return record is not None and record.state is RunState.SUCCEEDED

        eventually(finished, 60, "the restored RUNNING run to be reclaimed and finish")
    finally:
        server.stop()
