"""The operations pages in Chromium against a real `cadenza serve` (web/ui/resources.py,
audit.py, dashboard.py, admin.py): a route going COOLDOWN shows on /resources, a viewer
finds no Probe/Enable/Disable, an admin creates a token and sees it once; screenshots
``resources``, ``audit``, ``dashboard`` and ``admin``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import UI, login, make_home, shot
from tests.e2e.serve_helpers import Served
from tests.support.proxies import FaultProxy

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'

POOLS = """
[pools.egress]
kind = "route"
cooldown = "10m"
[pools.egress.health]
interval = "1h"
timeout = "2s"
threshold = 90
[[pools.egress.members]]
id = "fr-1"
proxy = "{one}"
region = "FR"
[[pools.egress.members]]
id = "fr-2"
proxy = "{two}"
region = "FR"

[pools.slots]
kind = "unit"
[[pools.slots.members]]
id = "slot-1"
[[pools.slots.members]]
id = "slot-2"
"""


@pytest.fixture(scope="module")
def proxies() -> Iterator[tuple[FaultProxy, FaultProxy]]:
    one, two = FaultProxy(), FaultProxy()
    try:
        yield one, two
    finally:
        one.close()
        two.close()


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory,
        proxies: tuple[FaultProxy, FaultProxy]) -> Iterator[UI]:
    """The demo home with a route pool through two fault proxies and a unit pool, two
    runs of `hello` (for the dashboard and the audit log), served."""
    home = make_home(tmp_path_factory.mktemp("ops"))
    settings = home / "cadenza.toml"
    settings.write_text(settings.read_text(encoding="utf-8")
                        + POOLS.format(one=proxies[0].url, two=proxies[1].url),
                        encoding="utf-8")
    served = Served(home)
    try:
        served.wait_ready()
        ui = UI(home, f"http://127.0.0.1:{served.port}", served)
        ui.run_cli("run", "hello")
        ui.run_cli("run", "hello")
        ui.run_cli("users", "add", "mallory", "--role", "viewer", "--display-name", XSS,
                   "--password-stdin", input="correct horse battery 9\n")
        yield ui
    finally:
        served.stop()


def test_a_route_going_cooldown_shows_on_resources(ops: UI, page: Any,
                                                   proxies: tuple[FaultProxy, FaultProxy],
                                                   tmp_path: Path) -> None:
    login(page, ops, "otto", next_path="/resources")
    row = page.locator("#member-fr-1")
    assert row.get_attribute("data-state") in ("AVAILABLE", "COOLDOWN")
    page.locator("#member-fr-2 button", has_text="Probe").click()
    page.wait_for_selector("#pools .flash.ok")  # fr-2's proxy answers: the probe passed
    proxies[0].refuse()  # fr-1's proxy stops listening
    try:
        page.locator("#member-fr-1 button", has_text="Probe").click()
        page.wait_for_selector('#member-fr-1[data-state="COOLDOWN"]')
        assert "probe failed" in page.locator("#pools .flash").inner_text()
        # the page script turns the UTC time into "in N minutes" once htmx has settled
        page.wait_for_function("""() => {
            const t = document.querySelector(
                '#member-fr-1 td[data-label=Cooldown] time[data-rel]');
            return t !== null && /in \\d+ minutes?/.test(t.textContent);
        }""")
        assert page.locator("#member-fr-1 svg.spark circle").count() >= 1
        # a change made elsewhere (the CLI) shows at the next refresh, without a reload
        ops.run_cli("resources", "disable", "slot-2")
        page.wait_for_selector('#member-slot-2[data-state="DISABLED"]', timeout=20_000)
        shot(page, "resources", tmp_path)
        page.click("#member-fr-1 a")
        page.wait_for_url(f"{ops.base}/resources/fr-1")
        assert page.locator(".chart .uplot").count() == 1
        assert "HEALTH_CHECKED" in page.locator("table.cards").inner_text()
        shot(page, "resource", tmp_path)
    finally:
        proxies[0].resume()


def test_a_viewer_finds_no_button_that_would_be_refused(ops: UI, page: Any) -> None:
    login(page, ops, "vera", next_path="/resources")
    page.wait_for_selector("#member-fr-1")
    for label in ("Probe", "Enable", "Disable"):
        assert page.locator("button", has_text=label).count() == 0, label
    page.goto(f"{ops.base}/resources/fr-2")
    assert page.locator("button", has_text="Probe").count() == 0
    page.set_viewport_size({"width": 390, "height": 800})  # a phone: cards, no side scroll
    page.goto(f"{ops.base}/resources")
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 392
    page.set_viewport_size({"width": 1280, "height": 900})
    assert page.locator("nav a", has_text="Admin").count() == 0
    page.cadenza_expected = ["403"]
    answer = page.goto(f"{ops.base}/admin")
    assert answer is not None and answer.status == 403


def test_admin_creates_a_token_and_sees_it_once(ops: UI, page: Any, tmp_path: Path) -> None:
    login(page, ops, "ada", next_path="/admin")
    page.click("text=Create a token")
    page.fill("#token-name", "grafana")
    page.select_option("#token-role", "viewer")
    page.click("button:has-text('Create token')")
    value = page.locator("#once-value").inner_text()
    assert value.startswith("cdz_") and len(value) > 24
    assert page.locator("#token-grafana").count() == 1
    assert page.input_value("#token-name") == ""  # ops.js empties the form
    shot(page, "admin", tmp_path)
    assert XSS in page.locator("#user-mallory").inner_text()  # a display name, as text
    assert page.locator("#users img").count() == 0
    page.reload()
    assert page.locator("#once-value").count() == 0
    assert value not in page.content()
    page.locator("#token-grafana button", has_text="Revoke").click()
    page.wait_for_selector("#token-grafana .state-disabled")


def test_audit_and_dashboard(ops: UI, page: Any, tmp_path: Path) -> None:
    login(page, ops, "ada", next_path="/audit")
    assert page.locator("table.audit tbody tr").count() > 0
    page.select_option("#f-type", "RUN_FINISHED")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**type=RUN_FINISHED**")
    assert page.locator("table.audit tbody tr").count() == 2
    ops.run_cli("resources", "disable", "slot-1", "--reason", XSS)
    page.goto(f"{ops.base}/audit?resource=slot-1")  # the reason given on the CLI, as text
    assert XSS in page.locator("table.audit").inner_text()
    assert page.locator("table.audit img, table.audit script").count() == 0
    page.goto(f"{ops.base}/audit")
    shot(page, "audit", tmp_path)
    page.goto(f"{ops.base}/dashboard")
    page.wait_for_selector(".chart .uplot")
    assert page.locator(".chart .uplot").count() == 2
    shot(page, "dashboard", tmp_path)
    page.click("text=last 7 days")
    page.wait_for_url("**window=7d")
    page.wait_for_selector(".chart .uplot")


def test_admin_sends_a_test_message_through_a_channel(ops: UI, page: Any,
                                                      tmp_path: Path) -> None:
    login(page, ops, "ada", next_path="/notifications")
    page.fill("#channel-mail input[name=to]", "ops@example.org")
    page.locator("#channel-mail button", has_text="Send test").click()
    result = page.locator("#test-result .flash")
    result.wait_for()
    assert "Test message through mail" in result.inner_text()
    assert "ops@example.org" in result.inner_text()
    # the log below is swapped anew with the delivery
    page.wait_for_selector("#deliveries table")
    assert "ops@example.org" in page.locator("#deliveries").inner_text()
    # ... and dressed as the page was: times in the browser's zone with UTC on hover, not
    # the server's UTC text the swap brought
    when = page.locator("#deliveries time").first
    page.wait_for_function(
        "() => [...document.querySelectorAll('#deliveries time')].every(t => t.title)")
    assert not when.inner_text().endswith("UTC"), when.inner_text()
    assert when.get_attribute("title").endswith(" UTC")
    assert page.locator("#channels table").count() == 1  # the swap left the layout alone
    assert page.locator("#test-result table, #test-result #deliveries").count() == 0
    shot(page, "notifications", tmp_path)


ISO_LOCAL = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?$")
HOVER = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \(Asia/Tokyo\) — "
                   r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC$")


def test_times_and_charts_in_one_style(ops: UI, browser: Any) -> None:
    """Every time in the browser's zone (here +09:00), 24-hour and ISO-like, with UTC on
    hover; the charts' time axes too, their legends numbers (never --), success green."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  timezone_id="Asia/Tokyo", locale="en-US")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        login(page, ops, "ada", next_path="/audit")
        first = page.locator("table.audit time").first
        shown = first.get_attribute("title")
        match = HOVER.match(shown)
        assert match, shown
        local, utc = (datetime.fromisoformat(t) for t in match.groups())
        assert local - utc == timedelta(hours=9)
        page.goto(f"{ops.base}/runs")
        run = page.locator("table.runs-table a[href^='/runs/']").first.get_attribute("href")
        page.goto(f"{ops.base}{run}")
        started = page.locator(".run-started time")
        assert ISO_LOCAL.match(started.inner_text()), started.inner_text()
        assert HOVER.match(started.get_attribute("title"))
        page.goto(f"{ops.base}/dashboard")
        page.wait_for_selector(".chart .uplot")
        for chart in page.locator(".chart[data-chart]").all():
            labels = chart.get_attribute("data-x-labels")
            assert labels and re.search(r"\b\d\d:\d\d\b", labels), labels
            assert not re.search(r"(?i)\d\s*[ap]\.?m\b", labels), labels
            assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?( \d{4}-\d\d-\d\d)?", label)
                       for label in labels.split(" | ")), labels
        legend = page.locator(".chart .u-legend").first.inner_text()
        assert "--" not in legend and "Time" not in legend, legend  # no English label
        # hovering the chart shows its time and its numbers
        box = page.locator(".chart .u-over").first.bounding_box()
        page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] / 2)
        values = page.locator(".chart .u-legend").first.locator(".u-value").all_inner_texts()
        assert ISO_LOCAL.match(values[0]), values
        assert all(re.fullmatch(r"\d+(\.\d+)?", v) for v in values[1:]), values
        green = page.evaluate("() => { const s = document.createElement('span');"
                              " s.className = 'state state-succeeded'; document.body.append(s);"
                              " const c = getComputedStyle(s).color; s.remove(); return c; }")
        marker = page.locator(".chart .u-legend .u-series", has_text="succeeded").first
        assert marker.locator(".u-marker").evaluate(
            "m => getComputedStyle(m).borderColor") == green
    finally:
        context.close()
    assert not errors, errors
