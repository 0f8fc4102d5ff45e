"""The dashboard (web/ui/dashboard.py): the SPEC §17 figures from the stats service, the
window kept in the URL, charts as data-chart, an empty store."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
from tests.integration.web.api_env import START, api_env, without_demo_pools
from tests.support.store_helpers import end_run, start_run

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.store.stats import run_series, run_stats


def test_dashboard_shows_the_figures_and_charts(tmp_path: Path) -> None:
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
        run("hello", RunState.SUCCEEDED, 4, 30)
        run("sales-load", RunState.SUCCEEDED, 6, 20)
        viewer = env.session("viewer")
        page = viewer.get("/dashboard")
        assert page.status_code == 200, page.text
        text = page.text
        assert 'aria-current="page">last 24 h' in text
        for section in ("tile-queue", "tile-execution", "tile-retry", "tile-cooldown",
                        "utilization", "errors", "recovery", "by-job"):
            assert f'id="{section}"' in text, section
        assert "2 min 14 s" in text  # hello recovered 134 s after its failure
        charts = [json.loads(unescape(c)) for c in re.findall(r'data-chart="([^"]*)"', text)]
        assert len(charts) == 2
        runs = charts[0]
        assert len(runs["x"]) == 25 and sum(runs["series"][0]["values"]) == 2
        assert sum(runs["series"][1]["values"]) == 1
        week = viewer.get("/dashboard", params={"window": "7d"}).text
        assert 'aria-current="page">last 7 days' in week
        assert viewer.get("/dashboard", params={"window": "1y"}).status_code == 422
        # the same figures in French and Chinese: the locale's decimal sign and units
        french = viewer.get("/dashboard", headers={"Accept-Language": "fr"}).text
        assert "2\xa0min 14\u202fs" in french  # recovered after 134 s
        chinese = viewer.get("/dashboard", headers={"Accept-Language": "zh-CN"}).text
        assert "2分钟14秒" in chinese


def test_an_empty_store_says_so(tmp_path: Path) -> None:
    with api_env(tmp_path) as env:
        page = env.session("viewer").get("/dashboard")
    assert page.status_code == 200
    assert "No runs in this window." in page.text and "data-chart" not in page.text


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_series_buckets(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    from datetime import timedelta

    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    clock = FakeClock(START)
    with api_env(tmp_path, clock=clock, store_url=url) as env:
        store = env.store
        now = clock.now()
        first = store.create_run("hello", "manual")
        clock.advance(30.5)
        start_run(store, first)
        clock.advance(3600)  # ends in the second hour
        end_run(store, first, RunState.SUCCEEDED, reason="test")
        second = store.create_run("hello", "manual")
        clock.advance(1.25)
        start_run(store, second)
        clock.advance(10)
        end_run(store, second, RunState.FAILED, reason="test")
        series = run_series(store, now, now + timedelta(hours=3), timedelta(hours=1))
        before = run_series(store, now + timedelta(hours=2), now + timedelta(hours=3),
                            timedelta(hours=1))
        figures = run_stats(store, now)
    assert figures.runs_by_state == {"SUCCEEDED": 1, "FAILED": 1}
    assert (figures.queue.count, figures.queue.max) == (2, 30.5)
    assert (figures.execution.mean, figures.execution.max) == (1805.0, 3600.0)
    assert len(series.x) == 4 and series.x[1] - series.x[0] == 3600
    assert series.succeeded == [0, 1, 0, 0] and series.failed == [0, 1, 0, 0]
    assert series.queue_mean == [30.5, 1.25, None, None]
    assert series.execution_mean == [None, 1805.0, None, None]
    assert sum(before.succeeded) == 0  # runs created before the window are not in it


def test_utilization_per_pool_from_lease_events(tmp_path: Path) -> None:
    from datetime import timedelta

    clock = FakeClock(START)
    with api_env(tmp_path, clock=clock) as env:
        without_demo_pools(env.services.home.path)
        settings = env.services.home.path / "cadenza.toml"
        settings.write_text(settings.read_text(encoding="utf-8") + """
[pools.slots]
kind = "unit"
[[pools.slots.members]]
id = "s-1"
[[pools.slots.members]]
id = "s-2"
""", encoding="utf-8")
        resources = env.services.resources
        assert [m.resource_id for m in resources.list()] == ["s-1", "s-2"]
        since = clock.now()
        store = env.store
        store.append_event("RESOURCE_LEASED", "s-1 leased", resource_id="s-1")
        clock.advance(1800)
        store.append_event("RESOURCE_RELEASED", "s-1 released", resource_id="s-1")
        clock.advance(1800)  # one hour: s-1 held half of it, s-2 none
        assert resources.utilization(since) == {"slots": 0.25}
        store.append_event("RESOURCE_LEASED", "s-2 leased", resource_id="s-2")
        clock.advance(3600)  # two hours: s-1 0.5 h, s-2 1 h (still held) of 4 h
        assert resources.utilization(since) == {"slots": 0.375}
        # a release whose lease is before the window counts from the window's start
        assert resources.utilization(since + timedelta(minutes=15)) == {
            "slots": round((900 + 3600) / (2 * 6300), 4)}


def test_figures_are_read_again_after_half_a_minute(tmp_path: Path) -> None:
    clock = FakeClock(START)
    with api_env(tmp_path, clock=clock) as env:
        viewer = env.session("viewer")

        def runs_tile() -> str:
            page = viewer.get("/dashboard").text
            found = re.search(r'id="tile-runs"><div class="label">Runs</div>'
                              r'<div class="value">(\d+)<', page)
            assert found is not None
            return found.group(1)

        assert runs_tile() == "0"
        env.store.create_run("hello", "manual")
        clock.advance(10)
        assert runs_tile() == "0"  # kept for 30 s
        clock.advance(21)
        assert runs_tile() == "1"
