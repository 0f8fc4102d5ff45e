"""The runs pages (docs/ui.md "Pages: runs"): the history (``/runs``, keyset pages over the
store's ``(created_at, id)`` order, filters kept in the URL) and a run's page
(``/runs/{id}``: header, steps, the live log through server-sent events, and the
operator's actions).

A run page in QUEUED or RUNNING opens one event stream (``/runs/{id}/live``): the new log
lines as HTML, a ``change`` event when the run's state moves and ``end`` when it ended or
needs review, on which the page reloads its header and steps. The stream only reads: closing
the page never touches the run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from cadenza.domain.states import TERMINAL_RUN_STATES, RunState
from cadenza.services.errors import InvalidRequest, NotFound
from cadenza.services.history import (
    HistoryService,
    LogCursor,
    RunPage,
    RunPageQuery,
    parse_since,
    parse_states,
)
from cadenza.web.auth import context, services_for
from cadenza.web.ui.auth import PageOperator, PageViewer, PageViewerAtRead
from cadenza.web.ui.render import choose_language, environment, is_htmx, redact_html, render
from cadenza.web.ui.runs_view import (
    LEVELS,
    LIVE_STATES,
    PAGE_SIZE,
    RANGES,
    STATE_ORDER,
    Filters,
    actions_for,
    note_of,
    output_text,
    seconds_between,
    short_id,
    trigger_of,
    zone_lookup,
)

if TYPE_CHECKING:
    from cadenza.services.auth import Principal
    from cadenza.store.protocols import HistoryQueries
    from cadenza.store.records import RunRecord

router = APIRouter(include_in_schema=False)

LIVE_POLL_SECONDS = 0.5
"""How often the live stream looks for new lines and a state change (one read each)."""
LIVE_BATCH = 500
"""The most lines one ``line`` event carries."""
LOG_PAGE = 20_000
"""The log lines a run page renders at most (the API and CLI give the rest)."""


def _history(request: Request) -> HistoryService:
    web = context(request)
    store = web.store
    return HistoryService(lambda: store, web.clock)


def _page_query(request: Request, filters: Filters, before: str | None,
                after: str | None) -> RunPageQuery:
    """The history service's query for these filters (InvalidRequest naming a bad one)."""
    now = context(request).clock.now()
    states = parse_states(",".join(filters.states)) if filters.states else None

    def when(name: str, text: str) -> Any:
        if not text:
            return None
        try:
            return parse_since(text, now)
        except InvalidRequest:
            raise InvalidRequest(f"{name} {text!r}: expected an age like 90s, 30m, 1h, 2d "
                                 "or an ISO time") from None

    return RunPageQuery(job=filters.job or None, states=states,
                        trigger=filters.trigger or None, since=when("since", filters.since),
                        until=when("until", filters.until), before=before or None,
                        after=None if before else (after or None), limit=PAGE_SIZE)


@router.get("/runs", response_class=HTMLResponse)
async def runs_history(request: Request, caller: PageViewerAtRead,
                       before: Annotated[str | None, Query(max_length=100)] = None,
                       after: Annotated[str | None, Query(max_length=100)] = None
                       ) -> HTMLResponse:
    """The runs, newest first, a keyset page at a time ("older" / "newer"), filtered by job,
    state, trigger and time range (all kept in the URL, so a view can be shared). The read
    (and the caller's check) runs where :meth:`AtRead.read` puts it (a worker thread on
    PostgreSQL); the page is rendered here, on the event loop: in a worker thread its
    milliseconds of Python fought the loop for the interpreter (W6 ``--ui``,
    docs/benchmarks.md)."""
    filters = Filters.of(request.query_params)

    def read(me: Principal) -> tuple[Principal, RunPage, str | None, dict[str, str]]:
        try:
            query = _page_query(request, filters, before, after)
            page = _history(request).runs_page(query)
            return me, page, None, late_of(request, page.runs)
        except InvalidRequest as exc:
            return me, RunPage((), None, None), str(exc), {}

    me, page, error, late = await caller.read(read)
    values = {"filters": filters, "page": page, "error": error,
              "rows": [_row(run, late.get(run.id)) for run in page.runs],
              "cursor": before or after,
              "state_order": STATE_ORDER, "ranges": RANGES}
    fragment = is_htmx(request) and request.headers.get("hx-target") == "runs" \
        and request.headers.get("hx-history-restore-request") != "true"
    if fragment:  # the address bar gets the view's canonical URL (no empty filters)
        canonical = filters.url(before=before, after=None if before else after)
        return render(request, "ui/_runs_table.html", values, me=me, nav="runs",
                      headers={"HX-Push-Url": canonical})
    return render(request, "ui/runs_list.html", values, me=me, nav="runs")


def late_of(request: Request, runs: Sequence[RunRecord]) -> dict[str, str]:
    """Run id → the deadlines it is late for (``start_by, finish_by``), of the page's runs
    still QUEUED or RUNNING (one read, of their RUN_LATE events; none without such runs)."""
    from cadenza.store.outbox import late_recorded

    live = [r.id for r in runs if r.state in (RunState.QUEUED, RunState.RUNNING)
            and r.scheduled_for is not None]
    if not live:
        return {}
    with context(request).store.read() as c:
        found = late_recorded(c, live)
    out: dict[str, list[str]] = {}
    for run_id, deadline in sorted(found):
        out.setdefault(run_id, []).append(deadline)
    return {run_id: ", ".join(names) for run_id, names in out.items()}


def _row(run: RunRecord, late: str | None = None) -> dict[str, Any]:
    """What the history shows of one run (no query: the record has it all); ``late``:
    the deadlines it is late for."""
    return {"run": run, "trigger": trigger_of(run), "note": note_of(run),
            "seconds": seconds_between(run.started_at, run.finished_at),
            "short": short_id(run.id, 12), "late": late}


def _summary_values(request: Request, me: Principal, run_id: str) -> dict[str, Any]:
    """The header and steps of a run's page (a few reads: the run, its steps, its
    call_job family)."""
    web = context(request)
    detail = _history(request).get_run(run_id)
    store = web.store
    run = store.get_run(run_id)
    if run is None:  # gone between the two reads (retention)
        raise NotFound(f"no run {run_id!r}")
    home = web.home
    zone = zone_lookup(home.load_config)(run) if home is not None else None
    now = web.clock.now()
    records = store.list_step_runs(run_id)
    steps = [{"step": s, "seconds": seconds_between(s.started_at, s.finished_at or (
                  now if s.started_at is not None and s.state.value == "RUNNING" else None)),
              "output": output_text(s.output)}
             for s in records]
    return {"run": run, "detail": detail, "trigger": trigger_of(run, zone),
            "steps": steps, "actions": actions_for(run, me),
            "attempts": max([s.attempt for s in records] or [run.attempt]),
            "live": run.state in LIVE_STATES,
            "seconds": seconds_between(run.started_at, run.finished_at or (
                now if run.state is RunState.RUNNING else None)),
            "levels": LEVELS}


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: str, request: Request, me: PageViewer,
             level: Annotated[str, Query(max_length=20)] = "DEBUG") -> HTMLResponse:
    """A run: header, steps with their attempts, the log (live while the run is), and the
    actions the reader may take. While the run is live, its stream sends the header
    again when the run moves (:func:`live_events`)."""
    values = _summary_values(request, me, run_id)
    lines = context(request).store.run_log(run_id, limit=LOG_PAGE)
    values |= {"lines": lines, "cut": len(lines) >= LOG_PAGE,
               "last_line": lines[-1].id if lines else str(LogCursor()),
               "level": level.upper() if level.upper() in LEVELS else "DEBUG"}
    return render(request, "ui/runs_run.html", values, me=me, nav="runs")


def _lines_html(request: Request, lines: list[Any]) -> str:
    """Log lines as the page's HTML (escaped, then redacted)."""
    template = environment(choose_language(request)).get_template("ui/_runs_lines.html")
    return redact_html(request, template.render(lines=lines))


def _event(name: str, html: str = "", event_id: str | None = None) -> str:
    """One server-sent event; each line of ``html`` its own ``data:`` line. A ``line``
    event carries the id of its last line: a browser reconnecting by itself sends it back
    (``Last-Event-ID``) and the stream goes on from there, without repeating lines."""
    data = "\n".join(f"data: {part}" for part in (html.split("\n") if html else [""]))
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\n{data}\n\n"


async def live_events(request: Request, store: HistoryQueries, run_id: str, after: LogCursor,
                      state: str, header: Callable[[], str] | None = None,
                      ) -> AsyncIterator[str]:
    """The stream of a run page: new log lines (``line``), the page's header again
    (``summary``, from ``header``) when the run's state is no longer ``state``, and ``end``
    once the run ended or needs review. Reads only.

    The header comes in the stream, not fetched by the page on a signal: it is read before
    the lines of the same round and sent after them, so the page never shows a state whose
    lines it has not got yet (a header fetched on a ``change`` signal could show SUCCEEDED
    up to one round before the run's last lines arrived). A stream not told the page's
    ``state`` sends no header.

    Between reads it waits on the event loop, not in a worker thread: a page left open
    for a day holds no thread (each read borrows one for a moment)."""
    seen = state

    def read(after_id: LogCursor, seen: str) -> tuple[RunRecord | None, str | None, list[Any]]:
        run = store.get_run(run_id)  # first: a run's last lines commit with its end
        html = None
        if header is not None and seen and run is not None and run.state.value != seen:
            try:
                html = header()  # its reads too come before the lines'
            except NotFound:  # pruned between the reads: the stream ends below
                html = None
        return run, html, store.run_log(run_id, after=after_id, limit=LIVE_BATCH)

    while True:
        run, html, lines = await anyio.to_thread.run_sync(read, after, seen)
        if lines:
            after = lines[-1].cursor
            yield _event("line", _lines_html(request, lines), str(after))
            if len(lines) == LIVE_BATCH:
                continue  # lines the header may be ahead of are still to come
        if html is not None and run is not None:
            seen = run.state.value
            yield _event("summary", html)
        if run is None or run.state in TERMINAL_RUN_STATES \
                or run.state is RunState.NEEDS_REVIEW:
            yield _event("end")
            return
        await anyio.sleep(LIVE_POLL_SECONDS)  # pacing a reader, not waiting for a schedule


@router.get("/runs/{run_id}/live", response_model=None)
def run_live(run_id: str, request: Request, me: PageViewer,
             after: Annotated[str, Query(pattern=r"^\d{1,18}(\.\d{1,18})?$")] = "0",
             state: Annotated[str, Query(max_length=20)] = "") -> StreamingResponse:
    """The run page's event stream (see :func:`live_events`); 404 for an unknown run."""
    store = context(request).store
    if store.get_run(run_id) is None:
        raise NotFound(f"no run {run_id!r}")
    # A browser reconnecting by itself sends the last line's cursor back.
    start = LogCursor.parse(after)
    resumed = LogCursor.parse(request.headers.get("last-event-id", "")[:40])
    start = LogCursor(max(start.line, resumed.line), max(start.event, resumed.event))

    def header() -> str:
        values = _summary_values(request, me, run_id)
        page = render(request, "ui/_runs_summary.html", values, me=me, nav="runs")
        return bytes(page.body).decode()

    return StreamingResponse(live_events(request, store, run_id, start, state.upper(), header),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _done(request: Request, target: str) -> Response:
    """After an action: htmx goes to ``target`` (the run's page, or the new run's)."""
    if is_htmx(request):
        return Response(status_code=200, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


@router.post("/runs/{run_id}/cancel")
def cancel_run(run_id: str, request: Request, me: PageOperator) -> Response:
    """Cancel a queued run now, or ask the holder of a running one to stop it."""
    with services_for(request, me) as services:
        services.runs.cancel(run_id)
    return _done(request, f"/runs/{run_id}")


@router.post("/runs/{run_id}/resume")
def resume_run(run_id: str, request: Request, me: PageOperator) -> Response:
    """Queue a NEEDS_REVIEW run again from its checkpoint."""
    with services_for(request, me) as services:
        services.runs.resume(run_id)
    return _done(request, f"/runs/{run_id}")


@router.post("/runs/{run_id}/abandon")
def abandon_run(run_id: str, request: Request, me: PageOperator,
                confirm: Annotated[str, Form(max_length=200)] = "") -> Response:
    """End a NEEDS_REVIEW run FAILED; the form must carry the run's id typed in."""
    if confirm.strip() != run_id:
        raise InvalidRequest(f"type the run id {run_id} to abandon it")
    with services_for(request, me) as services:
        services.runs.abandon(run_id)
    return _done(request, f"/runs/{run_id}")


@router.post("/runs/{run_id}/replay")
def replay_run(run_id: str, request: Request, me: PageOperator) -> Response:
    """A new run with the same request; the page goes to it."""
    with services_for(request, me) as services:
        new = services.runs.replay(run_id)
    return _done(request, f"/runs/{new}")
