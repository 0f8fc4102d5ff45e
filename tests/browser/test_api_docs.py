"""``/api/docs`` in Chromium against a real `cadenza serve`, with every other host out of
reach: the vendored Swagger UI draws the operations from /api/openapi.json, under the
CSP (a violation or a console error fails the test, see conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.browser.conftest import UI, login, shot


def test_the_api_reference_renders_offline(ui: UI, page: Any, tmp_path: Path) -> None:
    ours = urlsplit(ui.base).netloc
    elsewhere: list[str] = []

    def only_ours(route: Any) -> None:
        if urlsplit(route.request.url).netloc == ours:
            route.continue_()
        else:  # the network beyond this server is unavailable
            elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    page.route("**/*", only_ours)
    login(page, ui, "vera", next_path="/api/docs")
    operations = page.locator("#swagger-ui .opblock")
    operations.first.wait_for()
    assert operations.count() > 10
    assert page.locator("#swagger-ui .opblock-summary-path", has_text="/api/jobs").count() > 0
    page.locator("#swagger-ui .opblock-summary-path", has_text="/api/jobs").first.click()
    page.locator("#swagger-ui .opblock-body").first.wait_for()  # expands in place
    shot(page, "api-docs", tmp_path)
    assert elsewhere == []
