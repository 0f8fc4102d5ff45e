"""A node whose clock runs five minutes ahead, end to end with real `cadenza serve`
processes (RELIABILITY #49; docs/leases.md "Whose clock decides a lease").

A healthy server runs a run; a second server started with its clock shifted five minutes
ahead (``CADENZA_FAKE_NOW``, ``--no-scheduler``) must not take that live run: its reaper
refuses to act and says why (log and CLOCK_SKEW event), every lease it writes is on the
store's time, not its own, and ``/api/health`` gives the skew. On PostgreSQL, a store nodes
on several hosts share, the node also answers degraded and a run submitted through it
carries the store's time. The run's step runs once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.domain.states import RunState
from tests.e2e.lease_home import enqueue, make_home, open_store, run_state
from tests.e2e.serve_helpers import Served, eventually, free_port

AHEAD = timedelta(minutes=5)
LEASE = timedelta(seconds=3)


class SkewedServed(Served):
    """`cadenza serve --no-scheduler` whose clock reads five minutes ahead."""

    def __init__(self, home: Path) -> None:
        self.port = free_port()
        self.web = True
        env = dict(os.environ)
        env["CADENZA_FAKE_NOW"] = (datetime.now(UTC) + AHEAD).isoformat()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cadenza", "--home", str(home), "serve", "--no-scheduler",
             "--port", str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    def wait_ready(self, seconds: float = 30) -> None:
        """Wait until /api/health answers with the clock's skew (ok or degraded)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited: {self.output()}")
            try:
                answer = httpx.get(f"http://127.0.0.1:{self.port}/api/health", timeout=1)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            if answer.json().get("clock_skew_seconds"):
                self.health = answer.json()
                return
            time.sleep(0.2)
        raise AssertionError("serve did not answer degraded")


def _events(home: Path, run_id: str | None = None) -> list[tuple[str, str]]:
    with open_store(home) as store:
        return [(e.event_type, e.message) for e in store.list_events(run_id=run_id)]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.reliability_case(49)
def test_a_node_whose_clock_runs_ahead_does_not_take_a_live_run(
        tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    url = "sqlite:///data/cadenza.db"
    if kind == "postgresql":
        url = str(request.getfixturevalue("pg_url"))
    attempts = tmp_path / "attempts.txt"
    home = make_home(tmp_path / "home", f"""
    [jobs.j]
    [[jobs.j.steps]]
    name = "work"
    type = "python"
    callable = "cz_lease_tasks:work"
    op_kwargs = {{ log_file = "{attempts.as_posix()}", seconds = 8 }}
    """, lease="3s", store_url=url)
    made = CliRunner().invoke(app, ["--home", str(home), "tokens", "create", "ci", "--role",
                                    "operator"])
    assert made.exit_code == 0, made.output
    token = next(w for w in made.output.split() if w.startswith("cdz_"))
    healthy = Served(home)
    skewed: SkewedServed | None = None
    out_healthy = out_skewed = ""
    try:
        healthy.wait_ready()
        run_id = enqueue(home, "j")
        eventually(lambda: attempts.exists() and attempts.read_text().strip(), 30,
                   "the first attempt")
        held = run_state(home, run_id)
        assert held.lease_owner.split(":")[1] == str(healthy.proc.pid)
        skewed = SkewedServed(home)
        skewed.wait_ready()
        health = skewed.health
        assert 290 < health["clock_skew_seconds"] < 310, health
        if kind == "postgresql":
            assert health["status"] == "degraded", health
            assert health["reason"].startswith("clock skew:"), health
            assert "ahead of the store's time" in health["reason"]
            assert "nor leads the scheduler" in health["reason"]
        else:  # one host: a different clock is a deliberate one (CADENZA_FAKE_NOW)
            assert health["status"] == "ok", health
        # A run submitted through the fast node carries the store's time, not its own.
        bearer = {"Authorization": f"Bearer {token}"}
        submitted = httpx.post(f"http://127.0.0.1:{skewed.port}/api/jobs/j/runs", json={},
                               headers=bearer, timeout=10)
        assert submitted.status_code in (200, 201, 202), submitted.text
        extra = submitted.json()["run_id"]
        with open_store(home) as store:  # queued behind the live run (max_concurrency 1)
            assert store.transition_run(extra, RunState.CANCELED, reason="test: only its time")
        created = run_state(home, extra).created_at
        if kind == "postgresql":
            assert abs(created - datetime.now(UTC)) < timedelta(seconds=30), created
        else:
            assert created - datetime.now(UTC) > timedelta(minutes=4), created
        # Its reaper looked at start and then every second; the run's lease (3 s on the
        # host's clock, renewed every second) ended long ago on the fast node's clock.
        done = eventually(lambda: (r := run_state(home, run_id)).state.value == "SUCCEEDED"
                          and r, 60, "the run finished by its holder")
        assert done.lease_epoch == held.lease_epoch  # never taken from its holder
        with open_store(home) as store:
            steps = store.list_step_runs(run_id)
        assert [(s.attempt, s.state.value) for s in steps] == [(1, "SUCCEEDED")]
        assert "RUN_RECOVERED" not in [kind for kind, _ in _events(home, run_id)]
        assert len(attempts.read_text().split()) == 1  # the effects ran once
        assert any(kind == "CLOCK_SKEW" for kind, _ in _events(home))

        # Alone now, the fast node runs a run: its lease is on the host's clock.
        out_healthy = healthy.stop()
        second = enqueue(home, "j")
        taken = eventually(lambda: (r := run_state(home, second)).state.value == "RUNNING"
                           and r.lease_owner and r, 30, "the fast node's claim")
        assert taken.lease_owner.split(":")[1] == str(skewed.proc.pid)
        now = datetime.now(UTC)
        assert now - LEASE < taken.lease_until < now + LEASE + timedelta(seconds=2), (
            taken.lease_until, now)
        eventually(lambda: run_state(home, second).state.value == "SUCCEEDED", 60,
                   "the fast node's run")
    finally:
        if skewed is not None:
            out_skewed = skewed.stop()
        out_healthy = out_healthy or healthy.stop()
    assert f"run {run_id} of j ended SUCCEEDED" in out_healthy, out_healthy
    assert "reaper not started" in out_skewed and "ahead of the store's time" in out_skewed, (
        out_skewed)
    skews = [message for kind, message in _events(home) if kind == "CLOCK_SKEW"]
    assert len(skews) == 1 and "max_clock_skew" in skews[0]
