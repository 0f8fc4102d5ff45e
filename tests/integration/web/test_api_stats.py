"""`GET /api/stats`, `cadenza stats` and `/metrics`: figures computed from the store
(SPEC §17)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.web.api_env import START, api_env
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.services.tokens import TokenService


def test_stats_from_the_store(tmp_path: Path) -> None:
    clock = FakeClock(START)
    with api_env(tmp_path, clock=clock) as env:
        store = env.store

        def run(job: str, end: RunState, queued: float, took: float) -> None:
            run_id = store.create_run(job, "manual")
            clock.advance(queued)
            assert store.transition_run(run_id, RunState.RUNNING)
            clock.advance(took)
            assert store.transition_run(run_id, end, reason="test")
            clock.advance(100)

        run("hello", RunState.FAILED, 2, 10)
        run("hello", RunState.SUCCEEDED, 4, 30)   # recovered 100 + 4 + 30 s after the failure
        run("sales-load", RunState.SUCCEEDED, 6, 20)
        viewer = env.session("viewer")
        figures = viewer.get("/api/stats", params={"since": "1d"}).json()
        assert figures["runs_by_state"] == {"FAILED": 1, "SUCCEEDED": 2}
        assert figures["queue_seconds"]["count"] == 3 and figures["queue_seconds"]["max"] == 6
        assert figures["execution_seconds"]["mean"] == 20.0
        assert figures["execution_seconds_by_job"]["hello"]["max"] == 30
        assert figures["recovery_seconds_by_job"] == {
            "hello": {"count": 1, "mean": 134.0, "p95": 134.0, "max": 134.0}}
        assert viewer.get("/api/stats", params={"since": "soon"}).status_code == 422
        later = viewer.get("/api/stats", params={"since": "1s"}).json()
        assert later["runs_by_state"] == {}
        assert env.client.get("/metrics").status_code == 401  # never open
        token = TokenService(store).create("prom", "viewer", actor="test").token
        scrape = env.token_client(token).get("/metrics")
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = scrape.text
        assert 'cadenza_runs{job="hello",state="FAILED"} 1.0' in text
        assert "cadenza_queue_depth 0.0" in text
        assert 'cadenza_run_duration_seconds_bucket{job="hello",le="15.0"} 1.0' in text
        assert 'cadenza_run_duration_seconds_count{job="hello"} 2.0' in text
        home = env.services.home.path
    result = CliRunner(env={"CADENZA_FAKE_NOW": START}).invoke(
        app, ["--home", str(home), "stats", "--since", "2027-03-01T00:00:00+00:00", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["runs_by_state"] == {"FAILED": 1, "SUCCEEDED": 2}
