"""Runs and events over the API: keyset pages, filters, the log, the operator's actions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import START, ApiEnv, api_env
from tests.support.store_helpers import append_log

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path, clock=FakeClock(START)) as made:
        yield made


def test_runs_pages_by_cursor_and_filters(env: ApiEnv) -> None:
    operator = env.session("operator")
    clock = env.services.clock
    made = []
    for _ in range(7):
        made.append(operator.post("/api/jobs/hello/runs", json={}).json()["run_id"])
        clock.advance(60)  # type: ignore[attr-defined]
    env.store.transition_run(made[0], RunState.CANCELED, reason="test")
    seen: list[str] = []
    cursor = None
    while True:
        page = operator.get("/api/runs", params={"limit": 3, **({"cursor": cursor} if cursor
                                                               else {})}).json()
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))
    # a run created meanwhile never shifts a page
    first = operator.get("/api/runs", params={"limit": 3}).json()
    operator.post("/api/jobs/hello/runs", json={})
    second = operator.get("/api/runs", params={"limit": 3, "cursor": first["next_cursor"]})
    assert [r["id"] for r in second.json()["runs"]] == list(reversed(made))[3:6]
    canceled = operator.get("/api/runs", params={"state": "canceled"}).json()["runs"]
    assert [r["id"] for r in canceled] == [made[0]]
    recent = operator.get("/api/runs", params={"since": "150s"}).json()["runs"]
    assert len(recent) == 3  # the one just made and the last two of the seven
    old = operator.get("/api/runs", params={"until": START.replace("09:00", "09:02")})
    assert [r["id"] for r in old.json()["runs"]] == [made[1], made[0]]
    manual = operator.get("/api/runs", params={"trigger": "manual:operator"}).json()
    assert len(manual["runs"]) == 8
    bad = operator.get("/api/runs", params={"state": "sleeping"})
    assert bad.status_code == 422 and "unknown state SLEEPING" in bad.json()["error"]
    bad_since = operator.get("/api/runs", params={"since": "yesterday"})
    assert bad_since.status_code == 422 and bad_since.json()["error"].startswith("since ")
    # A cursor is a run id (a keyset), nothing else: a page never scans for a made-up one.
    bad_cursor = operator.get("/api/runs", params={"cursor": "page-2"})
    assert bad_cursor.status_code == 422 and "invalid cursor" in bad_cursor.json()["error"]
    several = operator.get("/api/runs", params={"state": "queued,canceled", "limit": 20})
    assert [r["id"] for r in several.json()["runs"]][-1] == made[0]


def test_events_cursor_log_and_actions(env: ApiEnv) -> None:
    operator = env.session("operator")
    run_id = operator.post("/api/jobs/hello/runs", json={}).json()["run_id"]
    ids: list[int] = []
    cursor = None
    while True:
        page = operator.get("/api/events", params={"limit": 4, **({"cursor": cursor} if cursor
                                                                  else {})}).json()
        ids += [e["id"] for e in page["events"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert ids == sorted(ids) and len(ids) == len(set(ids)) == len(env.store.list_events())
    by_run = operator.get("/api/events", params={"run": run_id}).json()["events"]
    assert by_run and {e["run"] for e in by_run} == {run_id}
    append_log(env.store, run_id, "WARNING", "a warning")
    append_log(env.store, run_id, "DEBUG", "a detail")
    lines = operator.get(f"/api/runs/{run_id}/log", params={"level": "warning"}).json()
    assert [line["message"] for line in lines] == ["a warning"]
    resume = operator.post(f"/api/runs/{run_id}/resume")
    assert resume.status_code == 409 and "only a NEEDS_REVIEW run" in resume.json()["error"]
    replay = operator.post(f"/api/runs/{run_id}/replay")
    assert replay.status_code == 201 and replay.json()["replay_of"] == run_id
    cancel = operator.post(f"/api/runs/{run_id}/cancel")
    assert cancel.status_code == 200
    detail = operator.get(f"/api/runs/{run_id}").json()
    assert detail["state"] == "CANCELED" and detail["reason"] == "canceled by operator"
    # one actor's events, as the audit page filters them
    every = operator.get("/api/events", params={"limit": 500}).json()["events"]
    actors = {e["actor"] for e in every}
    assert len(actors) >= 2, actors
    for actor in actors:
        mine = operator.get("/api/events", params={"actor": actor, "limit": 500}).json()
        assert [e["id"] for e in mine["events"]] == [
            e["id"] for e in every if e["actor"] == actor]
    assert operator.get("/api/events", params={"actor": "x" * 201}).status_code == 422
    # a filter misspelt is refused, not ignored (ignored, it answered every event)
    for wrong in ("run_id", "event_type"):
        refused = operator.get("/api/events", params={wrong: run_id})
        assert refused.status_code == 422, refused.text
        assert f"unknown filter {wrong}" in refused.json()["error"]
        assert "run, resource, type, since, limit, cursor, actor" in refused.json()["error"]
    # the log of an ended run streams its lines and its events (created, finished), then
    # the end
    stream = operator.get(f"/api/runs/{run_id}/log", params={"follow": "1"})
    assert stream.text.count("data: {\"time\"") == 4 and stream.text.endswith(
        "event: end\ndata: {}\n\n")
    whole = operator.get(f"/api/runs/{run_id}/log").json()
    assert [line["event"] for line in whole if line["event"]] == ["RUN_CREATED",
                                                                   "RUN_FINISHED"]
    assert [line["message"] for line in whole if not line["event"]] == ["a warning",
                                                                         "a detail"]
    assert operator.get("/api/runs/nope").status_code == 404
