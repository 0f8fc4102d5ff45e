"""The API through a real `cadenza serve`: a CLI-made token works, is refused once revoked;
a login session runs a job, the run executes, its log streams as server-sent events."""

from __future__ import annotations

from pathlib import Path

import httpx
from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.e2e.serve_helpers import Served, eventually


def test_tokens_sessions_and_a_run_through_serve(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli = CliRunner()
    assert cli.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    made = cli.invoke(app, ["--home", str(home), "tokens", "create", "ci", "--role",
                            "operator"])
    assert made.exit_code == 0, made.output
    token = next(w for w in made.output.split() if w.startswith("cdz_"))
    added = cli.invoke(app, ["--home", str(home), "users", "add", "olga", "--role", "operator",
                             "--password-stdin"], input="olga's password 1\n")
    assert added.exit_code == 0, added.output
    listed = cli.invoke(app, ["--home", str(home), "tokens", "list", "--json"])
    assert '"ci"' in listed.output and token not in listed.output
    served = Served(home)
    try:
        served.wait_ready()
        base = f"http://127.0.0.1:{served.port}"
        assert httpx.get(f"{base}/api/jobs").status_code == 401
        bearer = {"Authorization": f"Bearer {token}"}
        jobs = httpx.get(f"{base}/api/jobs", headers=bearer)
        assert jobs.status_code == 200 and "hello" in [j["id"] for j in jobs.json()]
        assert httpx.get(f"{base}/api/openapi.json", headers=bearer).json()["paths"]

        with httpx.Client(base_url=base) as browser:
            login = browser.post("/api/login", json={"username": "olga",
                                                     "password": "olga's password 1"})
            assert login.status_code == 200
            browser.headers.update({"X-CSRF-Token": login.json()["csrf_token"],
                                    "Origin": base})
            run_id = browser.post("/api/jobs/hello/runs", json={}).json()["run_id"]
            secrets = [token, login.json()["csrf_token"], browser.cookies["cadenza_session"],
                       "olga's password 1"]

            def ended() -> dict[str, object] | None:
                run = browser.get(f"/api/runs/{run_id}").json()
                return run if run["state"] in ("SUCCEEDED", "FAILED") else None

            run = eventually(ended, what="the run to end")
            assert run["state"] == "SUCCEEDED" and run["trigger"] == "manual:olga"
            stream = browser.get(f"/api/runs/{run_id}/log", params={"follow": "1"})
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert "data: " in stream.text and stream.text.endswith("event: end\ndata: {}\n\n")

        revoked = cli.invoke(app, ["--home", str(home), "tokens", "revoke", "ci"])
        assert revoked.exit_code == 0, revoked.output
        assert httpx.get(f"{base}/api/jobs", headers=bearer).status_code == 401
    finally:
        output = served.stop()
    # the access log is there, and holds no token, cookie, CSRF token or password
    assert "method=GET path=/api/jobs status=401" in output
    assert "method=POST path=/api/jobs/hello/runs status=201" in output and "user=olga" in output
    for secret in secrets:
        assert secret not in output
