"""The HTTP application: ``/api/health`` (no auth, exact path) and the REST API
(:mod:`cadenza.web.api`, docs/api.md), a thin shell over :mod:`cadenza.services`. Every
route but the health check and the login needs a session or a bearer token
(:mod:`cadenza.web.auth`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from ipaddress import ip_network
from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse

import cadenza
from cadenza.services.health import NodeStatus, check_health
from cadenza.store import Store
from cadenza.web.access import AccessLog
from cadenza.web.auth import AsViewer, WebContext
from cadenza.web.headers import SecurityHeaders
from cadenza.web.limits import BodyLimit, NulGuard
from cadenza.web.redacting import redacting_response

if TYPE_CHECKING:
    from cadenza.home import Home

ALLOWED_WITHOUT_AUTH = frozenset({("GET", "/api/health"), ("POST", "/api/login"),
                                  ("GET", "/login"), ("POST", "/login"),
                                  ("POST", "/language"), ("GET", "/desktop/enter"),
                                  ("GET", "/alerts/link/{token}"),
                                  ("POST", "/alerts/link/{token}")})
"""The only (method, path) pairs that answer without a session or token (docs/api.md), besides
the static files under ``/static`` (vendored scripts and styles, no data). The one-use links
of alert e-mails carry their own permission: a random token, spent once, expiring, that
snoozes or acknowledges one alert and nothing else (a foreign ``Origin`` is refused). The
desktop window's ``/desktop/enter`` carries a one-time ticket of the computer's own user,
accepted from the loopback only."""


def create_app(store: Store, *, home: Home | None = None,
               reload: Callable[[], object] | None = None,
               metrics_allow: Sequence[str] = (), language: str | None = None,
               node_status: Callable[[], NodeStatus] | None = None) -> FastAPI:
    """Build the app around an open store (the caller owns and closes it). ``home`` gives
    the configuration the API acts on (without one, only reads of the store work);
    ``reload`` applies a changed jobs.toml (a running node's reload); ``metrics_allow``:
    addresses and networks that may read ``/metrics`` without a token; ``language``: the
    pages' language when the reader chose none (``[server] language``); ``node_status``:
    what the node serving it says of itself (its clock's skew, its leadership), for
    ``/api/health`` and ``/metrics``."""
    from cadenza.web import api, ui

    answer_class = redacting_response(home)
    app = FastAPI(
        title="Cadenza",
        version=cadenza.__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served below, behind a login like every route
        default_response_class=answer_class,
    )

    @app.get("/api/health")
    def health() -> JSONResponse:
        """Liveness, store reachability and whether the store's writes work; needs no
        login. HTTP 503 with ``"status": "degraded"`` and a ``reason`` when not
        (docs/serve.md)."""
        health = check_health(store, node_status() if node_status is not None else None)
        return JSONResponse(health.as_json(), status_code=200 if health.ok else 503)

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi(principal: AsViewer) -> JSONResponse:
        """The OpenAPI document of this API (needs a login or token, like every route)."""
        return JSONResponse(app.openapi())

    app.state.cadenza = WebContext(store, home, store.clock, reload,
                                   answer_class=answer_class)
    app.state.cadenza.metrics_allow = tuple(ip_network(n, strict=False) for n in metrics_allow)
    app.state.cadenza.language = language
    app.state.cadenza.node_status = node_status
    api.install(app)
    ui.install(app)
    _hot_first(app, [api.runs.router, ui.runs.router])
    app.add_middleware(BodyLimit)
    app.add_middleware(NulGuard)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(AccessLog, clock=store.clock, home=home)  # outermost: logs a 413 too
    return app


def _hot_first(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Move the included ``routers`` (the runs' API and page, the most requested) to just
    after the first routes: the router tries routes in order, so a route placed after some
    50 others pays for all of them on every request. Safe as long as no path of theirs can
    be matched by a route they now pass (no route before them has a path parameter in its
    first segment; the test ``tests/unit/web/test_route_order.py`` checks it)."""
    routes = app.router.routes
    hot = [r for r in routes if getattr(r, "original_router", None) in routers]
    rest = [r for r in routes if r not in hot]
    first = next((k for k, r in enumerate(rest) if hasattr(r, "original_router")), 0)
    routes[:] = rest[:first] + hot + rest[first:]
