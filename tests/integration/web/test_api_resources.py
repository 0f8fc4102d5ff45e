"""Resources and notifications over the API: the members of a pool, an operator disabling
and enabling one (its event names the user), a viewer refused, a route-only probe refused
for a unit with the reason; the delivery log and a channel's test message (admin)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import START, ApiEnv, api_env

from cadenza.clock import FakeClock

POOL = """
[pools.desk]
kind = "unit"
cooldown = "5s"
members = [{ id = "desk-1" }, { id = "desk-2" }]
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path, clock=FakeClock(START)) as made:
        settings = made.services.home.path / "cadenza.toml"
        settings.write_text(settings.read_text(encoding="utf-8") + POOL, encoding="utf-8")
        yield made


def test_members_listed_disabled_and_enabled_by_an_operator(env: ApiEnv) -> None:
    viewer, operator = env.session("viewer"), env.session("operator")
    listed = viewer.get("/api/resources").json()["resources"]
    assert [(r["resource_id"], r["pool"], r["state"]) for r in listed] == [
        ("desk-1", "desk", "AVAILABLE"), ("desk-2", "desk", "AVAILABLE"),
        ("unit-1", "units", "AVAILABLE"), ("unit-2", "units", "AVAILABLE")]  # the demo's
    assert viewer.post("/api/resources/desk-1/disable", json={}).status_code == 403
    done = operator.post("/api/resources/desk-1/disable", json={"reason": "screen broken"})
    assert done.status_code == 200 and done.json()["state"] == "DISABLED"
    again = operator.post("/api/resources/desk-1/disable", json={})
    assert again.status_code == 409 and "DISABLED already" in again.json()["error"]
    shown = viewer.get("/api/resources/desk-1").json()
    latest = shown["history"][0]
    assert "screen broken" in latest["message"] and latest["actor"] == "user:operator"
    assert operator.post("/api/resources/desk-1/enable").json()["state"] == "AVAILABLE"
    probe = operator.post("/api/resources/desk-2/probe")
    assert probe.status_code == 422 and "not a route" in probe.json()["error"]
    missing = viewer.get("/api/resources/nope")
    assert missing.status_code == 404 and "no resource 'nope'" in missing.json()["error"]
    assert viewer.get("/api/resources", params={"pool": "nope"}).status_code == 404


def test_notifications_log_and_a_channel_test(env: ApiEnv) -> None:
    admin, operator = env.session("admin2"), env.session("operator")
    assert operator.post("/api/channels/mail/test", json={}).status_code == 403
    unknown = admin.post("/api/channels/nope/test", json={})
    assert unknown.status_code in (404, 422) and "mail" in unknown.json()["error"]
    # the demo channel points at localhost:8025, where nothing listens here: a FAILED
    # delivery with the reason, never a 5xx
    sent = admin.post("/api/channels/mail/test", json={"to": ["ops@example.org"]})
    assert sent.status_code == 200, sent.text
    (delivery,) = sent.json()["deliveries"]
    assert delivery["state"] == "FAILED" and delivery["error"]
    log = operator.get("/api/notifications", params={"state": "FAILED"}).json()
    assert [n["recipient"] for n in log["notifications"]] == ["ops@example.org"]
