"""Pause and resume scheduling from the pages (the jobs list and the dashboard show a banner
while it is paused; docs/scheduling.md "Pausing scheduling")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from cadenza.store.desktop import Pause, SchedulingPauses
from cadenza.web.auth import context, services_for
from cadenza.web.ui.auth import PageOperator
from cadenza.web.ui.session import safe_next

router = APIRouter(include_in_schema=False)


def current_pause(request: Request) -> Pause | None:
    """The pause in force, for a page's banner (one SELECT)."""
    return SchedulingPauses(context(request).store).current()


def _back(next_path: str) -> Response:
    return Response(status_code=200, headers={"HX-Redirect": safe_next(next_path)})


@router.post("/scheduling/pause")
def pause(me: PageOperator, request: Request,
          next: Annotated[str, Form(max_length=2000)] = "/dashboard") -> Response:
    """Pause scheduling for the whole home; back to the page."""
    with services_for(request, me) as services:
        services.scheduling.pause()
    return _back(next)


@router.post("/scheduling/resume")
def resume(me: PageOperator, request: Request,
           next: Annotated[str, Form(max_length=2000)] = "/dashboard") -> Response:
    """Resume scheduling; back to the page."""
    with services_for(request, me) as services:
        services.scheduling.resume()
    return _back(next)
