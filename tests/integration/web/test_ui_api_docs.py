"""``/api/docs`` (web/ui/api_docs.py): the API reference from this server's own files only
(vendored Swagger UI, an init script under /static), under the Content-Security-Policy;
FastAPI's CDN docs pages are off."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env

from cadenza.web.headers import CSP


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


def test_the_api_reference_uses_only_local_assets_and_keeps_the_csp(env: ApiEnv) -> None:
    client = env.session("viewer")
    answer = client.get("/api/docs")
    assert answer.status_code == 200
    assert answer.headers["content-security-policy"] == CSP
    html = answer.text
    assert "<script>" not in html and not re.search(r"<script(?![^>]*\bsrc=)", html)
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any("vendor/swagger-ui-bundle" in a for a in assets)
    assert any(a.startswith("/static/api_docs.js") for a in assets)
    for url in assets:  # no CDN, no other host
        assert url.startswith("/") and not url.startswith("//"), url
    for url in (a for a in assets if a.startswith("/static/")):
        assert client.get(url).status_code == 200, url
    assert 'data-spec="/api/openapi.json"' in html
    spec = client.get("/api/openapi.json").json()
    assert spec["paths"], "the reference has operations to show"


def test_the_api_reference_needs_a_login_and_fastapis_cdn_pages_are_off(env: ApiEnv) -> None:
    anonymous = env.client
    assert anonymous.get("/api/docs").status_code == 401
    assert anonymous.get("/docs").status_code == 404
    assert anonymous.get("/redoc").status_code == 404
