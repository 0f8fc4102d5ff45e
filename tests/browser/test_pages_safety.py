"""Across every page (issue 16's Must show): an XSS corpus in a job's description, a step
name, params, log lines, an error message and a user's display name shows as text — no
element is injected and no dialog fires (the ``page`` fixture fails on any dialog, console
error or CSP violation) — and a viewer finds no button that the server would refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.browser.conftest import PASSWORD, UI, login, make_home
from tests.e2e.serve_helpers import Served

PAYLOADS = ["<script>alert('xss1')</script>", "\"><img src=x onerror=alert('xss2')>",
            "</title><svg onload=alert('xss3')>", "javascript:alert('xss4')",
            "{{7*7}}<b>bold</b>", "' onmouseover='alert(5)"]
CORPUS = " ".join(PAYLOADS)

# Step names and tags allow only A-Z a-z 0-9 _ - (validation keeps markup out of them);
# the corpus goes where free text is allowed.
XSS_JOB = f'''

[jobs.xss]
description = {json.dumps(CORPUS)}
tags = ["xss"]
params = {{ note = {json.dumps(CORPUS)} }}

[[jobs.xss.steps]]
name = "shout"
type = "python"
callable = "xss_tasks:shout"
'''

XSS_PLUGIN = f'''
def shout(ctx=None):
    ctx.log.info({CORPUS!r})
    raise ValueError({CORPUS!r})
'''

PAGES = ["/jobs", "/jobs/xss", "/jobs/xss/run", "/jobs/xss/edit", "/jobs/new", "/runs",
         "/runs?job=xss", "/runs/{run}", "/resources", "/audit", "/notifications",
         "/dashboard", "/admin", "/account"]
VIEWER_PAGES = [p for p in PAGES if p not in ("/admin", "/jobs/xss/edit", "/jobs/new",
                                              "/jobs/xss/run")]
ALLOWED_FOR_ANYONE = ("/logout", "/account/password", "/account/preferences", "/language")

INJECTED = """() => {
  const bad = [];
  document.querySelectorAll('script:not([src]), img[src="x"], svg[onload]')
    .forEach(e => bad.push(e.outerHTML));
  document.querySelectorAll('b').forEach(e => {  // the corpus' <b>bold</b>, if parsed
    if (e.textContent === 'bold') bad.push(e.outerHTML); });
  document.querySelectorAll('*').forEach(e => {
    for (const a of e.attributes) {
      if (a.name.startsWith('on')) bad.push(e.tagName + ' ' + a.name);
      if (/^\\s*javascript:/i.test(a.value) && (a.name === 'href' || a.name === 'src'))
        bad.push(e.tagName + ' ' + a.name + '=' + a.value);
    }
  });
  return bad;
}"""

STATE_CHANGING = """() => Array.from(document.querySelectorAll(
    '[hx-post], [hx-put], [hx-patch], [hx-delete], form[method=post], form[method=POST]'))
  .map(e => e.getAttribute('hx-post') || e.getAttribute('hx-put') || e.getAttribute('hx-patch')
            || e.getAttribute('hx-delete') || e.getAttribute('action') || '')"""


@pytest.fixture(scope="module")
def xss_ui(tmp_path_factory: pytest.TempPathFactory) -> Any:
    home = make_home(tmp_path_factory.mktemp("xss"))
    with (home / "jobs.toml").open("a", encoding="utf-8") as jobs:
        jobs.write(XSS_JOB)
    (home / "plugins" / "xss_tasks.py").write_text(XSS_PLUGIN, encoding="utf-8")
    cli = CliRunner()
    added = cli.invoke(app, ["--home", str(home), "users", "add", "xavier", "--role", "viewer",
                             "--display-name", CORPUS, "--password-stdin"],
                       input=PASSWORD + "\n")
    assert added.exit_code == 0, added.output
    ran = cli.invoke(app, ["--home", str(home), "run", "xss"])
    assert ran.exit_code != 0  # it fails on purpose, with the corpus in its error and log
    runs = cli.invoke(app, ["--home", str(home), "runs", "list", "--json"])
    run_id = next(r["id"] for r in json.loads(runs.output) if r["job"] == "xss")
    served = Served(home)
    try:
        served.wait_ready()
        yield UI(home, f"http://127.0.0.1:{served.port}", served), run_id
    finally:
        served.stop()


@pytest.mark.reliability_case(19, 36)
def test_the_corpus_shows_as_text_on_every_page(xss_ui: Any, page: Any) -> None:
    ui, run_id = xss_ui
    login(page, ui, "ada")
    for path in PAGES:
        answer = page.goto(ui.base + path.format(run=run_id))
        assert answer is not None and answer.status < 400, (path, answer and answer.status)
        page.wait_for_load_state("networkidle")
        assert page.evaluate(INJECTED) == [], path
    page.goto(f"{ui.base}/runs/{run_id}")
    page.wait_for_load_state("networkidle")
    assert "<script>alert('xss1')</script>" in page.locator("main").inner_text()


@pytest.mark.reliability_case(19)
def test_template_syntax_in_user_text_stays_literal_on_every_page(xss_ui: Any,
                                                                   page: Any) -> None:
    """``{{7*7}}`` in a description, a parameter, a log line, an error and a display name is
    shown as written on every page: never evaluated (``49``) by the pages' templates."""
    ui, run_id = xss_ui
    login(page, ui, "ada")
    for path in PAGES:
        page.goto(ui.base + path.format(run=run_id))
        page.wait_for_load_state("networkidle")
        text = page.locator("body").inner_text()
        assert "49bold" not in text and "49<b>" not in text, path
    for path in ("/jobs/xss", "/runs/{run}", "/admin"):
        page.goto(ui.base + path.format(run=run_id))
        page.wait_for_load_state("networkidle")
        assert "{{7*7}}<b>bold</b>" in page.locator("body").inner_text(), path


def test_a_viewer_finds_no_button_the_server_would_refuse(xss_ui: Any, page: Any) -> None:
    ui, run_id = xss_ui
    login(page, ui, "vera")
    for path in VIEWER_PAGES:
        answer = page.goto(ui.base + path.format(run=run_id))
        assert answer is not None and answer.status < 400, (path, answer and answer.status)
        page.wait_for_load_state("networkidle")
        actions = [a for a in page.evaluate(STATE_CHANGING)
                   if not a.startswith(ALLOWED_FOR_ANYONE)]
        assert actions == [], (path, actions)
    nav = page.locator("header nav").inner_text()
    assert "Admin" not in nav


def test_security_headers_on_every_page(xss_ui: Any, page: Any, tmp_path: Path) -> None:
    ui, run_id = xss_ui
    login(page, ui, "ada")
    for path in PAGES:
        answer = page.goto(ui.base + path.format(run=run_id))
        assert answer is not None
        csp = answer.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "unsafe" not in csp, path
