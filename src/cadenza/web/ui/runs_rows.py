"""The rows of the runs table (``ui/_runs_table.html``), built in Python.

Fifty rows of nine cells through Jinja's macros and attribute lookups cost tens of thousands
of calls per page; here each row is one f-string. Every value from a run goes through :func:`escape`
(the same entities as the templates' autoescape); nothing else is interpolated but these
fixed strings and the caller's (already translated) labels, which are escaped too. The HTML
is the same as the template's macros made (``state``, ``time``, ``duration``), checked by
``tests/unit/web/test_runs_rows.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup
from markupsafe import escape as markup_escape

from cadenza.web.ui import formats

DASH = '<span class="muted">&mdash;</span>'
_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"})
"""What markupsafe's escape replaces, with the same entities, in one C pass (``translate``)
without a Markup object per value."""


def _ascii(html: str) -> str:
    """``html`` (already escaped) with every character beyond ASCII as a character
    reference: the runs page's fixed text is ASCII (its dashes, arrows and ellipses are
    entities), and a page all in ASCII is a string of one byte per character, which the
    home's redactor scans in half the time of one of two bytes (docs/benchmarks.md)."""
    return html if html.isascii() else html.encode("ascii", "xmlcharrefreplace").decode()


def ascii_html(value: object) -> Markup:
    """The ``ascii`` filter: ``value`` escaped (unless it is markup already), then as
    :func:`_ascii` (for translated fixed text: ``_("Search jobs…")|ascii``)."""
    return Markup(_ascii(str(markup_escape(value))))


def escape(value: object) -> str:
    """``value``'s text, HTML-escaped (as the templates' autoescape does)."""
    return str(value).translate(_HTML)


def state_html(value: str | None, words: Mapping[str, str] | None = None) -> str:
    """The ``state`` macro: the state's word (``words``: the page language's) in its
    coloured badge."""
    if not value:
        return ""
    code = escape(value)
    word = escape(words.get(value, value)) if words is not None else code
    return f'<span class="state state-{code.lower()}">{word}</span>'


def time_html(value: datetime | None, rel: bool = True) -> str:
    """The ``time`` macro: a ``<time>`` in UTC that the page's script shows in the browser's
    zone (``data-rel``: as "3 min ago"), or a dash."""
    if not value:
        return DASH
    utc = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    iso = utc.isoformat()  # as render.iso_utc and render.utc_text, from one isoformat
    return (f'<time datetime="{iso[:-6]}Z"{" data-rel" if rel else ""}>'
            f"{iso[:10]} {iso[11:19]} UTC</time>")



def duration_html(seconds: float | None, lang: str = "en") -> str:
    """The ``duration`` macro: ``850 ms``, ``12.5 s``, ``3 min 20 s``, ``2 h 5 min`` (and
    :func:`cadenza.web.ui.formats.duration` in another language)."""
    if seconds is None:
        return DASH
    if lang != "en":
        return str(escape(formats.duration(lang, seconds)))
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int((seconds % 3600) // 60)} min"


def rows_html(rows: Iterable[Mapping[str, Any]], labels: Mapping[str, str],
              words: Mapping[str, str] | None = None, lang: str = "en") -> Markup:
    """The ``<tr>`` of each row of :func:`cadenza.web.ui.runs._row`; ``labels``: the
    translated column names (``run``, ``job``, ``state``, ``trigger``, ``created``,
    ``started``, ``duration``, ``rows``, ``note``) and ``waits`` (the word before a queued
    run's wait reason)."""
    lbl = {key: escape(text) for key, text in labels.items()}
    out: list[str] = []
    for r in rows:
        run = r["run"]
        trigger = r["trigger"]
        state = run.state.value
        run_id = escape(run.id)
        job = escape(run.job_id)
        if trigger.href:
            said = (f'<a href="{escape(trigger.href)}" title="{escape(trigger.title)}"'
                    f' hx-boost="false">{escape(trigger.text)}</a>')
        else:
            title = f' title="{escape(trigger.title)}"' if trigger.title else ""
            said = f"<span{title}>{escape(trigger.text)}</span>"
        if run.scheduled_for and trigger.kind == "scheduled":
            said += f' <span class="muted">{time_html(run.scheduled_for, rel=False)}</span>'
        note = ""
        if r.get("late"):
            note = f'<span class="tag run-late" title="{escape(r["late"])}">{lbl["late"]}</span> '
        if r["note"]:
            if state == "QUEUED":
                note = f'<span class="muted">{lbl["waits"]}</span> '
            note += str(escape(r["note"]))
        count = "&mdash;" if run.rows is None else \
            escape(run.rows if lang == "en" else formats.number(lang, run.rows))
        out.append(
            f'<tr class="run-row row-{escape(state.lower())}">'
            f'<td data-label="{lbl["run"]}"><a href="/runs/{run_id}" title="{run_id}"'
            f' hx-boost="false"><code>{_ascii(escape(r["short"]))}</code></a></td>'
            f'<td data-label="{lbl["job"]}"><a href="/jobs/{job}" hx-boost="false">{job}</a>'
            f"</td>"
            f'<td data-label="{lbl["state"]}">{state_html(state, words)}</td>'
            f'<td data-label="{lbl["trigger"]}" class="run-trigger">{said}</td>'
            f'<td data-label="{lbl["created"]}">{time_html(run.created_at)}</td>'
            f'<td data-label="{lbl["started"]}">{time_html(run.started_at)}</td>'
            f'<td data-label="{lbl["duration"]}" class="num">{duration_html(r["seconds"], lang)}'
            f"</td>"
            f'<td data-label="{lbl["rows"]}" class="num">{count}</td>'
            f'<td data-label="{lbl["note"]}" class="run-note">{note}</td>'
            "</tr>\n")
    return Markup("".join(out))
