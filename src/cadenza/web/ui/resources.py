"""The resources pages (docs/ui.md "Pages: operations"): one card per pool,
one row per member (state, score, latency, egress region, cooldown, holder run, the last
probes as a sparkline), a member's health history, and the operators' Probe, Enable and
Disable. Everything comes from :class:`~cadenza.services.resources.ResourceService` and
:class:`~cadenza.services.probe.ProbeService`, the services of ``/api/resources``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from cadenza.services import Services
from cadenza.services.probe import ProbeService
from cadenza.services.resources import ProbePoint, ResourceView
from cadenza.web.auth import services_for
from cadenza.web.ui.auth import PageOperator, PageViewer
from cadenza.web.ui.render import is_htmx, render

router = APIRouter(include_in_schema=False)
SPARK_W, SPARK_H = 64.0, 18.0


@dataclass(frozen=True)
class Spark:
    """A sparkline drawn server-side as SVG attributes (no style attribute, no script):
    the score of each probe as a polyline, failed probes as dots."""

    points: str
    fails: tuple[tuple[float, float], ...]
    title: str


def sparkline(points: Sequence[ProbePoint]) -> Spark | None:
    """The :class:`Spark` of some probes (oldest first), None without any."""
    if not points:
        return None
    step = SPARK_W / max(1, len(points) - 1)
    coords: list[tuple[float, float]] = []
    fails: list[tuple[float, float]] = []
    for i, point in enumerate(points):
        score = 0.0 if point.score is None else max(0.0, min(100.0, point.score))
        xy = (round(i * step, 1), round(SPARK_H - 1 - score / 100 * (SPARK_H - 2), 1))
        coords.append(xy)
        if not point.ok:
            fails.append(xy)
    if len(coords) == 1:
        coords.append((SPARK_W, coords[0][1]))
    scores = ", ".join("—" if p.score is None else f"{p.score:g}" for p in points)
    return Spark(" ".join(f"{x},{y}" for x, y in coords), tuple(fails), scores)


def pools_view(services: Services) -> dict[str, Any]:
    """What the pools fragment shows: the pools of cadenza.toml with their members (two
    reads: the members, the latest health checks)."""
    settings = services.config().settings
    members = services.resources.list()
    probes = services.resources.probes()
    by_pool: dict[str, list[ResourceView]] = {name: [] for name in settings.pools}
    for member in members:
        by_pool.setdefault(member.pool, []).append(member)
    pools = []
    for name, rows in by_pool.items():
        pool = settings.pools.get(name)
        health = getattr(pool, "health", None)
        counts: dict[str, int] = {}
        for row in rows:
            counts[row.state.value] = counts.get(row.state.value, 0) + 1
        pools.append({"name": name, "kind": getattr(pool, "kind", rows[0].kind if rows else ""),
                      "threshold": getattr(health, "threshold", 50) if health else 50,
                      "members": rows, "counts": sorted(counts.items())})
    sparks = {rid: sparkline(points) for rid, points in probes.items()}
    return {"pools": pools, "sparks": sparks}


@router.get("/resources", response_class=HTMLResponse)
def resources_page(me: PageViewer, request: Request) -> HTMLResponse:
    """Every pool as a card; an htmx request (the 10 s refresh) gets the cards only."""
    with services_for(request, me) as services:
        values = pools_view(services)
    if is_htmx(request):
        return render(request, "ui/_resources_pools.html", values, me=me)
    return render(request, "ui/resources_list.html", values, me=me, nav="resources")


@router.get("/resources/{resource_id}", response_class=HTMLResponse)
def resource_page(resource_id: str, me: PageViewer, request: Request) -> HTMLResponse:
    """One member: its figures, its health history (events) and its probes as a chart."""
    with services_for(request, me) as services:
        detail = services.resources.show(resource_id)
        points = services.resources.probes(per_member=60, resource_id=resource_id)
    probes = points.get(resource_id, [])
    chart = {"x": [int(p.at.timestamp()) for p in probes],
             "series": [{"label": "score", "values": [p.score for p in probes]},
                        {"label": "latency ms", "values": [p.latency_ms for p in probes]}]}
    return render(request, "ui/resources_detail.html",
                  {"detail": detail, "r": detail.view, "probes": probes, "chart": chart,
                   "spark": sparkline(probes[-12:])}, me=me, nav="resources")


def _answer(request: Request, me: Any, resource_id: str, message: str,
            ok: bool = True) -> Response:
    """After an action: the pools cards and a message (from the list), or back to the
    member's page (from its page)."""
    if request.headers.get("hx-target") != "pools":
        return Response(status_code=200, headers={"HX-Redirect": f"/resources/{resource_id}"})
    with services_for(request, me) as services:
        values = pools_view(services)
    return render(request, "ui/_resources_pools.html",
                  {**values, "notice": message, "notice_ok": ok}, me=me)


@router.post("/resources/{resource_id}/probe", response_class=HTMLResponse)
def probe(resource_id: str, me: PageOperator, request: Request) -> Response:
    """Probe a route now and record it (the state moves as a scheduled probe's would)."""
    with services_for(request, me) as services:
        report = ProbeService(services).probe(resource_id)
    if report.ok:
        text = f"{resource_id}: probe passed, score {report.score:g}" \
            if report.score is not None else f"{resource_id}: probe passed"
    else:
        text = f"{resource_id}: probe failed ({report.error_type}: {report.error})"
    if report.before is not report.after:
        text += f"; {report.before.value} → {report.after.value}"
    return _answer(request, me, resource_id, text, report.ok)


@router.post("/resources/{resource_id}/enable", response_class=HTMLResponse)
def enable(resource_id: str, me: PageOperator, request: Request) -> Response:
    """DISABLED or FAULT → AVAILABLE (the event names the user)."""
    with services_for(request, me) as services:
        view = services.resources.enable(resource_id)
    return _answer(request, me, resource_id, f"{resource_id} is {view.state.value}")


@router.post("/resources/{resource_id}/disable", response_class=HTMLResponse)
def disable(resource_id: str, me: PageOperator, request: Request) -> Response:
    """Any state → DISABLED; a held member stays with its run until the run ends."""
    with services_for(request, me) as services:
        view = services.resources.disable(resource_id)
    return _answer(request, me, resource_id, f"{resource_id} is {view.state.value}")
