"""Start and stop real `cadenza serve` processes for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """One `cadenza serve` process on a home, with an optional fake wall clock."""

    def __init__(self, home: Path, *, fake_now: str | None = None, web: bool = True,
                 env: dict[str, str] | None = None, host: str = "127.0.0.1",
                 wrap: Callable[[list[str]], list[str]] | None = None) -> None:
        """``host``: where its HTTP server listens (its home's ``[server] host``); ``wrap``:
        a command around it (``ip netns exec NAME``)."""
        self.port = free_port()
        self.host = host
        env = {**os.environ, **(env or {})}
        if fake_now:
            env["CADENZA_FAKE_NOW"] = fake_now
        args = [sys.executable, "-m", "cadenza", "--home", str(home), "serve",
                "--port", str(self.port)]
        if not web:
            args.append("--no-web")
        self.web = web
        if wrap is not None:
            args = wrap(args)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)

    def wait_ready(self, seconds: float = 30, degraded: bool = False) -> None:
        """Wait (real time: a process booting, not a schedule) until /api/health answers
        ok (or, with ``degraded``, answers at all: a node whose clock is off says 503)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited: {self.output()}")
            if not self.web:
                time.sleep(2)
                return
            try:
                answer = httpx.get(f"http://{self.host}:{self.port}/api/health", timeout=1)
                if answer.is_success or (degraded and answer.status_code == 503):
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError("serve did not become ready")

    def stop(self) -> str:
        """Graceful stop (SIGTERM / TerminateProcess); returns what it printed."""
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.output()

    def output(self) -> str:
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out or ""


def eventually(probe: Callable[[], T | None], seconds: float = 30, what: str = "") -> T:
    """Poll ``probe`` until it returns something truthy (real processes need real time)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what or probe}")
