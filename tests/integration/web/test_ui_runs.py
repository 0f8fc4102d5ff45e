"""The runs pages over TestClient: the history's filters and keyset pages, a run's page with
the actions its reader's role and the run's state allow, the live stream, and escaping."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tests.integration.web.api_env import START, ApiEnv, api_env
from tests.support.store_helpers import append_log, end_run, start_run

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.web.ui import runs_view

XSS = ('<script>alert(1)</script>', '"><img src=x onerror=alert(1)>')


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path, clock=FakeClock(START)) as made:
        yield made


def _runs(env: ApiEnv, n: int) -> list[str]:
    operator = env.session("operator")
    made = []
    for _ in range(n):
        made.append(operator.post("/api/jobs/hello/runs", json={}).json()["run_id"])
        env.services.clock.advance(60)  # type: ignore[attr-defined]
    return made


def _needs_review(env: ApiEnv, run_id: str, error: str = "step count failed") -> None:
    store = env.store
    assert start_run(store, run_id)
    assert end_run(store, run_id, RunState.NEEDS_REVIEW, reason="attempts spent",
                   error=error)


def _ids(page: str) -> list[str]:
    return re.findall(r'<tr class="run-row[^"]*">\s*<td data-label="Run"><a href="/runs/(\w+)"',
                      page)


def _link(page: str, rel: str) -> str | None:
    found = re.search(rf'rel="{rel}" href="([^"]+)"', page)
    return html.unescape(found.group(1)) if found else None


def test_history_keyset_pages_older_and_newer(env: ApiEnv,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cadenza.web.ui.runs.PAGE_SIZE", 3)
    made = _runs(env, 8)
    viewer = env.session("viewer")
    pages: list[list[str]] = []
    url: str | None = "/runs"
    while url:
        answer = viewer.get(url)
        assert answer.status_code == 200
        pages.append(_ids(answer.text))
        assert "page=" not in answer.text  # never page numbers
        url = _link(answer.text, "next")
    assert [i for p in pages for i in p] == list(reversed(made))
    assert [len(p) for p in pages] == [3, 3, 2]
    # a run created meanwhile never shifts the older pages
    _runs(env, 1)
    second = viewer.get(f"/runs?before={pages[0][-1]}")
    assert _ids(second.text) == pages[1]
    # and "newer" walks back up from the last page
    last = viewer.get(f"/runs?before={pages[1][-1]}")
    newer = viewer.get(_link(last.text, "prev") or "")
    assert _ids(newer.text) == pages[1]
    newest = viewer.get(_link(newer.text, "prev") or "")
    assert _ids(newest.text) == pages[0]
    top = viewer.get(_link(newest.text, "prev") or "")
    assert len(_ids(top.text)) == 1 and _link(top.text, "prev") is None


def test_history_filters_are_chips_in_the_url(env: ApiEnv) -> None:
    made = _runs(env, 3)
    store = env.store
    missed = store.create_run("hello", "scheduled", state=RunState.MISSED, schedule="job",
                              scheduled_for=env.services.clock.now() - timedelta(hours=1),
                              reason="missed: the server was down")
    assert missed is not None
    _needs_review(env, made[0])
    store.set_wait_reasons({made[1]: "pool units busy"})
    viewer = env.session("viewer")
    page = viewer.get("/runs").text
    assert "state-missed" in page and "state-needs_review" in page
    assert "pool units busy" in page  # a queued run says what it waits for
    assert "missed: the server was down" in page and "step count failed" in page
    only = viewer.get("/runs?state=MISSED,NEEDS_REVIEW")
    assert set(_ids(only.text)) == {missed, made[0]}
    assert 'href="/runs?state=MISSED"' in only.text  # a chip removes its own state
    assert viewer.get("/runs?trigger=scheduled").text.count('class="run-row') == 1
    assert _ids(viewer.get("/runs?trigger=manual%3Aoperator&job=hello").text) == \
        list(reversed(made))
    assert _ids(viewer.get("/runs?job=sales-load").text) == []
    assert "No runs match these filters" in viewer.get("/runs?job=sales-load").text
    assert _ids(viewer.get("/runs?since=90s").text) == [missed, made[2]]
    until = (env.services.clock.now() - timedelta(seconds=150)).isoformat()
    assert _ids(viewer.get("/runs", params={"until": until}).text) == [made[0]]
    bad = viewer.get("/runs?state=sleeping&since=yesterday")
    assert bad.status_code == 200 and "unknown state SLEEPING" in bad.text
    # an htmx swap of the list gets the list alone
    part = viewer.get("/runs?state=MISSED", headers={"HX-Request": "true", "HX-Target": "runs"})
    assert part.text.lstrip().startswith('<div id="runs"') and "<html" not in part.text
    form = viewer.get("/runs?job=&state=MISSED&trigger=&since=&until=",
                      headers={"HX-Request": "true", "HX-Target": "runs"})
    assert form.headers["HX-Push-Url"] == "/runs?state=MISSED"


def test_run_page_actions_follow_role_and_state(env: ApiEnv) -> None:
    queued, review, done = _runs(env, 3)
    _needs_review(env, review)
    env.store.transition_run(done, RunState.CANCELED, reason="test")
    viewer, operator = env.session("viewer"), env.session("operator")
    for run_id in (queued, review, done):
        page = viewer.get(f"/runs/{run_id}")
        assert page.status_code == 200
        assert "hx-post=\"/runs/" not in page.text and "Abandon" not in page.text
    assert f'hx-post="/runs/{queued}/cancel"' in operator.get(f"/runs/{queued}").text
    page = operator.get(f"/runs/{review}").text
    assert f'hx-post="/runs/{review}/resume"' in page and f'/runs/{review}/abandon' in page
    assert "/cancel" not in page and "Kept:" in page
    assert f'data-confirm-value="{review}"' in page
    page = operator.get(f"/runs/{done}").text
    assert f'hx-post="/runs/{done}/replay"' in page and "/cancel" not in page
    assert f'sse-connect="/runs/{queued}/live' in operator.get(f"/runs/{queued}").text
    assert "sse-connect" not in page  # an ended run opens no stream
    assert viewer.get("/runs/nope").status_code == 404


def test_a_running_runs_header_carries_its_elapsed_time_and_cancel_asks(env: ApiEnv) -> None:
    running, done = _runs(env, 2)
    assert start_run(env.store, running)
    env.services.clock.advance(75)  # type: ignore[attr-defined]
    operator = env.session("operator")
    page = operator.get(f"/runs/{running}").text
    # the duration the page's script counts on from, each second
    found = re.search(r'<dd class="run-duration" data-elapsed="([\d.]+)">([^<]+)</dd>', page)
    assert found and float(found.group(1)) == pytest.approx(75, abs=1), page
    assert found.group(2) == "75.0 s"
    assert re.search(r'<dd class="run-started"><time datetime="[^"]+Z" data-seconds>', page)
    # Cancel asks first: the button that posts sits in a confirmation with what is kept
    confirm = re.search(r'<details class="confirm-cancel">(.*?)</details>', page, re.S)
    assert confirm and f'hx-post="/runs/{running}/cancel"' in confirm.group(1)
    assert "Kept:" in confirm.group(1) and "Cancel this run" in confirm.group(1)
    assert page.count(f'hx-post="/runs/{running}/cancel"') == 1
    # an ended run's header stands still: no elapsed time to count on from
    start_run(env.store, done)
    end_run(env.store, done, RunState.SUCCEEDED)
    ended = operator.get(f"/runs/{done}").text
    assert "data-elapsed" not in ended
    assert re.search(r'<dd class="run-finished"><time datetime="[^"]+Z" data-seconds>', ended)


def test_actions_redirect_and_refuse(env: ApiEnv) -> None:
    queued, review, other = _runs(env, 3)
    _needs_review(env, review)
    _needs_review(env, other)
    operator = env.session("operator")
    hx = {"HX-Request": "true"}
    assert env.session("viewer").post(f"/runs/{review}/resume", headers=hx).status_code == 403
    resumed = operator.post(f"/runs/{review}/resume", headers=hx)
    assert resumed.headers["HX-Redirect"] == f"/runs/{review}"
    assert env.store.get_run(review).state is RunState.QUEUED
    again = operator.post(f"/runs/{review}/resume", headers=hx)
    assert again.status_code == 409 and "only a NEEDS_REVIEW run" in again.text
    assert again.headers["HX-Retarget"] == "#flash"
    refused = operator.post(f"/runs/{other}/abandon", headers=hx, data={"confirm": "nope"})
    assert refused.status_code == 422 and f"type the run id {other}" in refused.text
    assert env.store.get_run(other).state is RunState.NEEDS_REVIEW
    abandoned = operator.post(f"/runs/{other}/abandon", headers=hx, data={"confirm": other})
    assert abandoned.status_code == 200
    assert env.store.get_run(other).state is RunState.FAILED
    canceled = operator.post(f"/runs/{queued}/cancel", headers=hx)
    assert canceled.headers["HX-Redirect"] == f"/runs/{queued}"
    replay = operator.post(f"/runs/{queued}/replay", headers=hx)
    new = replay.headers["HX-Redirect"].removeprefix("/runs/")
    assert new != queued and env.store.get_run(new).state is RunState.QUEUED
    # without htmx, a plain form post gets a 303
    plain = operator.post(f"/runs/{queued}/replay", follow_redirects=False)
    assert plain.status_code == 303


def test_live_stream_sends_html_lines_then_end(env: ApiEnv) -> None:
    (run_id,) = _runs(env, 1)
    store = env.store
    append_log(store, run_id, "INFO", "first")
    append_log(store, run_id, "WARNING", "two\nlines " + XSS[0])
    store.transition_run(run_id, RunState.CANCELED, reason="test")
    viewer = env.session("viewer")
    shown = store.run_log(run_id)  # the run's lines and its events, merged
    first = next(line for line in shown if line.message == "first")
    stream = viewer.get(f"/runs/{run_id}/live", params={"after": first.id, "state": "QUEUED"})
    assert stream.headers["content-type"].startswith("text/event-stream")
    text = stream.text
    # One "line" event with what came after the page's cursor; its id is the new cursor.
    assert text.startswith(f"id: {shown[-1].id}\nevent: line\ndata: <span class=\"line ")
    assert "first" not in text  # the page had it already
    assert 'lvl-WARNING" data-id=' in text and 'data-event="RUN_FINISHED"' in text
    assert "data: lines &lt;script&gt;" in text and "<script>" not in text
    # The page said QUEUED: the header comes again in the stream, after the lines and
    # before the end, showing what the lines show (never ahead of them).
    events = [block.split("\n") for block in text.strip("\n").split("\n\n")]
    names = [next(line for line in block if line.startswith("event: "))[7:] for block in events]
    assert names == ["line", "summary", "end"], names
    summary = "\n".join(line.removeprefix("data: ") for line in events[1]
                        if line.startswith("data: "))
    assert 'id="run-summary"' in summary and 'data-state="CANCELED"' in summary
    assert "sse-swap" not in summary  # the run is over: nothing more to swap in
    assert text.endswith("event: end\ndata: \n\n")
    assert viewer.get("/runs/nope/live").status_code == 404
    # a browser reconnecting by itself says which line it saw last
    again = viewer.get(f"/runs/{run_id}/live", params={"after": 0},
                       headers={"Last-Event-ID": shown[-1].id})
    assert again.text == "event: end\ndata: \n\n"


def test_pages_escape_what_users_and_steps_wrote(env: ApiEnv) -> None:
    store = env.store
    run_id = store.create_run("hello", f"manual:{XSS[1]}", params={"period": XSS[0]})
    assert run_id is not None
    append_log(store, run_id, "ERROR", XSS[0] + XSS[1])
    start_run(store, run_id)
    end_run(store, run_id, RunState.NEEDS_REVIEW, reason=XSS[1], error=XSS[0])
    queued = store.create_run("hello", "manual:ana")
    assert queued is not None
    store.set_wait_reasons({queued: XSS[0]})
    operator = env.session("operator")
    for url in ("/runs", f"/runs/{run_id}", f"/runs?job={XSS[0]}&trigger={XSS[1]}"):
        page = operator.get(url).text
        assert "<script>alert" not in page and "<img src=x" not in page, url
    page = operator.get(f"/runs/{run_id}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in page


def test_a_scheduled_run_names_its_time_in_the_schedules_zone(env: ApiEnv) -> None:
    from datetime import UTC, datetime

    run_id = env.store.create_run("sales-load", "scheduled", schedule="job",
                                  scheduled_for=datetime(2027, 1, 5, 1, 0, tzinfo=UTC))
    assert run_id is not None
    page = env.session("viewer").get(f"/runs/{run_id}").text
    assert "scheduled 02:00 CET" in page


def test_trigger_words() -> None:
    from zoneinfo import ZoneInfo

    class Run:
        trigger = "scheduled"
        schedule = "preset:month-end"
        scheduled_for = None

    run = Run()
    from datetime import UTC, datetime

    run.scheduled_for = datetime(2027, 1, 5, 1, 0, tzinfo=UTC)  # type: ignore[assignment]
    words = runs_view.trigger_of(run, ZoneInfo("Europe/Paris"))  # type: ignore[arg-type]
    assert words.text == "scheduled 02:00 CET (preset:month-end)"
    run.trigger = "manual:ana"
    assert runs_view.trigger_of(run).text == "manual: ana"  # type: ignore[arg-type]
    run.trigger = "call_job:parent@01JFQ3ABCDEFGHJKMNPQRSTVWX"
    called = runs_view.trigger_of(run)  # type: ignore[arg-type]
    assert called.text == "call_job: parent@01JFQ3ABCD…"
    assert called.href == "/runs/01JFQ3ABCDEFGHJKMNPQRSTVWX"
