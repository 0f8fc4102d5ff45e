"""The job editor in Chromium against a real `cadenza serve`: a bad cron's error shows
under the schedule field as one types, the fixed job saves and lands on its page; the TOML
tab shows problems by line:col and saves with the file's comments intact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.browser.conftest import UI, login, shot


def jobs_toml(ui: UI) -> str:
    return (ui.home / "jobs.toml").read_text(encoding="utf-8")


def comment_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("#")]


def test_create_a_job_with_a_bad_cron_then_fix_it_and_save(ui: UI, page: Any,
                                                           tmp_path: Path) -> None:
    page.cadenza_expected = ["404"]  # /jobs/{id} is another branch's page
    comments = comment_lines(jobs_toml(ui))
    login(page, ui, "eddie", next_path="/jobs/new")
    page.fill("[name=id]", "nightly-report")
    page.fill("[name='job.description']", "Counts, every night")
    page.fill("[name='job.schedule']", "61 * * * *")
    under = page.locator("#err-job_2e_schedule .field-error")
    under.wait_for()
    assert "minute: 61 is out of range 0-59" in under.inner_text()
    # a step: added, its type picked (the fields swap), back to python, filled in
    page.click("#add-step")
    step = page.locator("#steps [data-step]").first
    step.locator(".ed-step-no", has_text="1").wait_for()  # htmx has wired the new block
    step.locator("select[name$='.type']").select_option("sql_query")
    step.locator("textarea[name$='.query']").wait_for()
    step.locator("select[name$='.type']").select_option("python")
    step.locator("input[name$='.callable']").wait_for()
    step.locator("input[name$='.name']").fill("count")
    step.locator("input[name$='.callable']").fill("demo_tasks:count")
    page.locator("#ed-summary").filter(has_text="1 problem").wait_for()
    shot(page, "job-editor", tmp_path)
    page.fill("[name='job.schedule']", "0 3 * * *")
    page.locator("#ed-summary").filter(has_text="No problems").wait_for()
    assert page.locator("#err-job_2e_schedule .field-error").count() == 0
    page.click("#save-form")
    page.wait_for_url(f"{ui.base}/jobs/nightly-report")
    text = jobs_toml(ui)
    assert "[jobs.nightly-report]" in text and 'schedule = "0 3 * * *"' in text
    assert 'callable = "demo_tasks:count"' in text
    assert comment_lines(text) == comments
    assert "1. count (python)" in ui.run_cli("jobs", "show", "nightly-report")
    api = page.request.get(f"{ui.base}/api/jobs/nightly-report")  # the page's session
    assert api.ok and api.json()["definition"]["schedule"] == "0 3 * * *"


def test_steps_move_and_go_in_the_page(ui: UI, page: Any) -> None:
    login(page, ui, "eddie", next_path="/jobs/sales-load/edit")
    names = page.locator("#steps [data-step]:not([data-removed]) input[name$='.name']")
    assert [names.nth(i).input_value() for i in range(3)] == [
        "load-file", "refresh-aggregates", "tell-downstream"]
    live = page.locator("#steps [data-step]:not([data-removed])")
    live.nth(1).locator("[data-step-action=up]").click()
    live.nth(2).locator("[data-step-action=remove]").click()
    assert [names.nth(i).input_value() for i in range(names.count())] == [
        "refresh-aggregates", "load-file"]
    assert live.locator(".ed-step-no").all_inner_texts() == ["1", "2"]
    # the live check runs on the new order too
    page.locator("#ed-summary").filter(has_text="No problems").wait_for()


def test_edit_a_job_in_the_toml_tab(ui: UI, page: Any, tmp_path: Path) -> None:
    page.cadenza_expected = ["404"]
    before = jobs_toml(ui)
    login(page, ui, "eddie", next_path="/jobs/hello/edit")
    page.click("#tab-toml")
    editor = page.locator("#panel-toml .CodeMirror")  # over the textarea (test_editor_toml)
    assert editor.is_visible() and not page.locator("#panel-form").is_visible()
    text = page.locator("#toml-text").input_value()
    assert text.startswith("[jobs.hello]")
    fill = "t => document.querySelector('#panel-toml .CodeMirror').CodeMirror.setValue(t)"
    page.evaluate(fill, text.replace('tags = ["demo"]',
                                     'tags = ["demo"]\nschedule = "every night"'))
    problem = page.locator("#toml-problems li[data-line]")
    problem.first.wait_for()
    assert problem.first.get_attribute("data-line") == "4"
    assert "expected 5 fields" in problem.first.inner_text()
    problem.first.locator("a").click()  # puts the caret on the problem
    assert page.evaluate("document.querySelector('#panel-toml .CodeMirror')"
                         ".CodeMirror.getCursor().line") == 3
    page.evaluate(fill, text.replace('tags = ["demo"]',
                                     'tags = ["demo"]\nschedule = "15 4 * * 1-5"'))
    page.locator("#toml-problems .ok").wait_for()
    page.click("#save-toml")
    page.wait_for_url(f"{ui.base}/jobs/hello")
    after = jobs_toml(ui)
    assert 'schedule = "15 4 * * 1-5"' in after
    assert comment_lines(after) == comment_lines(before)
    assert after.replace('schedule = "15 4 * * 1-5"\n', "", 1) == before


def test_a_stale_save_shows_the_diff_and_keeps_the_text(ui: UI, page: Any) -> None:
    page.cadenza_expected = ["404", "409"]
    login(page, ui, "eddie", next_path="/jobs/hello/edit")
    page.fill("[name='job.description']", "my words")
    path = ui.home / "jobs.toml"
    path.write_text(path.read_text(encoding="utf-8").replace(
        "counts to three", "counts to four"), encoding="utf-8")  # someone else saved
    changed = path.read_text(encoding="utf-8")
    page.click("#save-form")
    diff = page.locator("#flash .ed-diff")
    diff.wait_for()
    assert '+description = "my words"' in diff.inner_text()
    assert path.read_text(encoding="utf-8") == changed
    assert page.locator("[name='job.description']").input_value() == "my words"
    page.click("#flash button.primary")  # save my version over the current file
    page.wait_for_url(f"{ui.base}/jobs/hello")
    assert 'description = "my words"' in path.read_text(encoding="utf-8")


def test_the_editor_fits_a_phone(ui: UI, page: Any) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, ui, "eddie", next_path="/jobs/sales-load/edit")
    page.click("summary.ed-more-summary")
    fits = "document.documentElement.scrollWidth <= window.innerWidth"
    assert page.evaluate(fits)
    page.click("#tab-toml")
    assert page.evaluate(fits)
