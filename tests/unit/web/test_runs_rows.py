"""The runs table's rows made in Python (web/ui/runs_rows.py) are the HTML the template's
macros made, and escape everything a run carries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cadenza.domain.states import RunState
from cadenza.store.records import RunRecord
from cadenza.web.ui.render import environment
from cadenza.web.ui.runs import _row
from cadenza.web.ui.runs_rows import duration_html, rows_html, state_html, time_html

XSS = '<script>alert("x")</script>&\'"'


def macro(call: str, **values: object) -> str:
    template = environment("en").from_string(
        '{% from "ui/macros.html" import state, time, duration %}' + call)
    return template.render(**values)


@pytest.mark.parametrize("value", [None, datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
                                   datetime(2026, 12, 1, 23, 59, 59, 999999, tzinfo=UTC),
                                   datetime(2026, 6, 1, 12, tzinfo=timezone(timedelta(hours=2)))])
@pytest.mark.parametrize("rel", [True, False])
def test_time_is_the_macros(value: datetime | None, rel: bool) -> None:
    assert time_html(value, rel=rel) == macro("{{ time(v, rel=r) }}", v=value, r=rel)


@pytest.mark.parametrize("seconds", [None, 0.0, 0.0004, 0.5, 0.9996, 1.0, 59.95, 119.99, 120.0,
                                     3599.5, 7199.0, 7200.0, 86399.0, 200000.0])
def test_duration_is_the_macros(seconds: float | None) -> None:
    assert duration_html(seconds) == macro("{{ duration(s) }}", s=seconds)


@pytest.mark.parametrize("value", [None, "", "SUCCEEDED", "NEEDS_REVIEW", XSS])
def test_state_is_the_macros(value: str | None) -> None:
    assert state_html(value) == macro("{{ state(v) }}", v=value)


def _run(**changes: object) -> RunRecord:
    now = datetime(2026, 12, 1, 20, 15, 3, tzinfo=UTC)
    fields: dict[str, object] = dict(
        id="01JFQ3ZZZZZZZZZZZZZZZZZZZZ", job_id="sales-load", state=RunState.FAILED,
        trigger="manual:ana", schedule=None, scheduled_for=None, created_at=now,
        started_at=now, finished_at=now + timedelta(seconds=150), not_before=None, priority=0,
        params={}, overrides={}, rows=12, error="boom", reason=None, wait_reason=None,
        lease_owner=None, lease_until=None, lease_epoch=0, attempt=1, resumes=0,
        updated_at=now)
    fields.update(changes)
    return RunRecord(**fields)  # type: ignore[arg-type]


LABELS = {"run": "Run", "job": "Job", "state": "State", "trigger": "Trigger",
          "created": "Created", "started": "Started", "duration": "Duration", "rows": "Rows",
          "note": "Note", "waits": "waits:"}


def test_rows_escape_what_a_run_carries() -> None:
    runs = [_run(job_id=XSS, error=XSS, trigger=f"manual:{XSS}"),
            _run(state=RunState.QUEUED, wait_reason=XSS, started_at=None, finished_at=None,
                 rows=None),
            _run(trigger=f"call_job: {XSS}@01JFQ3ABCDEFGHJKMNPQRSTVWX"),
            _run(trigger="scheduled", schedule="0 2 * * *",
                 scheduled_for=datetime(2026, 12, 1, 2, tzinfo=UTC))]
    html = str(rows_html([_row(r) for r in runs], LABELS | {"note": XSS}))
    assert "<script>" not in html and 'alert("x")' not in html
    assert html.count("&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&#39;&#34;") >= 5
    assert '<span class="muted">waits:</span> &lt;script&gt;' in html
    assert "2 min 30 s" in html and '<td data-label="Rows" class="num">&mdash;</td>' in html
    # The rows' own text is ASCII (entities), so a page of ASCII runs is ASCII: the
    # redactor scans it twice as fast (docs/benchmarks.md). A call_job trigger's text
    # ("parent@01JFQ3ABCD\u2026") is the exception.
    assert str(rows_html([_row(r) for r in (runs[0], runs[1], runs[3])], LABELS)).isascii()
    assert html.count("<tr ") == 4
