"""A connection's secret reaches no API response, SSE line, error body or access log: a grep
of everything captured, raw, base64 and URL-encoded (issue 15)."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from tests.integration.web.api_env import START, api_env

from cadenza.domain.states import RunState

SECRET = "s3cr3t+/Tok=en&x"  # changes under base64 and URL encoding


def forms(value: str) -> list[str]:
    raw = value.encode()
    return [value, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
            quote(value, safe=""), quote_plus(value)]


def test_secret_appears_nowhere(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with api_env(tmp_path) as env:
        services = env.services
        services.secrets.set("ds_token", SECRET)
        settings = services.home.config_file
        settings.write_text(settings.read_text(encoding="utf-8").replace(
            'app = "demo_downstream:app"',
            'app = "demo_downstream:app"\n'
            'headers = { Authorization = "Bearer ${secret.ds_token}" }'),
            encoding="utf-8")
        services.config()  # loads the secret into the home's redactor, as a server does
        caplog.set_level(logging.INFO, logger="cadenza.access")
        editor, operator = env.session("editor"), env.session("operator")
        captured: list[str] = []

        def keep(answer: object) -> None:
            captured.append(answer.text)  # type: ignore[attr-defined]
            captured.append(str(answer.headers))  # type: ignore[attr-defined]

        keep(editor.get("/api/jobs"))
        keep(editor.get("/api/jobs/sales-load"))
        base = editor.get("/api/jobs/hello").json()["hash"]
        # a bad edit whose value is the secret: the located error must not echo it
        keep(editor.put("/api/jobs/hello", json={"base_hash": base, "definition": {
            "schedule": SECRET, "steps": [{"name": "c", "type": "python",
                                           "callable": "demo_tasks:count"}]}}))
        keep(editor.put("/api/jobs/hello", json={"base_hash": "stale", "definition": {
            "description": SECRET, "steps": []}}))
        run = operator.post("/api/jobs/sales-load/runs",
                            json={"params": {"period": SECRET}})
        keep(run)
        run_id = run.json()["run_id"]
        keep(operator.get("/api/runs"))
        keep(operator.get(f"/api/runs/{run_id}"))
        env.store.append_log(run_id, "INFO", f"calling downstream with Bearer {SECRET}")
        env.store.transition_run(run_id, RunState.CANCELED, reason=f"stopped {SECRET}")
        keep(operator.get(f"/api/runs/{run_id}/log", params={"follow": "1"}))
        keep(operator.get(f"/api/runs/{run_id}/log"))
        keep(operator.get("/api/events"))
        keep(operator.get(f"/api/runs/{quote(SECRET, safe='')}"))
        keep(operator.get("/api/events", params={"type": SECRET}))
        keep(operator.post("/api/login", json={"username": SECRET, "password": SECRET}))
        captured.extend(record.getMessage() for record in caplog.records)
        assert any("path=/api/runs/" in r.getMessage() for r in caplog.records)
        assert any("event: end" in text for text in captured)
        everything = "\n".join(captured)
        for form in forms(SECRET):
            assert form not in everything, form
    assert START  # the home ran on the fake clock
