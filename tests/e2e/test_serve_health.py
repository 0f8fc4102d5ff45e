"""`cadenza serve` as a real process: it binds 127.0.0.1 and answers /api/health."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.reliability_case(31)
def test_serve_answers_health_and_nothing_else_leaks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home), "--example"]).exit_code == 0
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "--home", str(home), "serve", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        response = None
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)  # waiting for a server to boot, not for a schedule
        assert response is not None, "server did not answer within 30 s"
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "ok" and body["store"] == "sqlite" and body["store_ok"] is True
    finally:
        proc.terminate()
        out, _err = proc.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/" in out
    assert "Login: admin" in out
