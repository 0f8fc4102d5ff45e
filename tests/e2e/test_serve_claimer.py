"""The claimer process of a real `cadenza serve` with 64 workers: started with the server,
gone with it, whether the server stops gracefully or is killed (executor/claimer.py)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.e2e.serve_helpers import Served, eventually


def _home(tmp_path: Path, workers: int) -> Path:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home)]).exit_code == 0
    config = home / "cadenza.toml"
    config.write_text(config.read_text() + f"\n[workers]\ncount = {workers}\n")
    return home


def _claimer_of(served: Served) -> psutil.Process | None:
    """The server's claimer child (spawned by multiprocessing; not its resource tracker)."""
    for child in psutil.Process(served.proc.pid).children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "spawn_main" in cmdline:
            return child
    return None


def _gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_small_server_has_no_claimer(tmp_path: Path) -> None:
    served = Served(_home(tmp_path, 4))
    try:
        served.wait_ready()
        assert _claimer_of(served) is None
        assert psutil.Process(served.proc.pid).children(recursive=True) == []
    finally:
        served.stop()


def test_the_claimer_stops_with_a_graceful_stop(tmp_path: Path) -> None:
    served = Served(_home(tmp_path, 64))
    try:
        served.wait_ready()
        claimer = eventually(lambda: _claimer_of(served), 30, "the claimer process")
    finally:
        out = served.stop()
    assert served.proc.returncode == 0, out
    assert eventually(lambda: _gone(claimer), 15, "the claimer gone")
    assert "Traceback" not in out, out


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX (TerminateProcess "
                    "on Windows is the graceful path's)")
def test_the_claimer_does_not_outlive_a_killed_server(tmp_path: Path) -> None:
    served = Served(_home(tmp_path, 64))
    try:
        served.wait_ready()
        claimer = eventually(lambda: _claimer_of(served), 30, "the claimer process")
        served.proc.send_signal(signal.SIGKILL)
        served.proc.wait(10)
        # Its end of the pipe closed: the claimer exits on its own.
        assert eventually(lambda: _gone(claimer), 15, "the claimer gone")
    finally:
        served.stop()
