"""The dashboard (docs/ui.md "Pages: operations"): queue time, execution time, resource
utilization per pool, retry rate, resources cooling down, error share by class and step
type, mean time from failure to recovery per job; charts over 24 h or 7 d (``window`` in
the URL) drawn by uPlot through the ``data-chart`` convention of cadenza.js.

The figures come from the stats service of ``/api/stats`` (:func:`cadenza.services.stats.
stats`), its buckets (:func:`~cadenza.services.stats.series`) and the resources service.
The stats service reads every run of the window, which takes seconds on a busy week: the
figures of a window are kept :data:`FRESH` for every reader of this process (the page says
as of when); the resources cooling down are read at each view."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from cadenza.domain.states import ResourceState
from cadenza.services import Services
from cadenza.services.resources import ResourceView
from cadenza.services.stats import series, stats
from cadenza.web.auth import context, services_for
from cadenza.web.ui.auth import PageViewer
from cadenza.web.ui.render import render
from cadenza.web.ui.scheduling import current_pause

router = APIRouter(include_in_schema=False)
WINDOWS = ("24h", "7d")
FRESH = timedelta(seconds=30)
"""How long the figures of a window are shown again before they are read anew."""


def _shares(counts: dict[str, float]) -> list[tuple[str, float]]:
    """A share map sorted largest first."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


@router.get("/dashboard", response_class=HTMLResponse)
def dashboard_page(me: PageViewer, request: Request,
                   window: Annotated[Literal["24h", "7d"], Query()] = "24h") -> HTMLResponse:
    """The §17 figures over ``window`` with their charts."""
    web = context(request)
    with services_for(request, me) as services:
        members = services.resources.list()
        figures_of = _figures(request, window, services, members)
        from cadenza.store.outbox import Outbox

        now = web.clock.now()
        failing = Outbox(web.store).failing_channels(now - timedelta(hours=24))
        alerts = [g for g in services.alerts.list() if g.closed_at is None]
    cooling = [m for m in members if m.state is ResourceState.COOLDOWN]
    return render(request, "ui/dashboard_page.html", {
        **figures_of, "window": window, "windows": WINDOWS, "cooling": cooling,
        "failing_channels": failing, "alerts": alerts, "now": now,
        "paused": current_pause(request)}, me=me, nav="dashboard")


def _figures(request: Request, window: str, services: Services,
             members: list[ResourceView]) -> dict[str, Any]:
    """The window's figures and charts, read anew when older than :data:`FRESH`."""
    web = context(request)
    now = web.clock.now()
    cache: dict[str, tuple[datetime, dict[str, Any]]] = \
        request.app.state.__dict__.setdefault("cadenza_dashboard", {})
    kept = cache.get(window)
    if kept is not None and timedelta(0) <= now - kept[0] < FRESH:
        return kept[1]
    figures = stats(web.store, web.clock, window)
    buckets = series(web.store, web.clock, window)
    utilization = services.resources.utilization(figures.since, members=members)
    document: dict[str, Any] = figures.as_json()
    runs_chart = {"bars": True, "ylabel": "runs", "x": buckets.x,
                  "series": [{"label": "succeeded", "values": buckets.succeeded},
                             {"label": "failed", "values": buckets.failed}]}
    times_chart = {"ylabel": "seconds", "x": buckets.x,
                   "series": [{"label": "queue time (mean)", "values": buckets.queue_mean},
                              {"label": "execution time (mean)",
                               "values": buckets.execution_mean}]}
    values = {
        "s": figures, "doc": document, "as_of": now,
        "runs_chart": runs_chart, "times_chart": times_chart,
        "utilization": sorted(utilization.items()),
        "by_class": _shares(document["error_share_by_class"]),
        "by_type": _shares(document["error_share_by_step_type"]),
        "recovery": sorted(figures.recovery_by_job.items()),
        "by_job": sorted(figures.execution_by_job.items(),
                         key=lambda item: -(item[1].mean or 0.0))[:15],
        "total_runs": sum(figures.runs_by_state.values()),
    }
    cache[window] = (now, values)
    return values
