"""Saving a job whose python step calls code outside plugins/ is refused over the API
(422, the file untouched) and a CONFIG_REFUSED event names who tried."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


@pytest.mark.parametrize("spec", ["os:system", "subprocess:run", "builtins:eval",
                                  "importlib:import_module", "shutil:rmtree"])
def test_a_callable_outside_plugins_is_refused_with_an_event(env: ApiEnv, spec: str) -> None:
    editor = env.session("editor")
    before = env.services.home.jobs_file.read_text(encoding="utf-8")
    base = editor.get("/api/jobs/hello").json()["hash"]
    evil = {"steps": [{"name": "pwn", "type": "python", "callable": spec}]}
    answer = editor.put("/api/jobs/hello", json={"definition": evil, "base_hash": base})
    assert answer.status_code == 422, answer.text
    problem = answer.json()["problems"][0]
    assert problem["field"] == "jobs.hello.steps[0].callable"
    assert "step 'pwn'" in problem["text"] and "code runs only from the home's plugins/" \
        in problem["text"]
    assert env.services.home.jobs_file.read_text(encoding="utf-8") == before
    assert env.reloads == []
    events = env.store.list_events(event_type="CONFIG_REFUSED")
    assert [e.actor for e in events] == ["user:editor"]
    assert spec in events[0].message and events[0].level == "WARNING"
    assert env.store.list_events(event_type="CONFIG_CHANGED") == []


def test_an_ordinary_bad_edit_writes_no_refusal_event(env: ApiEnv) -> None:
    editor = env.session("editor")
    base = editor.get("/api/jobs/hello").json()["hash"]
    bad = {"schedule": "61 * * * *",
           "steps": [{"name": "count", "type": "python", "callable": "demo_tasks:count"}]}
    answer = editor.put("/api/jobs/hello", json={"definition": bad, "base_hash": base})
    assert answer.status_code == 422
    assert env.store.list_events(event_type="CONFIG_REFUSED") == []
