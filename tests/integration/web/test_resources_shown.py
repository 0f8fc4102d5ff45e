"""What people see of routes: a credentialed proxy URL masked the same way on every path
(health checks, a route's fault, events, pages, API, CLI), and an enabled member's count of
failed checks starting again. Real parts: the app over a SQLite home (TestClient), real
probes of closed loopback ports, a real request through a dead proxy, the real CLI."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.integration.web.api_env import ApiEnv, api_env, without_demo_pools
from typer.testing import CliRunner

from cadenza.audit import Redactor, redact_url
from cadenza.cli.main import app
from cadenza.domain.errors import ResourceFault
from cadenza.domain.events import EventType
from cadenza.resources.egress import proxy_transport, routed_errors
from cadenza.resources.leased import LeasedResource

HTTP_PW, SOCKS_PW = "Pr0xy-Hidden-1", "S0cks-Hidden-2"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    ports = closed_port(), closed_port()
    pools = f"""
[pools.egress]
kind = "route"
cooldown = "5m"
[pools.egress.health]
threshold = 10
timeout = "2s"
disable_after = 2
[[pools.egress.members]]
id = "fr-1"
proxy = "http://cz:{HTTP_PW}@127.0.0.1:{ports[0]}"
[[pools.egress.members]]
id = "fr-2"
proxy = "socks5://u:{SOCKS_PW}@127.0.0.1:{ports[1]}"
"""
    with api_env(tmp_path) as made:
        without_demo_pools(made.services.home.path)
        settings = made.services.home.path / "cadenza.toml"
        settings.write_text(settings.read_text(encoding="utf-8") + pools, encoding="utf-8")
        made.ports = ports  # type: ignore[attr-defined]
        yield made


def test_a_credentialed_route_url_is_masked_alike_everywhere(env: ApiEnv) -> None:
    http_port, socks_port = env.ports  # type: ignore[attr-defined]
    raw = {"fr-1": f"http://cz:{HTTP_PW}@127.0.0.1:{http_port}",
           "fr-2": f"socks5://u:{SOCKS_PW}@127.0.0.1:{socks_port}"}
    mask = {"fr-1": f"http://***@127.0.0.1:{http_port}",
            "fr-2": f"socks5://***@127.0.0.1:{socks_port}"}
    # The one function, and the redactor of free text, give the same mask.
    for rid in raw:
        assert redact_url(raw[rid]) == mask[rid]
        assert Redactor([]).redact_text(f"via {raw[rid]} now") == f"via {mask[rid]} now"
    seen: list[str] = []

    # Health-check results: the API's probe answer and the page's notice.
    operator = env.session("operator")
    assert operator.get("/api/resources").status_code == 200  # the members registered
    answer = operator.post("/api/resources/fr-1/probe")
    assert answer.status_code == 200, answer.text
    assert answer.json()["ok"] is False and mask["fr-1"] in answer.json()["error"]
    seen.append(answer.text)
    notice = operator.post("/resources/fr-2/probe",
                           headers={"HX-Request": "true", "HX-Target": "pools"})
    assert notice.status_code == 200 and mask["fr-2"] in notice.text
    seen.append(notice.text)

    # Events: each probe's HEALTH_CHECKED message and payload.
    for rid in raw:
        event = env.store.list_events(resource_id=rid, event_type=EventType.HEALTH_CHECKED)[-1]
        assert event.payload["proxy"] == mask[rid] and mask[rid] in event.message
        seen += [event.message, json.dumps(event.payload)]

    # A route's fault: a real request through the dead proxy.
    route = LeasedResource(resource_id="fr-1", pool="egress", kind="route", proxy=raw["fr-1"],
                           region=None, fields={}, route=None)
    with pytest.raises(ResourceFault) as fault, \
            httpx.Client(transport=proxy_transport(raw["fr-1"]), trust_env=False) as client, \
            routed_errors(route, "GET http://127.0.0.1:9/"):
        client.get("http://127.0.0.1:9/", timeout=2)
    assert mask["fr-1"] in str(fault.value)
    seen.append(str(fault.value))
    # ... kept as the member's last error and in its event, as a run's end keeps it.
    env.store.transition_resource("fr-1", "DISABLED", reason=str(fault.value),
                                  fields={"last_error": str(fault.value)})
    event = env.store.list_events(resource_id="fr-1")[-1]
    assert mask["fr-1"] in event.message
    seen.append(event.message)

    # API responses, pages.
    listed = env.session("viewer").get("/api/resources").json()["resources"]
    assert {r["resource_id"]: r["proxy"] for r in listed} == mask
    shown = env.session("viewer").get("/api/resources/fr-1")
    assert shown.json()["proxy"] == mask["fr-1"]
    assert mask["fr-1"] in shown.json()["last_error"]
    seen += [json.dumps(listed), shown.text]
    for path in ("/resources", "/resources/fr-1", "/resources/fr-2"):
        page = env.session("viewer").get(path)
        assert page.status_code == 200
        assert any(m in page.text for m in mask.values())
        seen.append(page.text)

    # The CLI.
    home = str(env.services.home.path)
    runner = CliRunner()
    for args in (["resources", "show", "fr-1"], ["resources", "list", "--json"],
                 ["resources", "probe", "fr-2"]):
        result = runner.invoke(app, ["--home", home, *args])
        assert result.exit_code in (0, 1), result.output
        seen.append(result.output)
    assert f"proxy: {mask['fr-1']}" in seen[-3] and mask["fr-2"] in seen[-1]

    for text in seen:
        assert HTTP_PW not in text and SOCKS_PW not in text
        assert "cz:" not in text and "u:S0" not in text


def test_enabling_a_member_starts_its_failed_checks_again(env: ApiEnv) -> None:
    operator = env.session("operator")
    assert operator.get("/api/resources").status_code == 200  # the members registered
    assert operator.post("/api/resources/fr-1/probe").json()["after"] == "AVAILABLE"
    second = operator.post("/api/resources/fr-1/probe").json()
    assert second["after"] == "DISABLED"  # disable_after = 2
    failures = env.store.get_resource("fr-1").health.consecutive_failures
    assert failures == 2
    enabled = operator.post("/api/resources/fr-1/enable")
    assert enabled.status_code == 200 and enabled.json()["state"] == "AVAILABLE"
    health = env.store.get_resource("fr-1").health
    assert health.consecutive_failures == 0 and health.score > second["score"]
    event = env.store.list_events(resource_id="fr-1")[-1]
    assert "consecutive failed health checks reset (were 2)" in event.message
    # One failure after the enable is one, not three: the route stays in service.
    third = operator.post("/api/resources/fr-1/probe").json()
    assert third["ok"] is False and third["after"] == "AVAILABLE"
    assert env.store.get_resource("fr-1").health.consecutive_failures == 1
    # The CLI's enable does the same.
    operator.post("/api/resources/fr-1/probe")
    assert env.store.get_resource("fr-1").state.value == "DISABLED"
    result = CliRunner().invoke(app, ["--home", str(env.services.home.path), "resources",
                                      "enable", "fr-1"])
    assert result.exit_code == 0, result.output
    assert env.store.get_resource("fr-1").health.consecutive_failures == 0
