"""Job edits, presets and run requests over the API: comments kept, stale writes refused
with a diff, bad edits located, one run per Idempotency-Key under concurrency."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.web.api_env import ORIGIN, ApiEnv, TestClient, api_env

from cadenza.clock import SystemClock
from cadenza.services.tokens import TokenService

HELLO = {"description": "counts, edited over the API", "tags": ["demo"],
         "steps": [{"name": "count", "type": "python", "callable": "demo_tasks:count"}]}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


def comments(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")
            or " #" in line]


def jobs_text(env: ApiEnv) -> str:
    return env.services.home.jobs_file.read_text(encoding="utf-8")


@pytest.mark.reliability_case(8)
def test_edit_create_preset_delete_keep_every_comment(env: ApiEnv) -> None:
    editor = env.session("editor")
    before = jobs_text(env)
    base = editor.get("/api/jobs/hello").json()["hash"]
    edited = editor.put("/api/jobs/hello", json={"definition": HELLO, "base_hash": base})
    assert edited.status_code == 200, edited.text
    assert edited.json()["reloaded"] is True and env.reloads == [1]
    created = editor.post("/api/jobs", json={"id": "hello-2", "definition": HELLO,
                                             "base_hash": edited.json()["hash"]})
    assert created.status_code == 201, created.text
    preset = editor.post("/api/jobs/hello/presets", json={
        "name": "quick", "values": {"log_level": "DEBUG"}, "base_hash": created.json()["hash"]})
    assert preset.status_code == 201, preset.text
    gone = editor.delete("/api/jobs/hello-2",
                         params={"base_hash": preset.json()["hash"]})
    assert gone.status_code == 200, gone.text
    after = jobs_text(env)
    assert comments(after) == comments(before)
    assert 'description = "counts, edited over the API"' in after
    assert "[jobs.hello.presets.quick]" in after and "hello-2" not in after
    shown = editor.get("/api/jobs/hello").json()
    assert shown["description"] == "counts, edited over the API"
    events = env.store.list_events(event_type="CONFIG_CHANGED")
    assert [e.actor for e in events] == ["user:editor"] * 4


@pytest.mark.reliability_case(6)
def test_concurrent_edit_is_409_with_diff_and_nothing_lost(env: ApiEnv) -> None:
    first, second = env.session("editor"), env.session("admin2")
    base = first.get("/api/jobs/hello").json()["hash"]
    ok = first.put("/api/jobs/hello", json={"definition": HELLO, "base_hash": base})
    assert ok.status_code == 200
    written = jobs_text(env)
    other = dict(HELLO, description="the second person's edit")
    stale = second.put("/api/jobs/hello", json={"definition": other, "base_hash": base})
    assert stale.status_code == 409
    body = stale.json()
    assert "changed on disk" in body["error"] and body["hash"] == ok.json()["hash"]
    assert '-description = "counts, edited over the API"' in body["diff"]
    assert '+description = "the second person\'s edit"' in body["diff"]
    assert jobs_text(env) == written  # the first edit is kept, nothing half-written


def test_bad_edit_is_located_and_leaves_the_file(env: ApiEnv) -> None:
    editor = env.session("editor")
    before = jobs_text(env)
    base = editor.get("/api/jobs/hello").json()["hash"]
    bad = dict(HELLO, schedule="61 * * * *")
    answer = editor.put("/api/jobs/hello", json={"definition": bad, "base_hash": base})
    assert answer.status_code == 422
    problem = answer.json()["problems"][0]
    assert problem["location"].startswith("jobs.toml:") and problem["field"] == \
        "jobs.hello.schedule"
    assert problem["text"].startswith(problem["location"] + ": error:")  # cadenza validate
    assert jobs_text(env) == before and env.reloads == []
    missing = editor.put("/api/jobs/hello", json={"base_hash": base})
    assert missing.status_code == 422 and missing.json()["field"] == "definition"


@pytest.mark.reliability_case(50)
def test_run_now_trigger_and_idempotency(env: ApiEnv) -> None:
    operator = env.session("operator")
    plain = operator.post("/api/jobs/hello/runs", json={})
    assert plain.status_code == 201
    run = operator.get(f"/api/runs/{plain.json()['run_id']}").json()
    assert run["trigger"] == "manual:operator" and run["state"] == "QUEUED"
    key = {"Idempotency-Key": "nightly-2027-03-10"}
    first = operator.post("/api/jobs/hello/runs", json={"log_level": "DEBUG"}, headers=key)
    again = operator.post("/api/jobs/hello/runs", json={"log_level": "DEBUG"}, headers=key)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json() == again.json()
    other = operator.post("/api/jobs/hello/runs", json={"log_level": "INFO"}, headers=key)
    assert other.status_code == 422 and "another request body" in other.json()["error"]
    unknown = operator.post("/api/jobs/nope/runs", json={}, headers={"Idempotency-Key": "k"})
    assert unknown.status_code == 404
    assert len(env.store.list_runs(job="hello")) == 2
    # A token of no user runs as api:NAME, shown as it is (not masked as a secret) in the
    # run, its events and the runs page.
    token = TokenService(env.store).create("nightly-ci", "operator", actor="test").token
    bearer = env.token_client(token)
    by_token = bearer.post("/api/jobs/hello/runs", json={}).json()["run_id"]
    assert bearer.get(f"/api/runs/{by_token}").json()["trigger"] == "manual:api:nightly-ci"
    actors = {e["actor"] for e in bearer.get("/api/events", params={"run": by_token})
              .json()["events"]}
    assert "user:api:nightly-ci" in actors, actors
    page = bearer.get("/runs", params={"job": "hello"}).text
    assert "manual: api:nightly-ci" in page and "***" not in page


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.reliability_case(50)
def test_ten_concurrent_clients_one_key_one_run(tmp_path: Path, backend: str,
                                                request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    # The system clock: the requests that lose the race wait (in the app) for the
    # winner's run in real time; nothing here waits for a schedule.
    with api_env(tmp_path, clock=SystemClock(), store_url=url) as env:
        operator = env.session("operator")
        headers = dict(operator.headers) | {"Idempotency-Key": "race"}
        cookies = dict(operator.cookies)
        barrier = threading.Barrier(10)
        answers: list[Any] = []

        def client() -> None:
            mine = TestClient(env.client.app, base_url=ORIGIN, cookies=cookies)
            barrier.wait()
            answers.append(mine.post("/api/jobs/hello/runs", json={"params": {}},
                                     headers=headers))

        threads = [threading.Thread(target=client) for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        codes = sorted(a.status_code for a in answers)
        assert codes == [200] * 9 + [201], [a.text for a in answers]
        assert len({a.json()["run_id"] for a in answers}) == 1
        assert len(env.store.list_runs(job="hello")) == 1
