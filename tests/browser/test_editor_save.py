"""Saving an existing job from the editor's form in Chromium against a real `cadenza
serve`: what the form changes is written where it belongs in jobs.toml, and nothing else
moves: comments, key order, inline tables' spacing, line endings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cadenza
from tests.browser.conftest import UI, login

#: the demo home's jobs.toml, as `cadenza init --example` writes it
DEMO = (Path(cadenza.__file__).parent / "example" / "jobs.toml").read_text(encoding="utf-8")
CHIP = 'tags = ["demo"]  # shown as a chip\n'
KWARGS = "op_kwargs = { upto = 3 }  # three is enough\n"


def commented(text: str) -> str:
    """The demo's jobs.toml with comments above, beside and inside [jobs.hello]."""
    head, hello = text.split("\n[jobs.hello]\n", 1)
    hello = hello.replace('tags = ["demo"]\n', CHIP, 1)
    hello = hello.replace("op_kwargs = { upto = 3 }\n", KWARGS, 1)
    hello = hello.replace("\n[[jobs.hello.steps]]\n", "\n# one step\n[[jobs.hello.steps]]\n", 1)
    return f"{head}\n# the smallest job, no schedule\n[jobs.hello]  # a python step\n{hello}"


def _save_schedule(page: Any, ui: UI, schedule: str) -> None:
    login(page, ui, "eddie", next_path="/jobs/hello/edit")
    page.fill("[name='job.schedule']", schedule)
    page.click("#save-form")
    page.wait_for_url(f"{ui.base}/jobs/hello")


@pytest.mark.reliability_case(8)
def test_a_schedule_added_in_the_form_is_saved_with_every_comment(ui: UI, page: Any) -> None:
    page.cadenza_expected = ["404"]  # the job's page may be another branch's
    path = ui.home / "jobs.toml"
    before = commented(DEMO)
    path.write_text(before, encoding="utf-8")
    _save_schedule(page, ui, "15 4 * * 1-5")
    after = path.read_text(encoding="utf-8")
    assert after == before.replace(CHIP, CHIP + 'schedule = "15 4 * * 1-5"\n', 1)
    page.goto(f"{ui.base}/jobs/hello/edit")  # the editor again: the schedule is there
    assert page.locator("[name='job.schedule']").input_value() == "15 4 * * 1-5"
    assert 'schedule = "15 4 * * 1-5"' in page.locator("#toml-text").input_value()


def test_a_crlf_jobs_toml_stays_crlf(ui: UI, page: Any) -> None:
    page.cadenza_expected = ["404"]
    path = ui.home / "jobs.toml"
    before = commented(DEMO)
    path.write_bytes(before.replace("\n", "\r\n").encode())
    _save_schedule(page, ui, "45 5 * * *")
    expected = before.replace(CHIP, CHIP + 'schedule = "45 5 * * *"\n', 1)
    assert path.read_bytes() == expected.replace("\n", "\r\n").encode()
