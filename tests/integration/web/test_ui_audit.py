"""The audit log and notifications pages (web/ui/audit.py): filters in the URL, keyset
pages, escaping, the channels' Send test for admins only."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


def ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'id="event-(\d+)"', html)]


def test_events_newest_first_in_keyset_pages(env: ApiEnv) -> None:
    for i in range(120):
        env.store.append_event("CONFIG_CHANGED", f"reload number {i}", actor="user:ana")
    viewer = env.session("viewer")
    first = viewer.get("/audit", params={"type": "config_changed"})
    assert first.status_code == 200, first.text
    page1 = ids(first.text)
    assert len(page1) == 50 and page1 == sorted(page1, reverse=True)
    assert "reload number 119" in first.text
    older = re.search(r'href="/audit\?([^"]*before=\d+)"', first.text)
    assert older is not None and "Newer" not in first.text
    second = viewer.get("/audit?" + older.group(1).replace("&amp;", "&"))
    page2 = ids(second.text)
    assert len(page2) == 50 and max(page2) < min(page1)
    newer = re.search(r'href="/audit\?([^"]*after=\d+)"', second.text)
    assert newer is not None
    back = viewer.get("/audit?" + newer.group(1).replace("&amp;", "&"))
    assert ids(back.text) == page1


def test_filters_by_actor_resource_run_and_since(env: ApiEnv) -> None:
    env.store.append_event("CONFIG_CHANGED", "by ana", actor="user:ana")
    env.store.append_event("CONFIG_CHANGED", "by bob", actor="user:bob")
    viewer = env.session("viewer")
    page = viewer.get("/audit", params={"actor": "user:bob", "since": "1h"}).text
    assert "by bob" in page and "by ana" not in page
    assert 'value="user:bob"' in page  # the filter stays in the form
    assert "No events match" in viewer.get("/audit", params={"run": "nope"}).text
    bad = viewer.get("/audit", params={"since": "yesterday-ish"})
    assert bad.status_code == 422 and "since" in bad.text
    bad_type = viewer.get("/audit", params={"type": "NOT_A_TYPE"})
    assert bad_type.status_code == 422


def test_event_reasons_and_actors_show_as_text(env: ApiEnv) -> None:
    env.store.append_event("CONFIG_CHANGED", f"reason {XSS}", actor=f"user:{XSS}",
                           payload={"why": XSS})
    page = env.session("viewer").get("/audit").text
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "reason &lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_notifications_log_and_send_test_for_admins(env: ApiEnv) -> None:
    viewer = env.session("viewer").get("/notifications")
    assert viewer.status_code == 200 and "Send test" not in viewer.text
    assert "No notifications sent yet" in viewer.text
    admin = env.session("admin2")
    page = admin.get("/notifications").text
    assert 'hx-post="/notifications/channels/mail/test"' in page
    sent = admin.post("/notifications/channels/mail/test", data={"to": "ops@example.org"},
                      headers={"HX-Request": "true"})
    assert sent.status_code == 200, sent.text
    assert "Test message through mail" in sent.text and "ops@example.org" in sent.text
    assert '<div id="deliveries" hx-swap-oob="innerHTML">' in sent.text  # the log, anew
    rows = admin.get("/notifications").text
    assert "ops@example.org" in rows and "No notifications sent yet" not in rows
    assert env.session("operator").post("/notifications/channels/mail/test",
                                        data={"to": "x@example.org"}).status_code == 403
    missing = admin.post("/notifications/channels/nope/test", headers={"HX-Request": "true"})
    assert missing.status_code == 404 and "no channel" in missing.text
    no_to = admin.post("/notifications/channels/mail/test", headers={"HX-Request": "true"})
    assert no_to.status_code == 422 and "recipient" in no_to.text
