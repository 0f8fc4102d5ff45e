"""The alerts page and the one-use links of alert e-mails (docs/notifications.md "Repeated
failures"): the open alert groups with Acknowledge and Snooze for operators, and
``/alerts/link/TOKEN``, which needs no login: a GET shows what the link does (a mail scanner
that opens it spends nothing), the button's POST does it, once."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from cadenza.services import Refused
from cadenza.services.auth import Principal
from cadenza.web.api.resources import GroupId
from cadenza.web.auth import check_origin, context, services_for, services_for_link
from cadenza.web.ui.auth import PageOperator, PageViewer
from cadenza.web.ui.render import render

router = APIRouter(include_in_schema=False)


def _page(request: Request, me: Principal, notice: str | None = None,
          ok: bool = True) -> HTMLResponse:
    with services_for(request, me) as services:
        groups = services.alerts.list()
    now = context(request).clock.now()
    return render(request, "ui/alerts_page.html",
                  {"groups": groups, "now": now, "notice": notice, "notice_ok": ok},
                  me=me, nav="dashboard")


@router.get("/alerts", response_class=HTMLResponse)
def alerts_page(me: PageViewer, request: Request) -> HTMLResponse:
    """Open alert groups first (failures counted, snoozed or acknowledged), then recent
    closed ones."""
    return _page(request, me)


@router.post("/alerts/{group_id}/ack", response_class=HTMLResponse)
def acknowledge(group_id: GroupId, me: PageOperator, request: Request) -> HTMLResponse:
    """Acknowledge: no more reminders; the recovery is still said."""
    with services_for(request, me) as services:
        group = services.alerts.acknowledge(group_id)
    return _page(request, me, f"{group.job_id}: acknowledged by {group.acked_by}")


@router.post("/alerts/{group_id}/snooze/{how}", response_class=HTMLResponse)
def snooze(group_id: GroupId, how: Literal["1h", "morning"], me: PageOperator,
           request: Request) -> HTMLResponse:
    """Snooze for an hour or until the morning."""
    with services_for(request, me) as services:
        group = services.alerts.snooze(group_id, how)
    until = group.snoozed_until.isoformat() if group.snoozed_until else ""
    return _page(request, me, f"{group.job_id}: snoozed until {until}")


@router.get("/alerts/link/{token}", response_class=HTMLResponse)
def link_page(token: str, request: Request) -> HTMLResponse:
    """What the link does, and a button that does it (no login)."""
    with services_for_link(request) as services:
        view = services.alerts.link(token)
        until = services.alerts.snooze_until(view.group, "1h" if view.action == "snooze_1h"
                                             else "morning") \
            if view.group is not None and view.action != "ack" else None
    return render(request, "ui/alert_link.html",
                  {"view": view, "token": token, "until": until, "done": None},
                  status=200 if view.state == "ok" else 410)


@router.post("/alerts/link/{token}", response_class=HTMLResponse)
def use_link(token: str, request: Request) -> Response:
    """Do what the link says, once; a used or expired link says so (410)."""
    check_origin(request)
    with services_for_link(request) as services:
        try:
            group = services.alerts.use_link(token)
        except Refused as exc:
            view = services.alerts.link(token)
            return render(request, "ui/alert_link.html",
                          {"view": view, "token": token, "until": None, "done": None,
                           "refused": str(exc)}, status=410)
        view = services.alerts.link(token)
    return render(request, "ui/alert_link.html",
                  {"view": view, "token": token, "until": group.snoozed_until,
                   "done": group})
