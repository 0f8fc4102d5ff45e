"""The desktop window's way in and the scheduling pause, through the app in-process.

``/desktop/enter``: a ticket made by ``cadenza desktop`` (the OS user's, stored hashed) logs
the window in once, from the loopback only, within its minute; anything else is refused
with the login form (403) and nothing else happens. The pause: operators pause and resume
from the API and the pages; while paused the jobs list and the dashboard say so, by whom,
with a Resume button."""

from __future__ import annotations

import warnings
from datetime import timedelta
from pathlib import Path

from tests.integration.web.api_env import ORIGIN, api_env

from cadenza.clock import FakeClock
from cadenza.desktop.node import desktop_user, login_url
from cadenza.domain.events import EventType

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

LOOPBACK = ("127.0.0.1", 50123)


def test_a_ticket_logs_the_window_in_once_from_the_loopback_only(tmp_path: Path) -> None:
    clock = FakeClock("2027-03-10T09:00:00+00:00")
    with api_env(tmp_path, clock) as env:
        username = desktop_user(env.services)
        assert list(env.store.get_user(username).roles) == ["admin"]
        assert desktop_user(env.services) == username  # made once, then used as it is
        url = login_url(env.services, "http://testserver", username, "/runs")
        path = url.removeprefix("http://testserver")
        # From another machine: refused, and the ticket is not spent.
        remote = TestClient(env.client.app, base_url=ORIGIN, client=("192.0.2.7", 4000))
        answer = remote.get(path, follow_redirects=False)
        assert answer.status_code == 403
        assert "accepted from this computer only" in answer.text
        # From the loopback: a session, then the page asked for.
        window = TestClient(env.client.app, base_url=ORIGIN, client=LOOPBACK)
        answer = window.get(path, follow_redirects=False)
        assert (answer.status_code, answer.headers["location"]) == (303, "/runs")
        assert window.get("/api/me").json()["username"] == username
        # Once only.
        again = TestClient(env.client.app, base_url=ORIGIN, client=LOOPBACK)
        answer = again.get(path, follow_redirects=False)
        assert answer.status_code == 403 and "unknown, used or expired" in answer.text
        again.cookies.set("cadenza_lang", "zh_Hans")  # said in the reader's language
        assert "此桌面登录票据未知、已使用或已过期" in again.get(
            path, follow_redirects=False).text
        # A ticket left past its minute is refused too.
        late = login_url(env.services, "http://testserver", username)
        clock.advance(timedelta(seconds=61))
        answer = again.get(late.removeprefix("http://testserver"), follow_redirects=False)
        assert answer.status_code == 403
        logins = [e for e in env.store.list_events(limit=50)
                  if e.event_type == EventType.USER_LOGIN]
        assert [e.actor for e in logins] == [f"desktop:{_os_user()}"]
        # The ticket itself is kept only as its hash.
        ticket = url.split("ticket=")[1].split("&")[0]
        assert ticket not in (tmp_path / "home" / "data" / "cadenza.db").read_bytes().decode(
            "latin-1")


def _os_user() -> str:
    from cadenza.desktop.node import os_user

    return os_user()


def test_pause_and_resume_from_the_api_and_the_pages(tmp_path: Path) -> None:
    with api_env(tmp_path) as env:
        viewer, operator = env.session("viewer"), env.session("operator")
        assert viewer.get("/api/scheduling").json() == {"paused": False}
        assert viewer.post("/api/scheduling/pause").status_code == 403
        paused = operator.post("/api/scheduling/pause").json()
        assert paused["paused"] is True and paused["by"] == "user:operator"
        page = viewer.get("/jobs").text
        assert 'id="scheduling-paused"' in page and "user:operator" in page
        assert 'hx-post="/scheduling/resume"' not in page  # a viewer cannot resume
        page = operator.get("/dashboard").text
        assert 'id="scheduling-paused"' in page
        assert 'hx-post="/scheduling/resume"' in page
        answer = operator.post("/scheduling/resume", data={"next": "/dashboard"})
        assert answer.headers["HX-Redirect"] == "/dashboard"
        assert viewer.get("/api/scheduling").json() == {"paused": False}
        assert 'id="scheduling-paused"' not in viewer.get("/jobs").text
        assert 'hx-post="/scheduling/pause"' in operator.get("/dashboard").text
        fr = env.session("operator")
        fr.cookies.set("cadenza_lang", "fr")
        operator.post("/api/scheduling/pause")
        assert "La planification est suspendue" in fr.get("/jobs").text
