"""The runs pages in Chromium against a real `cadenza serve`: a run's page follows the run
live (log lines through server-sent events, the header when it ends), Cancel stops a
running run, the history shows MISSED and NEEDS_REVIEW runs, Resume from a run's page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from cadenza.clock import SystemClock
from cadenza.domain.states import RunState
from cadenza.services import Actor, Services
from tests.browser.conftest import PASSWORD, UI, login, make_home, shot
from tests.e2e.serve_helpers import Served, eventually
from tests.support.store_helpers import append_log

JOBS = '''
[jobs.ticker]
description = "Ticks until canceled (the runs pages' browser tests)"
tags = ["test"]

[[jobs.ticker.steps]]
name = "tick"
type = "python"
callable = "ui_runs_tasks:tick"
isolation = "thread"
op_kwargs = { upto = 400 }

[jobs.brief]
description = "Ticks for about four seconds, then succeeds (the live header's test)"

[[jobs.brief.steps]]
name = "tick"
type = "python"
callable = "ui_runs_tasks:tick"
isolation = "thread"
op_kwargs = { upto = 40 }

[jobs.flaky]
description = "Fails every time: one attempt, then NEEDS_REVIEW"

[jobs.flaky.retry]
attempts = 1

[[jobs.flaky.steps]]
name = "fail"
type = "python"
callable = "ui_runs_tasks:fail"
isolation = "thread"
'''

TASKS = '''"""Steps of the runs pages' browser tests."""

import threading


def tick(upto=400, ctx=None):
    """Log a line every 0.1 s until ``upto`` or until the run is canceled."""
    wait = threading.Event()
    for i in range(upto):
        if ctx.cancelled():
            ctx.log.info("canceled after %s ticks", i)
            return i
        ctx.log.info("tick %s", i)
        wait.wait(0.1)
    return upto


def fail(ctx=None):
    """A retryable failure, every time."""
    raise RuntimeError("the source is not there yet")
'''


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UI]:
    """The demo home plus a job that ticks until canceled and one that always fails."""
    home = make_home(tmp_path_factory.mktemp("ui-runs"))
    jobs = home / "jobs.toml"
    jobs.write_text(jobs.read_text(encoding="utf-8") + JOBS, encoding="utf-8")
    (home / "plugins" / "ui_runs_tasks.py").write_text(TASKS, encoding="utf-8")
    served = Served(home)
    try:
        served.wait_ready()
        yield UI(home, f"http://127.0.0.1:{served.port}", served)
    finally:
        client = _CLIENTS.pop(f"http://127.0.0.1:{served.port}", None)
        if client is not None:
            client.close()
        served.stop()


_CLIENTS: dict[str, httpx.Client] = {}


def _api(ui: UI) -> httpx.Client:
    """An API client logged in as the operator ``otto`` (one per served home)."""
    if ui.base not in _CLIENTS:
        client = httpx.Client(base_url=ui.base)
        answer = client.post("/api/login", json={"username": "otto", "password": PASSWORD})
        assert answer.status_code == 200, answer.text
        client.headers.update({"X-CSRF-Token": answer.json()["csrf_token"],
                               "Origin": ui.base})
        _CLIENTS[ui.base] = client
    return _CLIENTS[ui.base]


def _start(ui: UI, job: str) -> str:
    answer = _api(ui).post(f"/api/jobs/{job}/runs", json={})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["run_id"])


def _state(ui: UI, run_id: str) -> str:
    return str(_api(ui).get(f"/api/runs/{run_id}").json()["state"])


def test_a_run_page_follows_sales_load_live(ui: UI, page: Any, tmp_path: Path) -> None:
    login(page, ui, "otto", next_path="/runs")
    run_id = _start(ui, "sales-load")
    page.goto(f"{ui.base}/runs/{run_id}")
    summary = page.locator("#run-summary .run-head .state")
    summary.filter(has_text="SUCCEEDED").wait_for(timeout=60_000)
    # The header comes in the stream after the lines it was read before: once it says
    # SUCCEEDED, the run's last lines are on the page (no waiting for the stream's end).
    assert page.locator("#log .line").count() >= 3
    shown = page.locator("#log").inner_text()
    assert "run of sales-load queued" in shown and "finished SUCCEEDED" in shown, shown
    assert page.locator("#log .line.event").count() >= 3  # the run's events are its milestones
    assert page.locator(".run-steps .step-row").count() == 3
    assert "manual: otto" in page.locator(".run-trigger").inner_text()
    assert page.locator("button", has_text="Replay").is_visible()
    shot(page, "run", tmp_path)


def test_live_lines_then_the_end_refreshes_the_header(ui: UI, page: Any) -> None:
    login(page, ui, "otto", next_path="/runs")
    run_id = _start(ui, "ticker")
    eventually(lambda: _state(ui, run_id) == "RUNNING", what="the ticker to run")
    page.goto(f"{ui.base}/runs/{run_id}")
    assert page.locator("#live-tag").is_visible()
    first = page.locator("#log .line").count()
    page.wait_for_function(
        "n => document.querySelectorAll('#log .line').length > n + 5", arg=first)
    # the level filter hides lines below it, client side
    page.select_option("#log-level", "WARNING")
    assert page.locator("#log .lvl-INFO").first.is_hidden()
    page.select_option("#log-level", "DEBUG")
    # canceled elsewhere: the stream's end event refreshes the header, no reload
    page.evaluate("() => { window.cadenzaMarker = 1; }")
    assert _api(ui).post(f"/api/runs/{run_id}/cancel").status_code == 200
    page.locator("#run-summary .run-head .state").filter(has_text="CANCELED").wait_for(
        timeout=30_000)
    assert page.evaluate("() => window.cadenzaMarker") == 1
    assert "canceled by otto" in page.locator(".run-reason").inner_text()
    # the header is never ahead of the log: the line of the cancel is there already
    assert "run CANCELED: canceled by otto" in page.locator("#log").inner_text()  # live
    page.locator("#live-tag").wait_for(state="hidden", timeout=30_000)


def test_a_running_runs_header_ticks_then_ends_succeeded(ui: UI, page: Any) -> None:
    login(page, ui, "otto", next_path="/runs")
    run_id = _start(ui, "brief")
    eventually(lambda: _state(ui, run_id) == "RUNNING", what="brief to run")
    page.goto(f"{ui.base}/runs/{run_id}")
    page.evaluate("() => { window.cadenzaMarker = 1; }")  # no reload from here on
    head = page.locator("#run-summary .run-head .state")
    assert head.inner_text().endswith("RUNNING")
    duration = page.locator("#run-summary .run-duration")
    first = duration.inner_text()
    page.wait_for_function("t => document.querySelector('#run-summary .run-duration')"
                           ".textContent.trim() !== t", arg=first.strip(), timeout=3_000)
    second = duration.inner_text()
    assert second != first and second.endswith(" s"), (first, second)
    assert page.locator("#run-summary .run-finished time").count() == 0  # not ended yet
    head.filter(has_text="SUCCEEDED").wait_for(timeout=30_000)
    assert page.evaluate("() => window.cadenzaMarker") == 1
    finished = page.locator("#run-summary .run-finished time")
    assert finished.count() == 1 and finished.get_attribute("title").endswith(" UTC")
    ended = duration.inner_text()  # a finished run's duration stands still
    page.wait_for_timeout(1_500)
    assert duration.inner_text() == ended
    assert duration.get_attribute("data-elapsed") is None


def test_cancel_a_running_run_from_its_page(ui: UI, page: Any) -> None:
    login(page, ui, "otto", next_path="/runs")
    run_id = _start(ui, "ticker")
    eventually(lambda: _state(ui, run_id) == "RUNNING", what="the ticker to run")
    page.goto(f"{ui.base}/runs/{run_id}")
    # Cancel asks first: the button that cancels is behind "Cancel…", with what is kept
    assert page.locator("button:has-text('Cancel this run')").is_hidden()
    page.click("summary:has-text('Cancel')")
    assert "Kept:" in page.locator(".confirm-cancel").inner_text()
    assert _state(ui, run_id) == "RUNNING"  # opening it did nothing yet
    page.click("button:has-text('Cancel this run')")
    page.locator("#run-summary .run-head .state").filter(has_text="CANCELED").wait_for(
        timeout=30_000)
    assert _state(ui, run_id) == "CANCELED"
    assert page.locator("button:has-text('Replay')").is_visible()


def test_history_shows_missed_and_needs_review_then_resume(ui: UI, page: Any,
                                                           tmp_path: Path) -> None:
    clock = SystemClock()
    with Services.at(ui.home, actor=Actor("cli", "test"), clock=clock) as services:
        missed = services.store().create_run(
            "sales-load", "scheduled", state=RunState.MISSED, schedule="job",
            scheduled_for=clock.now() - timedelta(hours=3),
            reason="missed: the server was down at 02:00 (on_missed = skip)")
    assert missed is not None
    review = _start(ui, "flaky")
    eventually(lambda: _state(ui, review) == "NEEDS_REVIEW", what="flaky to need review")
    login(page, ui, "otto", next_path="/runs")
    assert page.locator(f"tr:has(a[href='/runs/{missed}']) .state-missed").is_visible()
    assert page.locator(f"tr:has(a[href='/runs/{review}']) .state-needs_review").is_visible()
    # a state chip filters in place and keeps the filter in the URL
    page.click(".runs-chips a.chip-needs_review")
    page.wait_for_url("**/runs?state=NEEDS_REVIEW")
    page.locator(f"a[href='/runs/{missed}']").wait_for(state="detached")
    page.click("a.chip-needs_review")  # off again
    page.wait_for_url(f"{ui.base}/runs")
    page.locator(f"a[href='/runs/{missed}']").wait_for()
    page.go_back()  # the filtered view comes back with its URL
    page.wait_for_url("**/runs?state=NEEDS_REVIEW")
    page.locator(f"a[href='/runs/{review}']").wait_for()
    page.locator(f"a[href='/runs/{missed}']").wait_for(state="detached")
    page.go_forward()
    page.locator(f"a[href='/runs/{missed}']").wait_for()
    page.fill("#f-job", "flaky")  # the form filters in place too
    page.click(".runs-filter button[type=submit]")
    page.wait_for_url("**/runs?job=flaky")
    page.locator(f"a[href='/runs/{missed}']").wait_for(state="detached")
    assert page.locator(".runs-active .chip").inner_text().startswith("job: flaky")
    page.click(".runs-active a:has-text('Clear all')")
    page.wait_for_url(f"{ui.base}/runs")
    page.locator(f"a[href='/runs/{missed}']").wait_for()
    shot(page, "runs", tmp_path)
    page.click(f"a[href='/runs/{review}']")
    page.wait_for_url(f"**/runs/{review}")
    assert "the source is not there yet" in page.locator(".run-error").inner_text()
    # Abandon asks for the run id; Resume queues it again (it fails again: NEEDS_REVIEW)
    page.click("summary:has-text('Abandon')")
    assert page.locator("button:has-text('Abandon this run')").is_disabled()
    page.click("summary:has-text('Abandon')")
    page.click("button:has-text('Resume')")
    page.locator("#run-summary dd", has_text="resumed 1 time").wait_for(timeout=30_000)
    eventually(lambda: _state(ui, review) == "NEEDS_REVIEW", what="flaky to fail again")


def test_a_viewer_sees_no_action(ui: UI, page: Any) -> None:
    run_id = _start(ui, "hello")
    eventually(lambda: _state(ui, run_id) == "SUCCEEDED", what="hello to end")
    login(page, ui, "vera", next_path=f"/runs/{run_id}")
    page.locator("#run-summary .state-succeeded").first.wait_for()
    assert page.locator(".run-actions").count() == 0
    assert page.locator("[hx-post^='/runs/']").count() == 0


XSS = ('<script>alert(1)</script>', '"><img src=x onerror=alert(1)>')


def test_xss_shows_as_text_and_phones_get_cards(ui: UI, page: Any) -> None:
    with Services.at(ui.home, actor=Actor("cli", "test"), clock=SystemClock()) as services:
        store = services.store()
        run_id = store.create_run("hello", f"manual:{XSS[1]}", params={"period": XSS[0]})
        assert run_id is not None
        append_log(store, run_id, "ERROR", XSS[0] + " " + XSS[1])
    eventually(lambda: _state(ui, run_id) == "SUCCEEDED", what="the run to end")
    login(page, ui, "otto", next_path="/runs")
    row = page.locator(f"tr:has(a[href='/runs/{run_id}'])")
    assert XSS[1] in row.inner_text()
    page.goto(f"{ui.base}/runs/{run_id}")
    assert XSS[0] in page.locator(".run-facts").inner_text()
    assert XSS[0] + " " + XSS[1] in page.locator("#log").inner_text()
    assert page.locator("#main script, #main img").count() == 0
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(f"{ui.base}/runs")
    assert page.locator(".runs-table thead").is_hidden()
    assert page.locator(f"tr:has(a[href='/runs/{run_id}']) td[data-label='State']").is_visible()
