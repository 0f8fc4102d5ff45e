"""Browser tests: Debian's Chromium through Playwright (headless, never `playwright
install`) against a real `cadenza serve` on loopback, one per test module.

* ``ui`` — the served demo home with one user per role (``ada`` admin, ``eddie`` editor,
  ``otto`` operator, ``vera`` viewer; password :data:`PASSWORD`), its base URL and CLI.
* ``page`` — a fresh browser context and page; every console error, uncaught exception or
  CSP violation fails the test at teardown.
* ``login(page, ui, user)`` — logs in through the form.
* ``shot(page, name)`` — a screenshot: to ``docs/images/NAME.png`` when
  ``CADENZA_SCREENSHOTS=1`` (how the README's images are made), else to the test's tmp dir.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.conftest import service_missing
from tests.e2e.serve_helpers import Served

CHROMIUM = os.environ.get("CADENZA_CHROMIUM", "/usr/bin/chromium")
PASSWORD = "correct horse battery 9"
USERS = {"ada": "admin", "eddie": "editor", "otto": "operator", "vera": "viewer"}
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


@dataclass
class UI:
    """A served home: its path, base URL, and the CLI on it."""

    home: Path
    base: str
    served: Served
    cli: CliRunner = field(default_factory=CliRunner)

    def run_cli(self, *args: str, input: str | None = None) -> str:
        result = self.cli.invoke(app, ["--home", str(self.home), *args], input=input)
        assert result.exit_code == 0, result.output
        return result.output


def make_home(root: Path) -> Path:
    """The demo home (`cadenza init --example`) with one user per role."""
    home = root / "home"
    cli = CliRunner()
    made = cli.invoke(app, ["init", str(home), "--example"])
    assert made.exit_code == 0, made.output
    for user, role in USERS.items():
        added = cli.invoke(app, ["--home", str(home), "users", "add", user, "--role", role,
                                 "--password-stdin"], input=PASSWORD + "\n")
        assert added.exit_code == 0, added.output
    return home


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test module. Not per session: Playwright's sync API keeps
    an asyncio loop running in the thread while it lives, and the next test file in the
    same process (pytest-xdist) may call ``asyncio.run``."""
    if not Path(CHROMIUM).exists():
        service_missing("chromium", f"{CHROMIUM} not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - a test extra
        service_missing("playwright", exc)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM,
                                      args=["--headless", "--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UI]:
    """A real `cadenza serve` on the demo home, for the test module."""
    home = make_home(tmp_path_factory.mktemp("ui"))
    served = Served(home)
    try:
        served.wait_ready()
        yield UI(home, f"http://127.0.0.1:{served.port}", served)
    finally:
        served.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh context (no cookies) and page; console errors and CSP violations fail."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.set_default_timeout(15_000)
    try:
        yield page
    finally:
        context.close()
    # 401s and 4xx answers that a test provokes on purpose log as console errors: a test
    # that wants them clears page.cadenza_expected (a list of substrings) first.
    expected = getattr(page, "cadenza_expected", [])
    left = [p for p in problems if not any(e in p for e in expected)]
    assert not left, left


def login(page: Any, ui: UI, user: str, password: str = PASSWORD, *,
          next_path: str = "/jobs") -> None:
    """Log in through the login form and land on ``next_path`` (the jobs page)."""
    page.goto(f"{ui.base}/login?next={next_path}")
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{ui.base}{next_path}**")


def shot(page: Any, name: str, tmp_path: Path) -> Path:
    """A full-page screenshot named ``name`` (see the module docstring)."""
    if os.environ.get("CADENZA_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        target = IMAGES / f"{name}.png"
    else:
        target = tmp_path / f"{name}.png"
    # caret="initial": Playwright's caret hiding injects a <style>, which the CSP refuses
    page.screenshot(path=str(target), full_page=True, caret="initial")
    return target


