"""The audit log and the notifications log (docs/ui.md "Pages: operations").

``/audit`` lists the events newest first with filters kept in the URL (type, run,
resource, actor, since) and keyset pages (``before``/``after`` an event id, never an
offset); each event's message and details are redacted at write time, escaped here.
``/notifications`` lists the deliveries and, for admins, each configured channel with a
"Send test" button (the channel test service of ``POST /api/channels/{channel}/test``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse

from cadenza.domain.events import EventType
from cadenza.services.errors import InvalidRequest
from cadenza.services.history import EventQuery, EventView, HistoryService
from cadenza.services.notifications import STATES
from cadenza.web.auth import context, services_for
from cadenza.web.limits import MAX_ID
from cadenza.web.ui.auth import PageAdmin, PageViewer
from cadenza.web.ui.render import render

router = APIRouter(include_in_schema=False)
PAGE = 50
FILTERS = ("type", "run", "resource", "actor", "since")


def _history(request: Request) -> HistoryService:
    web = context(request)
    store = web.store
    return HistoryService(lambda: store, web.clock)


def _details(event: EventView) -> str | None:
    """An event's payload as indented JSON (already redacted when it was written)."""
    if event.payload in (None, {}, []):
        return None
    return json.dumps(event.payload, indent=2, sort_keys=True, default=str)


@router.get("/audit", response_class=HTMLResponse)
def audit_page(
    me: PageViewer, request: Request,
    type: Annotated[str | None, Query(max_length=64)] = None,
    run: Annotated[str | None, Query(max_length=64)] = None,
    resource: Annotated[str | None, Query(max_length=200)] = None,
    actor: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[str | None, Query(max_length=64)] = None,
    before: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
) -> HTMLResponse:
    """The audit log, newest first, one keyset page of :data:`PAGE` events."""
    given = {"type": type, "run": run, "resource": resource, "actor": actor, "since": since}
    given = {k: v.strip() for k, v in given.items() if v and v.strip()}
    base = EventQuery(run=given.get("run"), resource=given.get("resource"),
                      type=given.get("type"), since=given.get("since"),
                      actor=given.get("actor"), limit=PAGE + 1)
    history = _history(request)
    try:
        if after is not None:  # the newer page: read upwards, show newest first
            rows = history.events(_replace(base, after=after))
            newer_more = len(rows) > PAGE
            rows = rows[:PAGE][::-1]
            older_more = True
        else:
            rows = history.events(_replace(base, before=before, newest_first=True))
            older_more = len(rows) > PAGE
            rows = rows[:PAGE]
            newer_more = before is not None
    except InvalidRequest as exc:
        raise InvalidRequest(str(exc).replace("--since", "since")) from None
    events = [{"e": e, "details": _details(e)} for e in rows]
    return render(request, "ui/audit_list.html", {
        "events": events, "filters": given, "types": [t.value for t in EventType],
        "older": rows[-1].id if rows and older_more else None,
        "newer": rows[0].id if rows and newer_more else None,
    }, me=me, nav="audit")


def _replace(query: EventQuery, *, after: int | None = None, before: int | None = None,
             newest_first: bool = False) -> EventQuery:
    """``query`` with a keyset cursor: ``after`` an id (oldest first) or ``before`` one."""
    from dataclasses import replace

    return replace(query, after=after, before=before, newest_first=newest_first)


@router.get("/notifications", response_class=HTMLResponse)
def notifications_page(
    me: PageViewer, request: Request,
    state: Annotated[str | None, Query(max_length=16)] = None,
    run: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    """The deliveries, newest first; admins also get each channel with "Send test"."""
    state = state.strip().upper() if state and state.strip() else None
    run = run.strip() if run and run.strip() else None
    with services_for(request, me) as services:
        rows = services.notifications.list(run=run, state=state, limit=200)
        channels: list[dict[str, Any]] = []
        if me.allows("admin"):
            channels = [{"name": name, "type": channel.type}
                        for name, channel in sorted(services.config().settings
                                                    .channels.items())]
    return render(request, "ui/audit_notifications.html", {
        "rows": rows, "channels": channels, "states": STATES,
        "filters": {"state": state or "", "run": run or ""}}, me=me, nav="audit")


@router.post("/notifications/channels/{channel}/test", response_class=HTMLResponse)
def send_test(channel: str, me: PageAdmin, request: Request,
              to: Annotated[str, Form(max_length=2000)] = "") -> HTMLResponse:
    """Send the test message through ``channel`` (to ``to``: addresses, ``user:X`` or
    ``role:X``, separated by commas or spaces); each delivery's outcome in a message, and
    the delivery log swapped anew (out of band)."""
    recipients = [part for part in to.replace(",", " ").split() if part]
    with services_for(request, me) as services:
        sent = services.notifications.test(channel, recipients)
        rows = services.notifications.list(limit=200)
    return render(request, "ui/_audit_test_result.html",
                  {"channel": channel, "sent": sent, "rows": rows}, me=me)
