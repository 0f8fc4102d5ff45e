"""`GET /api/stats`, `cadenza stats` and `/metrics`: figures computed from the store
(SPEC §17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.integration.web.api_env import START, api_env
from tests.support.store_helpers import end_run, start_run
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
            assert start_run(store, run_id)
            clock.advance(took)
            assert end_run(store, run_id, end, reason="test")
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


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_pool_utilization_and_cooling_down(tmp_path: Path, backend: str,
                                           request: pytest.FixtureRequest) -> None:
    from datetime import timedelta

    from cadenza.domain.states import ResourceState as X

    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    clock = FakeClock(START)
    with api_env(tmp_path, clock=clock, store_url=url) as env:
        store = env.store
        for rid, pool, kind in (("r1", "proxies", "route"), ("r2", "proxies", "route"),
                                ("u1", "accounts", "unit")):
            store.upsert_resource(rid, pool, kind)
        clock.advance(100)
        assert store.transition_resource("r1", X.LEASED, fields={"lease_owner": "run-a"})
        assert store.transition_resource("u1", X.LEASED, fields={"lease_owner": "run-b"})
        clock.advance(50)
        assert store.transition_resource("r1", X.RUNNING)
        middle = clock.now()
        clock.advance(150)
        assert store.transition_resource("r1", X.COOLDOWN)
        until = clock.now() + timedelta(minutes=10)
        store.update_resource_health("r1", {"cooldown_until": until})
        clock.advance(200)  # now: START + 500 s; u1 still LEASED
        viewer = env.session("viewer")
        figures = viewer.get("/api/stats", params={"since": "1h"}).json()
        proxies = figures["resource_utilization_by_pool"]["proxies"]
        assert proxies["members"] == 2 and proxies["leased_seconds"] == 200.0
        assert proxies["running_seconds"] == 150.0
        assert proxies["leased_share"] == round(200 / (2 * 3600), 4)
        assert proxies["running_share"] == round(150 / (2 * 3600), 4)
        assert proxies["by_state"] == {"AVAILABLE": 1, "COOLDOWN": 1}
        accounts = figures["resource_utilization_by_pool"]["accounts"]
        assert accounts["leased_seconds"] == 400.0 and accounts["running_share"] == 0.0
        assert figures["resources_cooling_down"] == [
            {"resource": "r1", "pool": "proxies",
             "until": until.isoformat().replace("+00:00", "Z")}]
        # a window that starts while members are held counts them from its start
        since = middle.isoformat()
        part = viewer.get("/api/stats", params={"since": since}).json()
        assert part["resource_utilization_by_pool"]["proxies"]["leased_seconds"] == 150.0
        assert part["resource_utilization_by_pool"]["proxies"]["leased_share"] == \
            round(150 / (2 * 350), 4)
        assert part["resource_utilization_by_pool"]["accounts"]["leased_share"] == 1.0
        token = TokenService(store).create("prom", "viewer", actor="test").token
        text = env.token_client(token).get("/metrics").text
        assert 'cadenza_pool_members{pool="proxies",state="COOLDOWN"} 1.0' in text
        assert 'cadenza_pool_members{pool="proxies",state="LEASED"} 0.0' in text
        assert 'cadenza_pool_members{pool="accounts",state="LEASED"} 1.0' in text
        home = env.services.home.path
    if url is None:
        result = CliRunner(env={"CADENZA_FAKE_NOW": START}).invoke(
            app, ["--home", str(home), "stats", "--json"])
        assert result.exit_code == 0, result.output
        assert "proxies" in json.loads(result.output)["resource_utilization_by_pool"]
