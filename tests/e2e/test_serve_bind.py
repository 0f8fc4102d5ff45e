"""`cadenza serve` whose port is taken: a real process exits 1 at once with the reason,
having started nothing (no thread lives on in a process that is gone, no child is left)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
from typer.testing import CliRunner

from cadenza.cli.main import app


def _marked(marker: str) -> list[psutil.Process]:
    """Live processes whose environment holds ``marker`` (this test's serve and anything
    it started)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CADENZA_BIND_TEST") == marker:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def test_serve_on_a_taken_port_exits_1_promptly_with_the_reason(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home), "--example"]).exit_code == 0
    marker = uuid.uuid4().hex
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "cadenza", "--home", str(home), "serve", "--host",
             "127.0.0.1", "--port", str(port)],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "CADENZA_BIND_TEST": marker})
        took = time.monotonic() - started
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"error: cannot listen on 127.0.0.1:{port}: address already in use" \
        in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert "Cadenza serving" not in done.stdout  # refused before anything started
    assert took < 15, f"took {took:.1f} s"
    assert _marked(marker) == []
