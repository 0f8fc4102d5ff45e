"""``/api/resources`` (the pools' members, docs/pools.md) and ``/api/notifications`` (the
delivery log and a channel's test message, docs/notifications.md): thin shells over
:class:`~cadenza.services.resources.ResourceService`,
:class:`~cadenza.services.probe.ProbeService` and
:class:`~cadenza.services.notifications.NotificationService`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi import Path as FastPath
from pydantic import BaseModel, Field

from cadenza.services.probe import ProbeService
from cadenza.web.api.errors import ERROR_RESPONSES
from cadenza.web.auth import AsAdmin, AsOperator, AsViewer, context, services_for

router = APIRouter(prefix="/api", tags=["resources"], responses=ERROR_RESPONSES)


class Reason(BaseModel):
    """Why an operator enables or disables a member (kept in its event)."""

    reason: str | None = Field(None, max_length=500)


class TestMessage(BaseModel):
    """Where a channel's test message goes: addresses, ``user:X``, ``role:X`` (a webhook
    needs none)."""

    to: list[str] = Field(default_factory=list, max_length=50)


@router.get("/resources")
def list_resources(principal: AsViewer, request: Request,
                   pool: str | None = None) -> dict[str, Any]:
    """Every member (of ``pool``): state, score, latency, cooldown, holder run, region."""
    with services_for(request, principal) as services:
        return context(request).answer(  # type: ignore[return-value]  # the same JSON
            {"resources": [r.as_json() for r in services.resources.list(pool)]})


@router.get("/resources/{resource_id}")
def get_resource(resource_id: str, principal: AsViewer, request: Request) -> dict[str, Any]:
    """One member with its health figures and its latest events."""
    with services_for(request, principal) as services:
        return context(request).answer(  # type: ignore[return-value]  # the same JSON
            services.resources.show(resource_id).as_json())


@router.post("/resources/{resource_id}/probe")
def probe_resource(resource_id: str, principal: AsOperator,
                   request: Request) -> dict[str, Any]:
    """Probe a route now (connect, probe URL, egress region) and record it; 422 for a member
    that is not a route."""
    with services_for(request, principal) as services:
        return ProbeService(services).probe(resource_id).as_json()


@router.post("/resources/{resource_id}/enable")
def enable_resource(resource_id: str, principal: AsOperator, request: Request,
                    body: Reason | None = None) -> dict[str, Any]:
    """DISABLED or FAULT -> AVAILABLE (409 from another state); the event names the user."""
    with services_for(request, principal) as services:
        return services.resources.enable(resource_id, body.reason if body else None).as_json()


@router.post("/resources/{resource_id}/disable")
def disable_resource(resource_id: str, principal: AsOperator, request: Request,
                     body: Reason | None = None) -> dict[str, Any]:
    """Any state -> DISABLED (409 when it is already); a held member stays with its run
    until the run ends."""
    with services_for(request, principal) as services:
        return services.resources.disable(resource_id, body.reason if body else None).as_json()


@router.get("/notifications")
def list_notifications(principal: AsViewer, request: Request, run: str | None = None,
                       state: str | None = None,
                       limit: int = Query(100, ge=1, le=500)) -> dict[str, Any]:
    """Deliveries, newest first (``state``: SENT or FAILED), with the error of a failed one."""
    with services_for(request, principal) as services:
        rows = services.notifications.list(run=run, state=state, limit=limit)
        return context(request).answer(  # type: ignore[return-value]  # the same JSON
            {"notifications": [r.as_json() for r in rows]})


@router.post("/channels/{channel}/test")
def test_channel(channel: str, principal: AsAdmin, request: Request,
                 body: TestMessage | None = None) -> dict[str, Any]:
    """Send the test message through ``channel`` and record each delivery (SENT or FAILED
    with the reason)."""
    with services_for(request, principal) as services:
        sent = services.notifications.test(channel, body.to if body else ())
        return {"deliveries": [d.as_json() for d in sent]}


@router.get("/calendars", tags=["calendars"])
def list_calendars(principal: AsViewer, request: Request) -> list[dict[str, Any]]:
    """The business calendars of cadenza.toml: country, subdivision, weekly rest days and
    how many days off and working days the home adds."""
    with services_for(request, principal) as services:
        return [c.as_json() for c in services.calendars.list()]


@router.get("/calendars/{name}", tags=["calendars"])
def show_calendar(principal: AsViewer, request: Request, name: str,
                  year: int = Query(..., ge=1900, le=2200),
                  language: str | None = Query(None, pattern=r"^(en|fr|zh_Hans)$")
                  ) -> dict[str, Any]:
    """The days off (public holidays, the home's closing days) and extra working days
    (make-up days) of ``year``, named in ``language`` (default: the calendar's own)."""
    with services_for(request, principal) as services:
        return services.calendars.show(name, year, language).as_json()


GroupId = Annotated[int, FastPath(ge=1, le=2**62, description="An alert group's id.")]


class SnoozeBody(BaseModel):
    """How long to snooze an alert group: an hour, or until ``[alerts] morning``."""

    until: Literal["1h", "morning"] = "1h"


@router.get("/alerts", tags=["alerts"])
def list_alerts(principal: AsViewer, request: Request) -> list[dict[str, Any]]:
    """Alert groups (repeated failures of a job with one error class): open ones first,
    then the latest closed ones."""
    with services_for(request, principal) as services:
        now = services.clock.now()
        return [g.as_json(now) for g in services.alerts.list()]


@router.post("/alerts/{group_id}/ack", tags=["alerts"])
def acknowledge_alert(principal: AsOperator, request: Request,
                      group_id: GroupId) -> dict[str, Any]:
    """Acknowledge: no more reminders; the recovery is still said."""
    with services_for(request, principal) as services:
        return services.alerts.acknowledge(group_id).as_json(services.clock.now())


@router.post("/alerts/{group_id}/snooze", tags=["alerts"])
def snooze_alert(principal: AsOperator, request: Request, group_id: GroupId,
                 body: SnoozeBody) -> dict[str, Any]:
    """Mute the group's reminders for an hour or until the morning (failures still count)."""
    with services_for(request, principal) as services:
        return services.alerts.snooze(group_id, body.until).as_json(services.clock.now())


@router.get("/scheduling", tags=["scheduling"])
def scheduling_status(principal: AsViewer, request: Request) -> dict[str, Any]:
    """Whether scheduling is paused: ``{"paused": false}`` or since when and by whom."""
    with services_for(request, principal) as services:
        found = services.scheduling.status()
        return found.as_json() if found is not None else {"paused": False}


@router.post("/scheduling/pause", tags=["scheduling"])
def pause_scheduling(principal: AsOperator, request: Request) -> dict[str, Any]:
    """Pause scheduling for the whole home: fires due while paused are recorded MISSED with
    who paused them; runs started by hand still run."""
    with services_for(request, principal) as services:
        return services.scheduling.pause().as_json()


@router.post("/scheduling/resume", tags=["scheduling"])
def resume_scheduling(principal: AsOperator, request: Request) -> dict[str, Any]:
    """Resume scheduling."""
    with services_for(request, principal) as services:
        services.scheduling.resume()
        return {"paused": False}
