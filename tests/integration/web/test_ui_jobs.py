"""The jobs pages through the app (issue 16 items 2, 3, 5): the catalogue with its filters,
strip, switch and actions by role; a job's page; Run with parameters and Save as preset;
errors in #flash; user data always escaped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env
from tests.support.store_helpers import end_run, start_run

from cadenza.domain.states import RunState, StepState

HX = {"HX-Request": "true"}
XSS = ('<script>alert(1)</script>', '"><img src=x onerror=alert(1)>')
DST_JOB = """
# a weekly job whose 02:30 does not exist on 2027-03-28 in Paris
[jobs.weekly]
description = "weekly <script>alert(1)</script>"
tags = ["night"]
schedule = "30 2 * * sun"
timezone = "Europe/Paris"
params = { who = "\\"><img src=x onerror=alert(1)>" }

[[jobs.weekly.steps]]
name = "count"
type = "python"
callable = "demo_tasks:count"

[jobs.weekly.presets.quiet]
description = "<script>alert(1)</script>"
disabled_steps = ["count"]
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


def jobs_text(env: ApiEnv) -> str:
    return env.services.home.jobs_file.read_text(encoding="utf-8")


def comment_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "#" in line]


def add_dst_job(env: ApiEnv) -> None:
    path = env.services.home.jobs_file
    path.write_text(path.read_text(encoding="utf-8") + DST_JOB, encoding="utf-8")


# --- the catalogue -------------------------------------------------------------------------

@pytest.mark.parametrize(("role", "run", "switch", "edit"), [
    ("viewer", False, False, False), ("operator", True, False, False),
    ("editor", True, True, True), ("admin2", True, True, True)])
def test_catalogue_shows_each_role_only_its_actions(env: ApiEnv, role: str, run: bool,
                                                     switch: bool, edit: bool) -> None:
    page = env.session(role).get("/jobs")
    assert page.status_code == 200
    text = page.text
    assert "every day at 02:00, Europe/Paris" in text  # the schedule in words, with its zone
    assert 'id="job-sales-load"' in text and 'id="job-hello"' in text
    assert "manual only" in text  # hello has no schedule
    assert ('hx-post="/jobs/hello/run-now"' in text) is run
    assert ('role="switch"' in text) is switch
    assert ('href="/jobs/hello/edit"' in text) is edit
    assert ('href="/jobs/new?from=hello"' in text) is edit
    assert 'href="/jobs/hello/run"' in text  # everyone may look at the parameters


def test_search_and_tag_chips_filter_and_stay_in_the_url(env: ApiEnv) -> None:
    viewer = env.session("viewer")
    found = viewer.get("/jobs", params={"q": "SALES"}).text
    assert 'id="job-sales-load"' in found and 'id="job-hello"' not in found
    by_step = viewer.get("/jobs", params={"q": "count"}).text  # a step's name
    assert 'id="job-hello"' in by_step and 'id="job-sales-load"' not in by_step
    tagged = viewer.get("/jobs", params={"tag": "demo"}).text
    assert 'id="job-hello"' in tagged and 'id="job-sales-load"' not in tagged
    assert 'aria-pressed="true"' in tagged and 'type="hidden" name="tag" value="demo"' in tagged
    both = viewer.get("/jobs", params={"q": "hello", "tag": "demo"}).text
    assert 'href="/jobs?q=hello&amp;"' in both  # the demo chip turns off, the search stays
    nothing = viewer.get("/jobs", params={"q": "nothing-like-this"}).text
    assert "No job matches these filters" in nothing


def test_empty_catalogue_teaches(env: ApiEnv) -> None:
    env.services.home.jobs_file.write_text("# no jobs yet\n", encoding="utf-8")
    editor = env.session("editor").get("/jobs").text
    assert "No jobs yet." in editor and "[jobs.hello]" in editor
    assert 'href="/jobs/new"' in editor
    assert 'href="/jobs/new"' not in env.session("viewer").get("/jobs").text


def test_run_now_redirects_to_the_run_and_the_strip_links_it(env: ApiEnv) -> None:
    operator = env.session("operator")
    answer = operator.post("/jobs/hello/run-now", headers=HX)
    assert answer.status_code == 200
    target = answer.headers["HX-Redirect"]
    run_id = target.removeprefix("/runs/")
    run = env.store.get_run(run_id)
    assert run is not None and run.job_id == "hello" and run.trigger == "manual:operator"
    plain = operator.post("/jobs/hello/run-now", follow_redirects=False)
    assert plain.status_code == 303 and plain.headers["location"].startswith("/runs/")
    page = operator.get("/jobs").text
    assert f'href="/runs/{run_id}"' in page and "QUEUED" in page
    assert env.session("viewer").post("/jobs/hello/run-now", headers=HX).status_code == 403


def test_strip_holds_the_last_14_runs_oldest_first(env: ApiEnv) -> None:
    ids = [env.store.create_run("hello", "manual:test") for _ in range(16)]
    page = env.session("viewer").get("/jobs").text
    row = page.split('id="job-hello"')[1].split("</tr>")[0]
    strip = row.split('class="strip"')[1].split("</span>\n")[0]
    shown = [i for i in ids if f'href="/runs/{i}"' in strip]
    assert shown == ids[2:]  # the 14 newest
    assert strip.index(ids[2]) < strip.index(ids[-1])


def test_enable_switch_writes_jobs_toml_keeping_comments(env: ApiEnv) -> None:
    before = jobs_text(env)
    editor = env.session("editor")
    answer = editor.post("/jobs/sales-load/enabled", data={"enabled": "false"}, headers=HX)
    assert answer.status_code == 200
    assert 'aria-checked="false"' in answer.text and '"enabled": "true"' in answer.text
    after = jobs_text(env)
    assert "enabled = false" in after.split("[jobs.sales-load]")[1].split("[jobs.hello]")[0]
    assert comment_lines(after) == comment_lines(before)
    assert env.reloads  # the node was told to reload
    assert "disabled" in editor.get("/jobs/sales-load").text
    assert editor.post("/jobs/sales-load/enabled", data={"enabled": "true"},
                       headers=HX).status_code == 200
    assert "enabled = true" in jobs_text(env)
    refused = env.session("operator").post("/jobs/sales-load/enabled",
                                           data={"enabled": "false"}, headers=HX)
    assert refused.status_code == 403
    bad = editor.post("/jobs/sales-load/enabled", data={"enabled": "maybe"}, headers=HX)
    assert bad.status_code == 422 and bad.headers["HX-Retarget"] == "#flash"


# --- the job page --------------------------------------------------------------------------

def test_job_page_definition_fires_presets(env: ApiEnv) -> None:
    page = env.session("viewer").get("/jobs/sales-load")
    assert page.status_code == 200
    text = page.text
    assert "# every night at 02:00, Paris time" in text  # the TOML as written
    assert "[jobs.sales-load.presets.month-end]" in text
    assert "[jobs.hello]" not in text  # only this job's part of the file
    assert text.count("<tr") - text.count('<tr class="dstrow"') >= 10
    assert "monthly on day 1 at 06:00, Europe/Paris" in text  # the preset's schedule
    assert 'href="/jobs/sales-load/run?preset=month-end"' in text
    assert "No runs yet" in text
    assert 'hx-post="/jobs/sales-load/run-now"' not in text  # a viewer cannot run
    operator = env.session("operator").get("/jobs/sales-load").text
    assert operator.count('hx-post="/jobs/sales-load/run-now"') == 1  # one primary Run now
    assert 'class="runnow primary"' in operator
    assert env.session("viewer").get("/jobs/nope").status_code == 404


def test_job_page_marks_dst_gaps(env: ApiEnv) -> None:
    add_dst_job(env)
    text = env.session("viewer").get("/jobs/weekly").text
    assert "every Sunday at 02:30, Europe/Paris" in text
    assert text.count("DST gap</span>") == 1
    assert "2027-03-28 03:00" in text  # the first instant after the gap


def test_a_step_the_preset_skips_cannot_be_ticked_back(env: ApiEnv) -> None:
    add_dst_job(env)
    form = env.session("operator").get("/jobs/weekly/run", params={"preset": "quiet"}).text
    assert 'name="run_steps" value="count" disabled' in form
    assert "pick no preset to run it" in form
    assert 'name="run_steps" value="count" checked' in \
        env.session("operator").get("/jobs/weekly/run").text


def test_job_page_grid_and_charts(env: ApiEnv) -> None:
    store = env.store
    run_ids = []
    for state in (RunState.SUCCEEDED, RunState.FAILED):
        run_id = store.create_run("hello", "manual:test")
        step = store._create_step_run(run_id, "count", "python", state=StepState.RUNNING)
        start_run(store, run_id)
        store._transition_step_run(step, StepState(state.value))
        end_run(store, run_id, state)
        run_ids.append(run_id)
    missed = store.create_run("hello", "schedule", state=RunState.MISSED, schedule="job",
                              scheduled_for=datetime.fromisoformat("2027-03-10T08:00:00+00:00"),
                              reason="missed: the scheduler was down")
    text = env.session("viewer").get("/jobs/hello").text
    grid = text.split('class="rungrid"')[1].split("</table>")[0]
    assert grid.index(run_ids[0]) < grid.index(run_ids[1]) < grid.index(str(missed))
    assert "sq sq-succeeded" in grid and "sq sq-failed" in grid and "sq-missed" in grid
    assert 'class="sq sq-none"' in grid  # the missed run ran no step
    assert 'data-chart=\'{"bars": true' in text  # succeeded/failed per day


# --- run with parameters -------------------------------------------------------------------

def test_run_form_shows_values_and_where_they_come_from(env: ApiEnv) -> None:
    viewer = env.session("viewer")
    own = viewer.get("/jobs/sales-load/run").text
    assert 'name="param:period" value="${month.current}"' in own
    assert 'origin-job">from the job' in own
    assert 'name="arg:load-file:mode" value="overwrite"' in own  # a step's setting
    assert 'name="arg:load-file:connection"' not in own  # a run may not change it
    assert 'name="run_steps" value="tell-downstream" checked' in own
    assert 'type="submit"' not in own and "Save as preset" not in own  # a viewer
    picked = viewer.get("/jobs/sales-load/run", params={"preset": "month-end"},
                        headers=HX).text
    assert not picked.lstrip().startswith("<!doctype")  # the form alone
    assert 'name="param:period" value="${month.previous}"' in picked
    assert 'origin-preset">from the preset' in picked
    assert '<option value="DEBUG" selected>' in picked
    hello = viewer.get("/jobs/hello/run").text
    assert 'name="arg:count:upto" value="3" class="mono"' in hello  # typed: read as JSON
    assert 'origin-default">default' in hello  # hello sets no log level
    editor = env.session("editor").get("/jobs/sales-load/run").text
    assert 'type="submit"' in editor and "Save as preset" in editor
    bad = viewer.get("/jobs/sales-load/run", params={"preset": "nope"})
    assert bad.status_code == 422 and "has no preset" in bad.text


class _Fields(HTMLParser):
    """The run form's value fields, each with whether a disabled fieldset holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.disabled_depth = 0
        self.depth = 0
        self.fields: dict[str, bool] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "fieldset":
            self.depth += 1
            if "disabled" in values and not self.disabled_depth:
                self.disabled_depth = self.depth
        name = values.get("name") or ""
        if tag in ("input", "select", "textarea") and values.get("type") != "hidden" \
                and (name.startswith(("param:", "arg:")) or name in (
                    "run_steps", "more_args", "log_level")):
            self.fields[name] = bool(self.disabled_depth) or "disabled" in values

    def handle_endtag(self, tag: str) -> None:
        if tag == "fieldset":
            if self.disabled_depth == self.depth:
                self.disabled_depth = 0
            self.depth -= 1


def _fields(html: str) -> dict[str, bool]:
    parser = _Fields()
    parser.feed(html)
    return parser.fields


def test_a_viewer_gets_the_run_form_read_only_with_a_note(env: ApiEnv) -> None:
    note = "Your role can look at these values but not run the job."
    for path in ("/jobs/sales-load/run", "/jobs/hello/run"):
        page = env.session("viewer").get(path).text
        fields = _fields(page)
        assert "param:period" in fields or "arg:count:upto" in fields
        assert fields and all(fields.values()), fields  # nothing to edit
        assert "more_args" in fields and "log_level" in fields
        assert page.index(note) < page.index('name="log_level"')  # said before the values
        assert 'id="preset"' in page  # a preset's values may still be looked at
    operator = env.session("operator").get("/jobs/sales-load/run").text
    assert not any(_fields(operator).values()) and note not in operator


def test_run_with_parameters_queues_what_was_asked(env: ApiEnv) -> None:
    operator = env.session("operator")
    answer = operator.post("/jobs/sales-load/run", headers=HX, data={
        "preset": "month-end", "param:period": "2026-09", "steps_shown": "1",
        "run_steps": ["load-file", "refresh-aggregates"], "log_level": "DEBUG",
        "arg:load-file:mode": "overwrite", "more_args": "load-file.csv.delimiter=;"})
    assert answer.status_code == 200, answer.text
    run = env.store.get_run(answer.headers["HX-Redirect"].removeprefix("/runs/"))
    assert run is not None and run.params["period"] == "2026-09"
    assert run.overrides["preset"] == "month-end"
    assert run.overrides["disabled_steps"] == ["tell-downstream"]
    assert run.overrides["log_level"] == "DEBUG"  # the preset's
    assert run.overrides["step_args"] == {"load-file": {"csv.delimiter": ";"}}
    typed = operator.post("/jobs/hello/run", headers=HX, data={"arg:count:upto": "5"})
    hello = env.store.get_run(typed.headers["HX-Redirect"].removeprefix("/runs/"))
    assert hello is not None and hello.overrides["step_args"] == {"count": {"upto": 5}}
    wrong = operator.post("/jobs/sales-load/run", headers=HX,
                          data={"more_args": "no-such-step.x=1"})
    assert wrong.status_code == 422 and wrong.headers["HX-Retarget"] == "#flash"
    assert "has no step" in wrong.text
    malformed = operator.post("/jobs/sales-load/run", headers=HX, data={"more_args": "oops"})
    assert malformed.status_code == 422 and "expected NAME=VALUE" in malformed.text
    viewer = env.session("viewer").post("/jobs/sales-load/run", headers=HX, data={})
    assert viewer.status_code == 403


def test_save_as_preset_keeps_comments_and_refuses_a_stale_base(env: ApiEnv) -> None:
    editor = env.session("editor")
    before = jobs_text(env)
    form = editor.get("/jobs/sales-load/run", params={"preset": "month-end"}, headers=HX).text
    base = form.split('name="base_hash" id="base_hash" value="')[1].split('"')[0]
    saved = editor.post("/jobs/sales-load/presets", headers=HX, data={
        "preset": "month-end", "preset_name": "september", "base_hash": base,
        "param:period": "2026-09", "steps_shown": "1",
        "run_steps": ["load-file", "refresh-aggregates"], "log_level": "DEBUG"})
    assert saved.status_code == 200, saved.text
    assert "Preset september saved" in saved.text and 'hx-swap-oob="true"' in saved.text
    after = jobs_text(env)
    assert comment_lines(after) == comment_lines(before)
    preset = after.split("[jobs.sales-load.presets.september]")[1]
    assert 'period = "2026-09"' in preset and 'log_level = "DEBUG"' in preset
    assert 'disabled_steps = ["tell-downstream"]' in preset
    assert "step_args" not in preset  # the steps' own settings, unchanged, are not copied
    assert "schedule" not in preset  # a new preset is not scheduled by copying another
    changed = editor.post("/jobs/sales-load/presets", headers=HX, data={
        "preset_name": "append", "base_hash": saved.text.split('value="')[-1].split('"')[0],
        "arg:load-file:mode": "append"})
    assert changed.status_code == 200, changed.text
    appended = jobs_text(env).split("[jobs.sales-load.presets.append]")[1]
    assert 'load-file = { mode = "append" }' in appended or 'mode = "append"' in appended
    assert 'september' in editor.get("/jobs/sales-load").text
    stale = editor.post("/jobs/sales-load/presets", headers=HX, data={
        "preset_name": "october", "base_hash": base, "param:period": "2026-10"})
    assert stale.status_code == 409 and stale.headers["HX-Retarget"] == "#flash"
    assert "+[jobs.sales-load.presets.october]" in stale.text  # the diff, as text
    assert "october" not in jobs_text(env)
    unnamed = editor.post("/jobs/sales-load/presets", headers=HX, data={"base_hash": base})
    assert unnamed.status_code == 422
    bad_name = editor.post("/jobs/sales-load/presets", headers=HX,
                           data={"preset_name": "no spaces", "base_hash": base})
    assert bad_name.status_code == 422
    assert env.session("operator").post("/jobs/sales-load/presets", headers=HX,
                                        data={"preset_name": "x"}).status_code == 403


def test_saving_over_a_scheduled_preset_keeps_its_schedule(env: ApiEnv) -> None:
    editor = env.session("editor")
    base = editor.get("/api/jobs/sales-load").json()["hash"]
    saved = editor.post("/jobs/sales-load/presets", headers=HX, data={
        "preset": "month-end", "preset_name": "month-end", "base_hash": base,
        "param:period": "${month.previous}", "log_level": "INFO"})
    assert saved.status_code == 200, saved.text
    preset = jobs_text(env).split("[jobs.sales-load.presets.month-end]")[1]
    assert 'schedule = "0 6 1 * *"' in preset
    assert "log_level" not in preset.split("[[")[0]  # back to the job's own INFO


# --- escaping ------------------------------------------------------------------------------

def test_user_data_is_text_on_every_jobs_page(env: ApiEnv) -> None:
    add_dst_job(env)
    viewer = env.session("viewer")
    for url in ("/jobs", "/jobs?q=weekly", "/jobs/weekly", "/jobs/weekly/run",
                "/jobs/weekly/run?preset=quiet",
                "/jobs?q=" + XSS[1]):
        text = viewer.get(url).text
        for raw in XSS:
            assert raw not in text, (url, raw)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in viewer.get("/jobs").text
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in viewer.get("/jobs/weekly/run").text


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_bulk_reads_on_each_backend(tmp_path: Path, request: pytest.FixtureRequest,
                                    backend: str) -> None:
    """The strips' UNION ALL and the grid's step read on SQLite and PostgreSQL."""
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    with api_env(tmp_path, store_url=url) as env:
        store = env.store
        ids = [store.create_run(job, "manual:test") for job in ("hello", "sales-load") * 3]
        store._create_step_run(ids[0], "count", "python", state=StepState.SKIPPED,
                              reason="disabled")
        viewer = env.session("viewer")
        page = viewer.get("/jobs").text
        assert all(f'href="/runs/{i}"' in page for i in ids)
        grid = viewer.get("/jobs/hello").text.split('class="rungrid"')[1]
        assert "sq sq-skipped" in grid
