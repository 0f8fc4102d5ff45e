"""The route walk, the role table, CSRF and Origin, sessions and tokens (SPEC §12, issue 15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from tests.integration.web.api_env import ORIGIN, PASSWORD, ApiEnv, TestClient, api_env, user_of

from cadenza.clock import FakeClock
from cadenza.services.auth import (
    FIRST_DELAY,
    FREE_FAILURES_PER_ADDRESS,
    FREE_FAILURES_PER_PAIR,
    FREE_FAILURES_PER_USER,
    ROLE_LADDER,
    THROTTLE_WINDOW,
)
from cadenza.services.tokens import TokenService
from cadenza.web.app import ALLOWED_WITHOUT_AUTH

# Every route of the API and the role it needs: a route missing here fails
# test_role_table_covers_every_route, so a new route cannot ship unclassified.
ROLE_TABLE: dict[tuple[str, str], str | None] = {
    ("GET", "/api/health"): None,
    ("POST", "/api/login"): None,
    ("GET", "/api/openapi.json"): "viewer",
    ("GET", "/api/me"): "viewer",
    ("POST", "/api/me/password"): "viewer",
    ("GET", "/api/sessions"): "viewer",
    ("DELETE", "/api/sessions/{session_id}"): "viewer",
    ("GET", "/api/tokens"): "viewer",
    ("POST", "/api/tokens"): "viewer",
    ("DELETE", "/api/tokens/{name}"): "viewer",
    ("GET", "/api/users"): "admin",
    ("POST", "/api/users"): "admin",
    ("PUT", "/api/users/{username}"): "admin",
    ("POST", "/api/users/{username}/unlock"): "admin",
    ("GET", "/api/jobs"): "viewer",
    ("GET", "/api/jobs/{job_id}"): "viewer",
    ("POST", "/api/jobs"): "editor",
    ("PUT", "/api/jobs/{job_id}"): "editor",
    ("DELETE", "/api/jobs/{job_id}"): "editor",
    ("POST", "/api/jobs/{job_id}/presets"): "editor",
    ("POST", "/api/jobs/{job_id}/runs"): "operator",
    ("GET", "/api/runs"): "viewer",
    ("GET", "/api/runs/{run_id}"): "viewer",
    ("GET", "/api/runs/{run_id}/log"): "viewer",
    ("POST", "/api/runs/{run_id}/cancel"): "operator",
    ("POST", "/api/runs/{run_id}/resume"): "operator",
    ("POST", "/api/runs/{run_id}/abandon"): "operator",
    ("POST", "/api/runs/{run_id}/replay"): "operator",
    ("GET", "/api/events"): "viewer",
    ("GET", "/api/stats"): "viewer",
    ("GET", "/metrics"): "viewer",
    ("POST", "/api/backup"): "admin",
    ("GET", "/api/resources"): "viewer",
    ("GET", "/api/resources/{resource_id}"): "viewer",
    ("POST", "/api/resources/{resource_id}/probe"): "operator",
    ("POST", "/api/resources/{resource_id}/enable"): "operator",
    ("POST", "/api/resources/{resource_id}/disable"): "operator",
    ("GET", "/api/notifications"): "viewer",
    ("POST", "/api/channels/{channel}/test"): "admin",
    # the jobs pages (web/ui/jobs.py)
    ("GET", "/jobs"): "viewer",
    ("GET", "/jobs/{job_id}"): "viewer",
    ("GET", "/jobs/{job_id}/run"): "viewer",
    ("POST", "/jobs/{job_id}/run"): "operator",
    ("POST", "/jobs/{job_id}/run-now"): "operator",
    ("POST", "/jobs/{job_id}/enabled"): "editor",
    ("POST", "/jobs/{job_id}/presets"): "editor",
    # the job editor (web/ui/editor.py)
    ("GET", "/jobs/new"): "editor",
    ("POST", "/jobs/new"): "editor",
    ("GET", "/jobs/{job_id}/edit"): "editor",
    ("POST", "/jobs/{job_id}/edit"): "editor",
    ("POST", "/jobs/{job_id}/delete"): "editor",
    ("GET", "/editor/step"): "editor",
    ("GET", "/editor/step-fields"): "editor",
    ("POST", "/editor/check"): "editor",
    ("POST", "/editor/check-toml"): "editor",
    # the runs pages (web/ui/runs.py)
    ("GET", "/runs"): "viewer",
    ("GET", "/runs/{run_id}"): "viewer",
    ("GET", "/runs/{run_id}/live"): "viewer",
    ("POST", "/runs/{run_id}/cancel"): "operator",
    ("POST", "/runs/{run_id}/resume"): "operator",
    ("POST", "/runs/{run_id}/abandon"): "operator",
    ("POST", "/runs/{run_id}/replay"): "operator",
    # ui-ops (web/ui/resources.py, audit.py, dashboard.py, admin.py)
    ("GET", "/resources"): "viewer",
    ("GET", "/resources/{resource_id}"): "viewer",
    ("POST", "/resources/{resource_id}/probe"): "operator",
    ("POST", "/resources/{resource_id}/enable"): "operator",
    ("POST", "/resources/{resource_id}/disable"): "operator",
    ("GET", "/audit"): "viewer",
    ("GET", "/notifications"): "viewer",
    ("POST", "/notifications/channels/{channel}/test"): "admin",
    ("GET", "/dashboard"): "viewer",
    ("GET", "/admin"): "admin",
    ("POST", "/admin/users"): "admin",
    ("POST", "/admin/users/{username}/role"): "admin",
    ("POST", "/admin/users/{username}/disable"): "admin",
    ("POST", "/admin/users/{username}/enable"): "admin",
    ("POST", "/admin/users/{username}/password"): "admin",
    ("POST", "/admin/users/{username}/unlock"): "admin",
    ("POST", "/admin/tokens"): "admin",
    ("POST", "/admin/tokens/{name}/revoke"): "admin",
    ("GET", "/admin/backup"): "admin",
    # the pages (web/ui/): a page without a session answers 401 with the login form
    ("GET", "/"): "viewer",
    ("GET", "/login"): None,
    ("POST", "/login"): None,
    ("POST", "/language"): None,  # a cookie for anyone; a user's setting only with CSRF
    ("GET", "/account"): "viewer",
    ("GET", "/api/docs"): "viewer",  # the API reference: a page (web/ui/api_docs.py)
    ("POST", "/account/password"): "viewer",
    ("POST", "/account/preferences"): "viewer",
    # business calendars and alert groups
    ("GET", "/api/calendars"): "viewer",
    ("GET", "/api/calendars/{name}"): "viewer",
    ("GET", "/api/alerts"): "viewer",
    ("POST", "/api/alerts/{group_id}/ack"): "operator",
    ("POST", "/api/alerts/{group_id}/snooze"): "operator",
    ("GET", "/alerts"): "viewer",
    ("POST", "/alerts/{group_id}/ack"): "operator",
    ("POST", "/alerts/{group_id}/snooze/{how}"): "operator",
    ("GET", "/alerts/link/{token}"): None,  # the link's token is its permission
    ("POST", "/alerts/link/{token}"): None,
    # scheduling paused for the whole home; the desktop window's one-time ticket
    ("GET", "/api/scheduling"): "viewer",
    ("POST", "/api/scheduling/pause"): "operator",
    ("POST", "/api/scheduling/resume"): "operator",
    ("POST", "/scheduling/pause"): "operator",
    ("POST", "/scheduling/resume"): "operator",
    ("GET", "/desktop/enter"): None,  # the ticket is its permission, from the loopback only
    ("POST", "/logout"): "viewer",  # the logouts: each ends the session the walk uses
    ("POST", "/api/logout"): "viewer",
}
FILL = {"{job_id}": "hello", "{run_id}": "nope", "{session_id}": "nope", "{name}": "nope",
        "{username}": "nobody",
        "{resource_id}": "nope", "{channel}": "nope", "{group_id}": "1", "{how}": "1h",
        "{token}": "nope"}
STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
#: pages whose path is under /api/: they answer as pages (the login form), not JSON
PAGES_UNDER_API = {"/api/docs"}


def concrete(path: str) -> str:
    for hole, value in FILL.items():
        path = path.replace(hole, value)
    return path


def flat_routes(routes: list[Any]) -> list[Any]:
    """Every route, routers included (FastAPI 0.16x keeps an included router as one
    entry holding its ``original_router``; our routers carry their full paths)."""
    out: list[Any] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        out.extend(flat_routes(inner.routes) if inner is not None else [route])
    return out


def app_routes(env: ApiEnv) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves."""
    found = set()
    for route in flat_routes(env.client.app.routes):  # type: ignore[attr-defined]
        methods = getattr(route, "methods", None) or set()
        for method in methods - {"HEAD", "OPTIONS"}:
            found.add((method, route.path))
    return found


@pytest.fixture
def env(tmp_path: Path):  # type: ignore[no-untyped-def]
    with api_env(tmp_path) as made:
        yield made


@pytest.mark.reliability_case(32)
def test_role_table_covers_every_route(env: ApiEnv) -> None:
    assert app_routes(env) == set(ROLE_TABLE)
    # and each API route declares its one role dependency
    for route in flat_routes(env.client.app.routes):  # type: ignore[attr-defined]
        if isinstance(route, APIRoute) and (next(iter(route.methods)), route.path) \
                not in ALLOWED_WITHOUT_AUTH:
            roles = [getattr(d.call, "required_role", None) for d in route.dependant.dependencies]
            declared = [r for r in roles if r is not None]
            assert declared == [ROLE_TABLE[(next(iter(route.methods)), route.path)]], route.path


@pytest.mark.reliability_case(32)
def test_route_walk_without_auth_is_401(env: ApiEnv) -> None:
    anonymous = TestClient(env.client.app, base_url=ORIGIN)
    for method, path in sorted(app_routes(env)):
        answer = anonymous.request(method, concrete(path), headers={"Origin": ORIGIN})
        if (method, path) in ALLOWED_WITHOUT_AUTH:
            assert answer.status_code != 401, (method, path)
        elif (path.startswith("/api/") and path not in PAGES_UNDER_API) \
                or path == "/metrics":
            assert answer.status_code == 401, (method, path, answer.text)
            assert "error" in answer.json()
        else:  # a page: 401 with the login form, which comes back here after login
            assert answer.status_code == 401, (method, path, answer.text)
            assert 'action="/login"' in answer.text, (method, path)
            if method == "GET":
                assert f'name="next" value="{concrete(path)}"' in answer.text, path


@pytest.mark.reliability_case(33)
def test_state_changing_needs_csrf_and_origin(env: ApiEnv) -> None:
    admin = env.session("admin2")
    csrf = admin.headers["X-CSRF-Token"]
    bare = TestClient(env.client.app, base_url=ORIGIN, cookies=admin.cookies)
    token = TokenService(env.store).create("walk", "admin", actor="test").token
    bearer = env.token_client(token)
    for method, path in sorted(app_routes(env)):
        if method not in STATE_CHANGING or (method, path) in ALLOWED_WITHOUT_AUTH:
            continue
        url = concrete(path)
        cases = {
            "no csrf": bare.request(method, url, headers={"Origin": ORIGIN}),
            "wrong csrf": bare.request(method, url, headers={"Origin": ORIGIN,
                                                             "X-CSRF-Token": "x" + csrf}),
            "no origin": bare.request(method, url, headers={"X-CSRF-Token": csrf}),
            "foreign origin": bare.request(method, url, headers={
                "Origin": "https://evil.example", "X-CSRF-Token": csrf}),
            "token, foreign origin": bearer.request(method, url, headers={
                "Origin": "https://evil.example"}),
        }
        for case, answer in cases.items():
            assert answer.status_code == 403, (case, method, path, answer.text)
    login = TestClient(env.client.app, base_url=ORIGIN).post(
        "/api/login", json={"username": "admin2", "password": PASSWORD},
        headers={"Origin": "https://evil.example"})
    assert login.status_code == 403


@pytest.mark.reliability_case(33)
def test_json_sent_as_text_plain_is_refused_and_never_read(env: ApiEnv) -> None:
    """A cross-site form can POST JSON-looking text as ``text/plain`` (no preflight) with the
    browser's cookie, but cannot add the CSRF header: every state-changing route answers 403,
    from a foreign Origin, a ``null`` one (a sandboxed form) or even this one. And a body that
    is not declared as JSON is never read as JSON: a same-origin request carrying the token
    gets 415 saying what to send, and nothing is done."""
    admin = env.session("admin2")
    csrf = admin.headers["X-CSRF-Token"]
    bare = TestClient(env.client.app, base_url=ORIGIN, cookies=admin.cookies)
    runs_before = admin.get("/api/runs").json()
    body = b'{"params": {}, "username": "mallory", "password": "x", "roles": ["admin"]}'
    for method, path in sorted(app_routes(env)):
        if method not in STATE_CHANGING or (method, path) in ALLOWED_WITHOUT_AUTH:
            continue
        for origin in ("https://evil.example", "null", ORIGIN):
            answer = bare.request(method, concrete(path), content=body, headers={
                "Content-Type": "text/plain", "Origin": origin})
            assert answer.status_code == 403, (origin, method, path, answer.text)
    for content_type in ("text/plain", "text/plain;charset=UTF-8",
                         "application/x-www-form-urlencoded"):
        answer = bare.post("/api/jobs/hello/runs", content=b"{}", headers={
            "Content-Type": content_type, "Origin": ORIGIN, "X-CSRF-Token": csrf})
        assert answer.status_code == 415, answer.text
        assert "must be JSON sent with Content-Type: application/json" in answer.json()["error"]
        added = bare.post("/api/users", content=body, headers={
            "Content-Type": content_type, "Origin": ORIGIN, "X-CSRF-Token": csrf})
        assert added.status_code == 415, added.text
    login = TestClient(env.client.app, base_url=ORIGIN).post(
        "/api/login", content=b'{"username": "admin2", "password": "%s"}' % PASSWORD.encode(),
        headers={"Content-Type": "text/plain", "Origin": ORIGIN})
    assert login.status_code == 415 and "set-cookie" not in login.headers
    assert admin.get("/api/runs").json() == runs_before
    assert env.store.get_user("mallory") is None


@pytest.mark.parametrize("role", ROLE_LADDER)
@pytest.mark.reliability_case(34)
def test_role_table(env: ApiEnv, role: str) -> None:
    """A viewer cannot run, an operator cannot edit, an editor cannot manage users."""
    client = env.session(user_of(role))
    for (method, path), needed in ROLE_TABLE.items():
        if needed is None:
            continue
        if path.endswith("/logout"):
            client = env.session(user_of(role))
        answer = client.request(method, concrete(path), json={} if method != "GET" else None)
        allowed = ROLE_LADDER.index(role) >= ROLE_LADDER.index(needed)
        if allowed:
            assert answer.status_code not in (401, 403), (role, method, path, answer.text)
        else:
            assert answer.status_code == 403, (role, method, path, answer.text)
            assert f"needs the {needed} role" in answer.text


@pytest.mark.reliability_case(34)
def test_tokens_act_with_their_role(env: ApiEnv) -> None:
    viewer_token = TokenService(env.store).create("ro", "viewer", actor="test").token
    client = env.token_client(viewer_token)
    assert client.get("/api/runs").status_code == 200
    assert client.post("/api/jobs/hello/runs", json={}).status_code == 403
    # a user's token never exceeds the user's role
    capped = TokenService(env.store).create("capped", "admin", username="operator",
                                            actor="test").token
    me = env.token_client(capped).get("/api/me").json()
    assert me == {"username": "operator", "role": "operator", "via": "token",
                  "using": "capped"}


@pytest.mark.reliability_case(34)
def test_a_user_sees_only_own_sessions_and_tokens(env: ApiEnv) -> None:
    alice, bob = env.session("operator"), env.session("editor")
    made = alice.post("/api/tokens", json={"name": "alice-ci", "role": "operator"})
    assert made.status_code == 201 and made.json()["token"].startswith("cdz_")
    assert [t["name"] for t in alice.get("/api/tokens").json()] == ["alice-ci"]
    assert bob.get("/api/tokens").json() == []
    assert bob.delete("/api/tokens/alice-ci").status_code == 404
    alice_sessions = alice.get("/api/sessions").json()
    bob_sessions = bob.get("/api/sessions").json()
    assert len(alice_sessions) == 1 and len(bob_sessions) == 1
    assert alice_sessions[0]["id"] != bob_sessions[0]["id"]
    assert bob.delete(f"/api/sessions/{alice_sessions[0]['id']}").status_code == 404
    assert alice.get("/api/me").status_code == 200
    # nor above one's own role
    assert alice.post("/api/tokens", json={"name": "up", "role": "admin"}).status_code == 403


@pytest.mark.reliability_case(35)
def test_revoked_token_and_logged_out_session_refused_at_once(env: ApiEnv) -> None:
    client = env.session("operator")
    token = client.post("/api/tokens", json={"name": "t1", "role": "viewer"}).json()["token"]
    by_token = env.token_client(token)
    assert by_token.get("/api/runs").status_code == 200
    assert client.delete("/api/tokens/t1").status_code == 204
    assert by_token.get("/api/runs").status_code == 401
    cookies = dict(client.cookies)
    assert client.post("/api/logout").status_code == 204
    replay = TestClient(env.client.app, base_url=ORIGIN, cookies=cookies)
    assert replay.get("/api/runs").status_code == 401


@pytest.mark.reliability_case(35)
def test_password_role_and_disable_end_sessions(env: ApiEnv) -> None:
    admin = env.session("admin2")
    for change in ({"roles": ["viewer"]}, {"disabled": True}, {"password": "another one 123"}):
        victim = env.session("operator")
        answer = admin.put("/api/users/operator", json=change)
        assert answer.status_code == 200 and answer.json()["logins_ended"] == 1, answer.text
        assert victim.get("/api/me").status_code == 401, change
        env.store.update_user("operator", disabled=False, roles=["operator"])


@pytest.mark.reliability_case(35)
def test_login_issues_a_new_session_id_and_ends_the_one_it_was_sent_with(
        env: ApiEnv) -> None:
    """Session fixation: a login, through the API or the login form, always sets a session
    cookie of its own, never the one the browser came with; a planted id stays nobody's,
    and a live session the browser held before (another user's, or the same user's) ends
    with the login, so that an id known before it is worth nothing after it."""
    from cadenza.web.auth import SESSION_COOKIE

    def me(cookie: str) -> int:
        client = TestClient(env.client.app, base_url=ORIGIN)
        client.cookies.set(SESSION_COOKIE, cookie)
        return client.get("/api/me").status_code

    planted = "planted-by-an-attacker-0123456789abcdef"
    browser = TestClient(env.client.app, base_url=ORIGIN)
    browser.cookies.set(SESSION_COOKIE, planted)
    answer = browser.post("/api/login", json={"username": "viewer", "password": PASSWORD},
                          headers={"Origin": ORIGIN})
    assert answer.status_code == 200
    first = answer.cookies[SESSION_COOKIE]
    assert first != planted and me(planted) == 401 and me(first) == 200

    # The same browser logs in as another user: a new id, and the viewer's ends.
    browser.cookies.set(SESSION_COOKIE, first)
    answer = browser.post("/api/login", json={"username": "admin2", "password": PASSWORD},
                          headers={"Origin": ORIGIN})
    second = answer.cookies[SESSION_COOKIE]
    assert second not in (first, planted)
    assert me(first) == 401 and me(second) == 200

    # The login form does the same.
    browser.cookies.set(SESSION_COOKIE, second)
    page = browser.post("/login", data={"username": "admin2", "password": PASSWORD,
                                        "next": "/jobs"},
                        headers={"Origin": ORIGIN}, follow_redirects=False)
    assert page.status_code == 303
    third = page.cookies[SESSION_COOKIE]
    assert third not in (first, second, planted)
    assert me(second) == 401 and me(third) == 200
    sessions = {s.id for s in env.store.list_sessions("admin2")}
    assert len(sessions) == 1  # the live one only

    # A failed login ends nothing.
    browser.cookies.set(SESSION_COOKIE, third)
    wrong = browser.post("/api/login", json={"username": "admin2", "password": "wrong"},
                         headers={"Origin": ORIGIN})
    assert wrong.status_code == 401 and me(third) == 200


@pytest.mark.parametrize("change", [{"password": "another one 123"}, {"disabled": True}])
def test_reset_or_disable_revokes_the_users_tokens_for_good(env: ApiEnv,
                                                            change: dict[str, Any]) -> None:
    admin = env.session("admin2")
    made = env.session("operator").post("/api/tokens", json={"name": "ci", "role": "operator"})
    by_token = env.token_client(made.json()["token"])
    assert by_token.get("/api/me").json()["username"] == "operator"
    assert admin.put("/api/users/operator", json=change).status_code == 200
    assert by_token.get("/api/me").status_code == 401
    # enabling the user again (or a later password) does not bring the token back
    assert admin.put("/api/users/operator", json={"disabled": False}).status_code == 200
    assert by_token.get("/api/me").status_code == 401
    listed = env.store.list_tokens("operator")
    assert [(t.name, t.revoked_at is not None) for t in listed] == [("ci", True)]
    revoked = [e for e in env.store.list_events(event_type="USER_CHANGED")
               if e.payload.get("action") == "token_revoked"]
    reason = "password reset" if "password" in change else "user disabled"
    assert [(e.payload["username"], e.payload["reason"], e.actor) for e in revoked] \
        == [("operator", reason, "user:admin2")]
    assert revoked[0].message == f"API token ci revoked: {reason}"
    # a token made afterwards works; a role change leaves it alone
    fresh = TokenService(env.store).create("ci2", "viewer", username="operator",
                                           actor="test").token
    assert admin.put("/api/users/operator", json={"roles": ["operator"]}).status_code == 200
    assert env.token_client(fresh).get("/api/me").status_code == 200


def test_changing_ones_own_password_keeps_ones_tokens(env: ApiEnv) -> None:
    operator = env.session("operator")
    token = operator.post("/api/tokens", json={"name": "ci", "role": "viewer"}).json()["token"]
    changed = operator.post("/api/me/password", json={"current_password": PASSWORD,
                                                      "new_password": "another one 123"})
    assert changed.status_code == 204, changed.text
    assert env.token_client(token).get("/api/me").status_code == 200


@pytest.mark.reliability_case(35)
def test_login_cookies_events_and_throttling(env: ApiEnv) -> None:
    anonymous = TestClient(env.client.app, base_url=ORIGIN)
    ok = anonymous.post("/api/login", json={"username": "viewer", "password": PASSWORD})
    cookie = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Secure" not in cookie
    secure = TestClient(env.client.app, base_url="https://testserver").post(
        "/api/login", json={"username": "viewer", "password": PASSWORD})
    assert "Secure" in secure.headers["set-cookie"]
    for _ in range(FREE_FAILURES_PER_PAIR):
        bad = anonymous.post("/api/login", json={"username": "viewer", "password": "nope"})
        assert bad.status_code == 401 and bad.json()["error"] == "wrong user name or password"
    throttled = anonymous.post("/api/login", json={"username": "viewer", "password": PASSWORD})
    assert throttled.status_code == 429
    assert throttled.headers["Retry-After"] == str(int(FIRST_DELAY.total_seconds()))
    events = [e for e in env.store.list_events(event_type="USER_LOGIN")]
    outcomes = [e.payload["outcome"] for e in events]
    assert outcomes.count("ok") == 2 and outcomes.count("failed") == FREE_FAILURES_PER_PAIR + 1
    assert all("nope" not in str(e.payload) and PASSWORD not in e.message for e in events)


def _login(env: ApiEnv, address: str, username: str, password: str) -> Any:
    client = TestClient(env.client.app, base_url=ORIGIN, client=(address, 50000))
    return client.post("/api/login", json={"username": username, "password": password})


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.reliability_case(35)
def test_throttling_is_progressive_and_per_address(tmp_path: Path, backend: str,
                                                   request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    with api_env(tmp_path, store_url=url) as env:
        _progressive_and_per_address(env)


def _progressive_and_per_address(env: ApiEnv) -> None:
    clock = env.services.clock
    assert isinstance(clock, FakeClock)
    attacker, other = "203.0.113.7", "198.51.100.2"
    waits = []
    for _ in range(FREE_FAILURES_PER_PAIR + 4):
        answer = _login(env, attacker, "operator", "guess")
        if answer.status_code == 429:  # wait exactly as long as told, then try again
            wait = int(answer.headers["Retry-After"])
            waits.append(wait)
            assert f"try again in {wait} seconds" in answer.json()["error"]
            clock.advance(wait - 1)
            assert _login(env, attacker, "operator", "guess").status_code == 429
            clock.advance(1)
            answer = _login(env, attacker, "operator", "guess")
        assert answer.status_code == 401, answer.text
    first = int(FIRST_DELAY.total_seconds())
    assert waits == [first, 2 * first, 4 * first, 8 * first]  # each failure doubles it
    # the right password from the attacker's address waits too ...
    blocked = _login(env, attacker, "operator", PASSWORD)
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) == 16 * first
    form = TestClient(env.client.app, base_url=ORIGIN, client=(attacker, 50000)).post(
        "/login", data={"username": "operator", "password": PASSWORD},
        follow_redirects=False)
    assert form.status_code == 429 and form.headers["Retry-After"] == str(16 * first)
    # ... but not from an address that has not failed: the user is not locked out
    assert _login(env, other, "operator", PASSWORD).status_code == 200
    # throttled attempts are logged, never counted: hammering does not lengthen the wait
    for _ in range(10):
        assert _login(env, attacker, "operator", PASSWORD).status_code == 429
    assert int(_login(env, attacker, "operator", PASSWORD).headers["Retry-After"]) \
        == 16 * first
    # the waits never exceed the window, and the window forgets
    clock.advance(THROTTLE_WINDOW.total_seconds() + 1)
    assert _login(env, attacker, "operator", PASSWORD).status_code == 200


def test_many_addresses_slow_only_those_that_failed(env: ApiEnv) -> None:
    clock = env.services.clock
    assert isinstance(clock, FakeClock)
    for n in range(FREE_FAILURES_PER_USER):  # one failure from each of many addresses
        assert _login(env, f"192.0.2.{n}", "editor", "guess").status_code == 401
    # a botnet address that failed is slowed by the user's count from every address
    again = _login(env, "192.0.2.0", "editor", PASSWORD)
    assert again.status_code == 429 and int(again.headers["Retry-After"]) > 0
    # one that never failed is not
    assert _login(env, "198.51.100.9", "editor", PASSWORD).status_code == 200
    # an address spraying many user names is slowed for every name
    for n in range(FREE_FAILURES_PER_ADDRESS):
        clock.advance(1)
        assert _login(env, "203.0.113.50", f"nobody{n}", "x").status_code == 401
    assert _login(env, "203.0.113.50", "viewer", PASSWORD).status_code == 429


def test_an_admin_unlocks_a_user(env: ApiEnv) -> None:
    for _ in range(FREE_FAILURES_PER_PAIR):
        _login(env, "203.0.113.7", "operator", "guess")
    assert _login(env, "203.0.113.7", "operator", PASSWORD).status_code == 429
    assert env.session("viewer").post("/api/users/operator/unlock").status_code == 403
    admin = env.session("admin2")
    answer = admin.post("/api/users/operator/unlock")
    assert answer.status_code == 200
    assert answer.json() == {"username": "operator", "failures_forgotten": 3}
    assert _login(env, "203.0.113.7", "operator", PASSWORD).status_code == 200
    assert admin.post("/api/users/nobody/unlock").status_code == 404
    unlocked = [e for e in env.store.list_events(event_type="USER_CHANGED")
                if e.payload.get("action") == "unlocked"]
    assert [(e.payload["username"], e.payload["failures"], e.actor) for e in unlocked] \
        == [("operator", 3, "user:admin2")]
    # the admin page's button does the same
    for _ in range(FREE_FAILURES_PER_PAIR):
        _login(env, "203.0.113.7", "operator", "guess")
    page = admin.post("/admin/users/operator/unlock")
    assert page.status_code == 200 and "operator is unlocked" in page.text
    assert _login(env, "203.0.113.7", "operator", PASSWORD).status_code == 200