"""The job editor's TOML tab in Chromium against a real `cadenza serve`: a CodeMirror
editor (vendored) over the textarea with line numbers and highlighting, problems marked
on their line, and what is typed there (comments included) saved as typed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.browser.conftest import UI, login, shot

EDITOR = "#panel-toml .CodeMirror"


def jobs_toml(ui: UI) -> str:
    return (ui.home / "jobs.toml").read_text(encoding="utf-8")


def editor_text(page: Any) -> str:
    return str(page.evaluate(f"document.querySelector('{EDITOR}').CodeMirror.getValue()"))


def set_editor_text(page: Any, text: str) -> None:
    page.evaluate(f"t => document.querySelector('{EDITOR}').CodeMirror.setValue(t)", text)


def open_toml_tab(page: Any, ui: UI, job: str) -> None:
    login(page, ui, "eddie", next_path=f"/jobs/{job}/edit")
    page.click("#tab-toml")
    page.locator(EDITOR).wait_for()


def test_line_numbers_and_highlighting(ui: UI, page: Any) -> None:
    open_toml_tab(page, ui, "hello")
    numbers = page.locator(f"{EDITOR} .CodeMirror-code .CodeMirror-linenumber")
    count = len(editor_text(page).splitlines())
    assert numbers.count() >= count
    assert [numbers.nth(i).inner_text() for i in range(3)] == ["1", "2", "3"]
    assert numbers.nth(0).is_visible() and numbers.nth(2).is_visible()
    assert page.locator(f"{EDITOR} .cm-atom", has_text="[jobs.hello]").count() == 1  # a header
    assert page.locator(f"{EDITOR} .cm-string", has_text='"demo"').count() == 1
    assert editor_text(page) == page.locator("#toml-text").input_value()


def test_a_typed_comment_is_saved_and_shown_after_a_reload(ui: UI, page: Any,
                                                          tmp_path: Path) -> None:
    page.cadenza_expected = ["404"]  # /jobs/{id} may be another branch's page
    open_toml_tab(page, ui, "hello")
    page.locator(f"{EDITOR} .CodeMirror-line").first.click()
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    page.keyboard.type("# typed in the browser, kept by the save")
    page.locator(f"{EDITOR} .cm-comment",
                 has_text="typed in the browser").wait_for()  # highlighted as a comment
    page.locator("#toml-problems .ok").wait_for()  # the live check saw the typed text
    shot(page, "job-editor-toml", tmp_path)
    page.click("#save-toml")
    page.wait_for_url(f"{ui.base}/jobs/hello")
    lines = jobs_toml(ui).splitlines()
    at = lines.index("[jobs.hello]")
    assert lines[at + 1] == "# typed in the browser, kept by the save"
    page.goto(f"{ui.base}/jobs/hello/edit#toml")
    page.locator(EDITOR).wait_for()
    assert "# typed in the browser, kept by the save" in editor_text(page)


def test_a_problem_is_marked_on_its_line(ui: UI, page: Any) -> None:
    open_toml_tab(page, ui, "hello")
    text = editor_text(page)
    bad = text.replace('tags = ["demo"]', 'tags = ["demo"]\nschedule = "every night"')
    line = bad.splitlines().index('schedule = "every night"') + 1
    set_editor_text(page, bad)
    marker = page.locator(f"{EDITOR} .ed-gutter-error")
    marker.wait_for()
    assert marker.count() == 1
    row = page.locator(f"{EDITOR} .CodeMirror-code > div").nth(line - 1)
    assert row.locator(".ed-gutter-error").count() == 1  # the gutter of that line
    assert row.locator(".CodeMirror-linenumber").inner_text() == str(line)
    assert "expected 5 fields" in row.locator(".ed-line-message").inner_text()
    listed = page.locator("#toml-problems li[data-line]").first
    assert listed.get_attribute("data-line") == str(line)  # the list stays too
    listed.locator("a").click()  # puts the caret on the problem
    cursor = page.evaluate(f"document.querySelector('{EDITOR}').CodeMirror.getCursor().line")
    assert cursor == line - 1
    set_editor_text(page, text)  # fixed: the marks go
    page.locator("#toml-problems .ok").wait_for()
    assert page.locator(f"{EDITOR} .ed-gutter-error").count() == 0
    assert page.locator(f"{EDITOR} .ed-line-message").count() == 0


def test_a_toml_syntax_error_is_marked_on_its_line(ui: UI, page: Any) -> None:
    open_toml_tab(page, ui, "hello")
    lines = editor_text(page).splitlines()
    lines[2] = lines[2] + " = ="
    set_editor_text(page, "\n".join(lines) + "\n")
    row = page.locator(f"{EDITOR} .CodeMirror-code > div").nth(2)
    row.locator(".ed-gutter-error").wait_for()
    assert row.locator(".CodeMirror-linenumber").inner_text() == "3"
