"""``/api/runs`` and ``/api/events``: history with keyset pagination, the live log as
server-sent events, and the operator's actions on a run; ``/api/backup`` (admin)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import anyio
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from cadenza.services.errors import InvalidRequest
from cadenza.services.history import (
    HistoryService,
    LogLine,
    RunView,
    check_type,
    parse_since,
)
from cadenza.web.api.errors import ERROR_RESPONSES
from cadenza.web.auth import AsAdmin, AsOperator, AsViewer, ViewerAtRead, context, services_for
from cadenza.web.limits import MAX_ID

if TYPE_CHECKING:
    from cadenza.services.auth import Principal

router = APIRouter(prefix="/api", tags=["runs"], responses=ERROR_RESPONSES)
MAX_PAGE = 500


class _End:
    """What ``next`` answers once the log's reading ended (the run ended)."""


_END = _End()


def _history(request: Request) -> HistoryService:
    web = context(request)
    store = web.store
    return HistoryService(lambda: store, web.clock)


def _when(request: Request, name: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_since(text, context(request).clock.now())
    except InvalidRequest as exc:
        raise InvalidRequest(str(exc).replace("--since", name)) from None


@router.get("/runs")
async def list_runs(
    caller: ViewerAtRead, request: Request,
    job: str | None = None, state: str | None = None, trigger: str | None = None,
    since: str | None = None, until: str | None = None,
    limit: int = Query(50, ge=1, le=MAX_PAGE), cursor: str | None = None,
) -> dict[str, Any]:
    """Runs, newest first. ``cursor`` is the ``next_cursor`` of the previous page (a keyset
    on creation time and id, never an offset); ``since``/``until`` are ages (``2d``) or ISO
    times; ``state`` a comma-separated list. The same history service as the runs page
    (:meth:`HistoryService.runs_page`)."""
    from cadenza.services.history import RunPageQuery, parse_states

    def read(_: Principal) -> Any:
        page = _history(request).runs_page(RunPageQuery(
            job=job, states=parse_states(state), trigger=trigger,
            since=_when(request, "since", since), until=_when(request, "until", until),
            before=cursor, limit=limit))
        return {"runs": [RunView.json_of(r) for r in page.runs], "next_cursor": page.older}

    # Encoded on the event loop: a worker thread only waits for the round trips.
    answer = context(request).answer(await caller.read(read))
    return cast("dict[str, Any]", answer)  # a response with the annotation's JSON


@router.get("/runs/{run_id}")
async def get_run(run_id: str, caller: ViewerAtRead, request: Request) -> dict[str, Any]:
    """One run with every step attempt."""
    def read(_: Principal) -> Any:
        return _history(request).get_run(run_id).as_json()

    answer = context(request).answer(await caller.read(read))
    return cast("dict[str, Any]", answer)  # a response with the annotation's JSON


@router.get("/runs/{run_id}/log", response_model=None)
def run_log(run_id: str, principal: AsViewer, request: Request, follow: bool = False,
            level: str | None = None) -> Any:
    """The run's log lines (JSON); with ``follow=1``, server-sent events: each line as a
    ``data:`` JSON event, then an ``end`` event when the run ended. Closing the stream only
    stops the reading: the run is never touched."""
    history = _history(request)
    if not follow:
        return context(request).answer(
            [line.as_json() | {"id": line.id} for line in history.logs(run_id, level)])
    lines = history.follow_logs_idle(run_id, level)  # NotFound here, before streaming
    return StreamingResponse(_stream(request, lines), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store"})


async def _stream(request: Request, lines: Iterator[LogLine | None]) -> AsyncIterator[str]:
    """The SSE events of ``lines`` (read in a worker thread, one poll at a time). Between
    two polls it checks whether the client left: a closed stream ends here within a poll,
    whatever the run does, and the reading stops (nothing of the run is touched)."""
    home = context(request).home
    try:
        while True:
            line = await anyio.to_thread.run_sync(next, lines, _END)
            if isinstance(line, _End):
                break
            if line is None:  # nothing new this poll
                if await request.is_disconnected():
                    return
                continue
            data = json.dumps(line.as_json() | {"id": line.id}, default=str)
            if home is not None:
                data = home.redactor.redact_text(data)
            yield f"id: {line.id}\ndata: {data}\n\n"
        yield "event: end\ndata: {}\n\n"
    finally:
        close = getattr(lines, "close", None)
        if close is not None:
            close()  # between two polls: only ends the generator


def _action(request: Request, principal: Any, run_id: str, verb: str) -> dict[str, Any]:
    with services_for(request, principal) as services:
        if verb == "cancel":
            outcome = services.runs.cancel(run_id)
            return outcome.as_json()
        if verb == "replay":
            return {"run_id": services.runs.replay(run_id), "replay_of": run_id}
        review = services.runs.resume(run_id) if verb == "resume" \
            else services.runs.abandon(run_id)
        return review.as_json()


@router.post("/runs/{run_id}/cancel")
def cancel_run(run_id: str, principal: AsOperator, request: Request) -> dict[str, Any]:
    """Cancel a queued run now, or ask the holder of a running one to stop it."""
    return _action(request, principal, run_id, "cancel")


@router.post("/runs/{run_id}/resume")
def resume_run(run_id: str, principal: AsOperator, request: Request) -> dict[str, Any]:
    """Queue a NEEDS_REVIEW run again from its checkpoint (409 in another state)."""
    return _action(request, principal, run_id, "resume")


@router.post("/runs/{run_id}/abandon")
def abandon_run(run_id: str, principal: AsOperator, request: Request) -> dict[str, Any]:
    """End a NEEDS_REVIEW run FAILED (409 in another state)."""
    return _action(request, principal, run_id, "abandon")


@router.post("/runs/{run_id}/replay", status_code=201)
def replay_run(run_id: str, principal: AsOperator, request: Request) -> dict[str, Any]:
    """A new run with the same request."""
    return _action(request, principal, run_id, "replay")


EVENT_FILTERS = ("run", "resource", "type", "since", "limit", "cursor", "actor")
"""The query parameters of ``GET /api/events``: any other (``run_id``, ``event_type``) is
refused, not ignored, since ignoring a filter answers with every event."""


@router.get("/events")
async def list_events(
    caller: ViewerAtRead, request: Request,
    run: str | None = None, resource: str | None = None, type: str | None = None,
    since: str | None = None, limit: int = Query(200, ge=1, le=MAX_PAGE),
    cursor: int | None = Query(None, ge=0, le=MAX_ID),
    actor: str | None = Query(None, max_length=200),
) -> dict[str, Any]:
    """Audit events, oldest first; ``cursor`` is the previous page's ``next_cursor`` (the
    last event id: a keyset); ``actor`` keeps one actor's (``user:ana``, ``token:ci``,
    ``system``), as the audit page's filter does."""
    def read(_: Principal) -> Any:
        unknown = sorted(set(request.query_params) - set(EVENT_FILTERS))
        if unknown:
            raise InvalidRequest(f"unknown filter {', '.join(unknown)}; the filters of "
                                 f"/api/events are {', '.join(EVENT_FILTERS)}")
        event_type = check_type(type) if type is not None else None
        rows = context(request).store.list_events(
            run_id=run, resource_id=resource, event_type=event_type,
            since=_when(request, "since", since), limit=limit + 1, after_id=cursor,
            actor=actor)
        more = len(rows) > limit
        rows = rows[:limit]
        return {"events": [{"id": e.event_id, "at": e.created_at, "type": e.event_type,
                            "level": e.level, "run": e.run_id, "resource": e.resource_id,
                            "actor": e.actor, "message": e.message, "payload": e.payload}
                           for e in rows],
                "next_cursor": rows[-1].event_id if more and rows else None}

    answer = context(request).answer(await caller.read(read))
    return cast("dict[str, Any]", answer)  # a response with the annotation's JSON


@router.post("/backup", status_code=201)
async def backup(principal: AsAdmin, request: Request) -> dict[str, Any]:
    """Copy the store (SQLite) to ``data/backups/cadenza-<time>.db`` in the home (mode 0600
    on POSIX; a folder no step reads); the copy holds no secret value. The place is chosen
    by the server, never by the request: a body naming a ``path``, ``name`` or ``file`` is
    refused (422)."""
    body = await request.body()
    if body.strip():
        try:
            fields = json.loads(body)
        except ValueError:
            fields = None
        if not isinstance(fields, dict) or fields:
            raise HTTPException(422, "POST /api/backup takes no fields: the backup is always "
                                     "written under data/backups/ of the home")
    return await run_in_threadpool(_backup_now, principal, request)


def _backup_now(principal: Any, request: Request) -> dict[str, Any]:
    from cadenza.services.backup import backup_document

    with services_for(request, principal) as services:
        folder = services.home.path / "data" / "backups"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        stamp = services.clock.now().strftime("%Y%m%dT%H%M%S%fZ")
        report = services.backup.backup(folder / f"cadenza-{stamp}.db")
        document = backup_document(report)
    return document | {"file": f"data/backups/cadenza-{stamp}.db"}


@router.get("/stats")
def get_stats(principal: AsViewer, request: Request, since: str | None = None) -> dict[str, Any]:
    """Queue and execution times, retry rate, error shares, time to recovery per job, runs
    by state, for the runs created since ``since`` (``7d`` by default)."""
    from cadenza.services.stats import stats

    web = context(request)
    try:
        return web.answer(stats(web.store, web.clock, since).as_json())  # type: ignore[return-value]
    except InvalidRequest as exc:
        raise InvalidRequest(str(exc).replace("--since", "since")) from None
