"""The jobs pages in Chromium: Run now lands on the run's page; Run with parameters with
another period, saved as a preset that appears in jobs.toml with the file's comments
intact; the enable switch; the preset picker reloads the form (htmx)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import UI, login, shot

RUN_URL = re.compile(r".*/runs/([0-9A-Z]{26})$")


def _run(ui: UI, run_id: str) -> dict[str, Any]:
    """The run as `cadenza runs show --json` prints it (it exists in the store)."""
    shown: dict[str, Any] = json.loads(ui.run_cli("runs", "show", run_id, "--json"))
    return shown


def _landed(page: Any, ui: UI) -> str:
    """Wait for the run page's URL (the run pages are another branch's: it may 404 here)
    and return the run id."""
    page.wait_for_url(RUN_URL)
    found = RUN_URL.match(page.url)
    assert found is not None, page.url
    return found.group(1)


def test_run_now_from_the_catalogue_lands_on_the_run(ui: UI, page: Any,
                                                     tmp_path: Path) -> None:
    """Issue 16: Run now on sales-load, and its page reaches SUCCEEDED with live lines."""
    login(page, ui, "otto")
    row = page.locator("#job-sales-load")
    assert row.locator("text=Run now").is_visible()
    assert page.locator("#job-sales-load [role=switch]").count() == 0  # an operator cannot edit
    row.locator("text=Run now").click()
    run_id = _landed(page, ui)
    page.locator("#run-summary .run-head .state").filter(has_text="SUCCEEDED").wait_for(
        timeout=60_000)
    # The header may run ahead of the log: a state change reloads the header at once,
    # while the stream delivers the last lines at its next look (LIVE_POLL_SECONDS).
    page.locator("#log").filter(has_text="finished SUCCEEDED").wait_for(timeout=10_000)
    log = page.locator("#log").inner_text()
    assert "(manual:otto)" in log and "run of sales-load finished SUCCEEDED" in log, log
    run = _run(ui, run_id)
    assert run["job"] == "sales-load" and run["id"] == run_id and run["state"] == "SUCCEEDED"
    page.goto(f"{ui.base}/jobs")
    page.locator("#job-sales-load .strip a").first.wait_for()


def test_run_with_parameters_and_save_as_preset(ui: UI, page: Any, tmp_path: Path) -> None:
    page.cadenza_expected = ["404"]
    login(page, ui, "eddie", next_path="/jobs/sales-load/run")
    jobs_toml = ui.home / "jobs.toml"
    before = jobs_toml.read_text(encoding="utf-8")
    comments = [line for line in before.splitlines() if "#" in line]
    # the preset picker reloads the values from the preset (htmx swap of the form)
    page.select_option("#preset", "month-end")
    page.locator("#run-form .origin-preset").first.wait_for()
    assert page.locator("label[for=param-1]").inner_text().startswith("period")
    assert page.input_value("#param-1") == "${month.previous}"
    assert page.input_value("#log_level") == "DEBUG"
    shot(page, "run-with-params", tmp_path)
    page.fill("#param-1", "2026-09")
    page.fill("#preset_name", "september")
    page.click("text=Save as preset")
    page.locator("#flash .flash.ok").wait_for()
    after = jobs_toml.read_text(encoding="utf-8")
    assert "[jobs.sales-load.presets.september]" in after
    assert 'period = "2026-09"' in after.split("[jobs.sales-load.presets.september]")[1]
    assert all(line in after for line in comments)  # every comment kept
    assert "[jobs.sales-load.presets.month-end]" in after
    # the form's base hash followed the write: a second save is not stale
    page.fill("#preset_name", "september")
    page.click("text=Save as preset")
    page.locator("#flash .flash.ok").wait_for()
    page.click("#run-form button[type=submit]")
    run_id = _landed(page, ui)
    run = _run(ui, run_id)
    assert run["job"] == "sales-load"
    assert run["params"]["period"] == "2026-09"


def _commented_hello(text: str) -> str:
    """jobs.toml with comments above, beside and inside [jobs.hello]."""
    head, hello = text.split("\n[jobs.hello]\n", 1)
    hello = hello.replace('tags = ["demo"]\n', 'tags = ["demo"]  # shown as a chip\n', 1)
    return f"{head}\n# the smallest job, no schedule\n[jobs.hello]  # a python step\n{hello}"


def test_the_enable_switch_writes_jobs_toml(ui: UI, page: Any, tmp_path: Path) -> None:
    jobs_toml = ui.home / "jobs.toml"
    before = _commented_hello(jobs_toml.read_text(encoding="utf-8"))
    jobs_toml.write_text(before, encoding="utf-8")
    chip = 'tags = ["demo"]  # shown as a chip\n'
    login(page, ui, "eddie")
    switch = page.locator("#switch-hello")
    assert switch.get_attribute("aria-checked") == "true"
    switch.click()
    page.locator("#switch-hello[aria-checked=false]").wait_for()
    # one line added after the job's last key; every comment and other line as it was
    off = before.replace(chip, chip + "enabled = false\n", 1)
    assert jobs_toml.read_text(encoding="utf-8") == off
    page.locator("#switch-hello").click()
    page.locator("#switch-hello[aria-checked=true]").wait_for()
    assert jobs_toml.read_text(encoding="utf-8") == \
        off.replace("enabled = false\n", "enabled = true\n", 1)
    page.reload()
    page.locator("#job-sales-load .strip a").first.wait_for()
    shot(page, "jobs", tmp_path)


def test_job_page_shows_grid_fires_and_charts(ui: UI, page: Any, tmp_path: Path) -> None:
    page.cadenza_expected = ["404"]
    login(page, ui, "otto", next_path="/jobs/hello")
    page.click("text=Run now")
    _landed(page, ui)
    page.goto(f"{ui.base}/jobs/sales-load")
    assert page.locator("h1").inner_text().startswith("sales-load")
    assert page.locator("table.fires tbody tr").count() == 10
    assert "every day at 02:00, Europe/Paris" in page.locator("main").inner_text()
    shot(page, "job", tmp_path)
    page.goto(f"{ui.base}/jobs/hello")
    page.locator("table.rungrid a.sq").first.wait_for()


def test_a_viewer_finds_no_button_that_would_be_refused(ui: UI, page: Any) -> None:
    login(page, ui, "vera")
    for path in ("/jobs", "/jobs/sales-load", "/jobs/sales-load/run?preset=month-end"):
        page.goto(f"{ui.base}{path}")
        actions = page.locator("[hx-post]:not([hx-post='/logout']):not([hx-post='/language'])")
        assert actions.count() == 0, (path, actions.first.evaluate("e => e.outerHTML"))
        assert page.locator("#run-form button[type=submit], [role=switch]").count() == 0, path


def test_phone_width_turns_the_catalogue_into_cards(ui: UI, browser: Any,
                                                    tmp_path: Path) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        login(page, ui, "eddie")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width  # no horizontal scrolling
        assert page.locator("table.jobs thead").is_hidden()
        shot(page, "jobs-phone", tmp_path)
    finally:
        context.close()


def test_search_as_you_type_and_tag_chips_keep_the_url(ui: UI, page: Any) -> None:
    login(page, ui, "vera")
    page.fill("#q", "sales")
    page.wait_for_url("**/jobs?q=sales")  # htmx swapped the table and pushed the URL
    page.locator("#job-hello").wait_for(state="detached")
    assert page.locator("#job-sales-load").is_visible()
    page.fill("#q", "")
    page.wait_for_url(re.compile(r".*/jobs\?q=$"))
    page.locator("#job-hello").wait_for()
    page.click("a.chip:has-text('#demo')")
    page.wait_for_url("**/jobs?tag=demo")
    assert page.locator("#job-sales-load").count() == 0
    assert page.locator("a.chip.on").inner_text() == "#demo"


def _runs_of(ui: UI, job: str) -> set[str]:
    return {r["id"] for r in json.loads(ui.run_cli("runs", "list", "--job", job, "--json"))}


@pytest.mark.reliability_case(50)
def test_a_double_click_on_run_makes_one_run(ui: UI, page: Any) -> None:
    """A double-click on Run now, in the catalogue and on the job's page, and on the Run
    button of Run with parameters, starts one run each time: the button is disabled while
    its request is out, and a second request of the same button is dropped."""
    login(page, ui, "otto")
    for where in ("catalogue", "job page", "run form"):
        before = _runs_of(ui, "hello")
        if where == "catalogue":
            page.goto(f"{ui.base}/jobs")
            page.locator("#job-hello").locator("text=Run now").dblclick()
        elif where == "job page":
            page.goto(f"{ui.base}/jobs/hello")
            page.locator("button.runnow").first.dblclick()
        else:
            page.goto(f"{ui.base}/jobs/hello/run")
            page.locator("#run-form button[type=submit]").dblclick()
        run_id = _landed(page, ui)
        page.wait_for_timeout(1500)  # time for a second request to land, were one sent
        after = _runs_of(ui, "hello")
        assert after - before == {run_id}, (where, after - before)
