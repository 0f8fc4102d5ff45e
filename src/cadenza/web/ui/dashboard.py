"""The dashboard (SPEC §16–§17, issue 16 item 10): queue time, execution time, resource
utilization per pool, retry rate, resources cooling down, error share by class and step
type, mean time from failure to recovery per job; charts over 24 h or 7 d (``window`` in
the URL) drawn by uPlot through the ``data-chart`` convention of cadenza.js.

The figures come from the stats service of ``/api/stats`` (:func:`cadenza.services.stats.
stats`), its buckets (:func:`~cadenza.services.stats.series`) and the resources service."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from cadenza.domain.states import ResourceState
from cadenza.services.stats import series, stats
from cadenza.web.auth import context, services_for
from cadenza.web.ui.auth import PageViewer
from cadenza.web.ui.render import render

router = APIRouter(include_in_schema=False)
WINDOWS = ("24h", "7d")


def _shares(counts: dict[str, float]) -> list[tuple[str, float]]:
    """A share map sorted largest first."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


@router.get("/dashboard", response_class=HTMLResponse)
def dashboard_page(me: PageViewer, request: Request,
                   window: Annotated[Literal["24h", "7d"], Query()] = "24h") -> HTMLResponse:
    """The §17 figures over ``window`` with their charts."""
    web = context(request)
    figures = stats(web.store, web.clock, window)
    buckets = series(web.store, web.clock, window)
    with services_for(request, me) as services:
        members = services.resources.list()
        utilization = services.resources.utilization(figures.since, members=members)
    cooling = [m for m in members if m.state is ResourceState.COOLDOWN]
    document: dict[str, Any] = figures.as_json()
    runs_chart = {"bars": True, "ylabel": "runs", "x": buckets.x,
                  "series": [{"label": "succeeded", "values": buckets.succeeded},
                             {"label": "failed", "values": buckets.failed}]}
    times_chart = {"ylabel": "seconds", "x": buckets.x,
                   "series": [{"label": "queue time (mean)", "values": buckets.queue_mean},
                              {"label": "execution time (mean)",
                               "values": buckets.execution_mean}]}
    return render(request, "ui/dashboard_page.html", {
        "window": window, "windows": WINDOWS, "s": figures, "doc": document,
        "runs_chart": runs_chart, "times_chart": times_chart,
        "utilization": sorted(utilization.items()), "cooling": cooling,
        "pools_count": len({m.pool for m in members}),
        "by_class": _shares(document["error_share_by_class"]),
        "by_type": _shares(document["error_share_by_step_type"]),
        "recovery": sorted(figures.recovery_by_job.items()),
        "by_job": sorted(figures.execution_by_job.items(),
                         key=lambda item: -(item[1].mean or 0.0))[:15],
        "total_runs": sum(figures.runs_by_state.values()),
    }, me=me, nav="dashboard")
