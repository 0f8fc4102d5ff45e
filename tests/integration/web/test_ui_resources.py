"""The resources pages (web/ui/resources.py): pools as cards, a member's history, the
operators' Probe, Enable and Disable, roles and escaping."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env, without_demo_pools


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


POOLS = """
[pools.egress]
kind = "route"
cooldown = "5m"
[pools.egress.health]
threshold = 90
timeout = "2s"
[[pools.egress.members]]
id = "fr-1"
proxy = "http://127.0.0.1:{port}"
region = "FR"
[[pools.egress.members]]
id = "fr-2"
proxy = "http://127.0.0.1:{port}"
region = "FR"

[pools.units]
kind = "unit"
[[pools.units.members]]
id = "u-1"
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        without_demo_pools(made.services.home.path)
        settings = made.services.home.path / "cadenza.toml"
        settings.write_text(settings.read_text(encoding="utf-8")
                            + POOLS.format(port=closed_port()), encoding="utf-8")
        yield made


def test_no_pools_teaches_where_to_add_one(tmp_path: Path) -> None:
    with api_env(tmp_path) as env:
        without_demo_pools(env.services.home.path)
        page = env.session("viewer").get("/resources")
    assert page.status_code == 200
    assert "No pools — add one in cadenza.toml" in page.text


def test_pools_as_cards_with_a_row_per_member(env: ApiEnv) -> None:
    page = env.session("viewer").get("/resources")
    assert page.status_code == 200, page.text
    assert 'id="pool-egress"' in page.text and 'id="pool-units"' in page.text
    for member in ("fr-1", "fr-2", "u-1"):
        assert f'id="member-{member}"' in page.text
    assert 'hx-trigger="every 10s"' in page.text
    # a viewer sees no button that would be refused
    assert "/probe" not in page.text and "/enable" not in page.text \
        and "/disable" not in page.text
    fragment = env.session("viewer").get("/resources", headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert 'id="member-fr-1"' in fragment.text


def test_operator_probes_a_dead_route_and_it_cools_down(env: ApiEnv) -> None:
    operator = env.session("operator")
    page = operator.get("/resources").text
    assert 'hx-post="/resources/fr-1/probe"' in page
    assert 'hx-post="/resources/u-1/probe"' not in page  # only routes are probed
    answer = operator.post("/resources/fr-1/probe",
                           headers={"HX-Request": "true", "HX-Target": "pools"})
    assert answer.status_code == 200, answer.text
    assert "probe failed" in answer.text
    assert 'id="member-fr-1" data-state="COOLDOWN"' in answer.text
    assert "<svg class=\"spark\"" in answer.text and "<circle" in answer.text
    detail = operator.get("/resources/fr-1")
    assert detail.status_code == 200
    assert "HEALTH_CHECKED" in detail.text and "data-chart=" in detail.text
    # from the member's page the action goes back to it
    back = operator.post("/resources/fr-1/disable", headers={"HX-Request": "true"})
    assert back.headers["HX-Redirect"] == "/resources/fr-1"
    assert env.store.get_resource("fr-1").state.value == "DISABLED"
    enabled = operator.post("/resources/fr-1/enable",
                            headers={"HX-Request": "true", "HX-Target": "pools"})
    assert 'id="member-fr-1" data-state="AVAILABLE"' in enabled.text
    again = operator.post("/resources/fr-1/enable",
                          headers={"HX-Request": "true", "HX-Target": "pools"})
    assert again.status_code == 409 and again.headers["HX-Retarget"] == "#flash"


def test_viewer_may_not_act_and_unknown_member_is_404(env: ApiEnv) -> None:
    viewer = env.session("viewer")
    assert viewer.post("/resources/fr-1/disable").status_code == 403
    assert viewer.get("/resources/nope").status_code == 404
    assert viewer.get("/resources/fr-1").status_code == 200
    assert "/disable" not in viewer.get("/resources/fr-1").text


def test_a_reason_with_markup_shows_as_text(env: ApiEnv) -> None:
    xss = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'
    env.services.resources.list()
    env.services.resources.disable("u-1", reason=xss)
    page = env.session("viewer").get("/resources/u-1").text
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
