"""Logging in and out through the pages; the CSP and security headers; the login form
comes back to the page asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import PASSWORD, UI, login, shot


def test_login_lands_on_jobs_and_logout_ends_the_session(ui: UI, page: Any,
                                                         tmp_path: Path) -> None:
    page.cadenza_expected = ["401"]
    page.goto(f"{ui.base}/")
    assert page.locator("form[action='/login']").is_visible()
    shot(page, "login", tmp_path)
    login(page, ui, "ada", next_path="/account")
    assert page.locator(".usermenu").inner_text().startswith("ada")
    page.click("text=Log out")
    page.wait_for_url(f"{ui.base}/login**")
    page.goto(f"{ui.base}/account")
    assert page.locator("form[action='/login']").is_visible()  # the session is over


def test_wrong_password_says_so_and_keeps_the_page_asked_for(ui: UI, page: Any) -> None:
    page.cadenza_expected = ["401"]
    page.goto(f"{ui.base}/account")
    page.fill("#username", "vera")
    page.fill("#password", "not it")
    page.click("button[type=submit]")
    assert "Wrong user name or password" in page.locator(".flash.error").inner_text()
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{ui.base}/account")
    assert page.locator("h1").inner_text().startswith("vera")


@pytest.mark.reliability_case(36)
def test_every_answer_has_the_csp(ui: UI) -> None:
    for path in ("/login", "/static/cadenza.js", "/api/health", "/nowhere"):
        answer = httpx.get(ui.base + path)
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert answer.headers["x-frame-options"] == "DENY"
