"""The web UI (docs/ui.md): server-rendered pages (Jinja2 + htmx, no build
step) over the same service layer and sessions as the API. Every asset is served from
``/static`` (vendored, with its licence); the CSP allows no inline script or style."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from cadenza.web.ui import (
    admin,
    alerts,
    api_docs,
    audit,
    dashboard,
    editor,
    jobs,
    resources,
    runs,
    scheduling,
    session,
)
from cadenza.web.ui.auth import LoginRequired, PageViewer
from cadenza.web.ui.errors import page_error
from cadenza.web.ui.render import STATIC


def install(app: FastAPI) -> None:
    """Add the pages, their error pages and ``/static`` to ``app``."""

    async def login_required(request: Request, exc: Exception) -> Response:
        return page_error(request, 401, "log in first")

    app.add_exception_handler(LoginRequired, login_required)
    app.state.page_error = page_error

    @app.get("/", include_in_schema=False)
    def home(me: PageViewer) -> RedirectResponse:
        """The start page: the jobs catalogue."""
        return RedirectResponse("/jobs", status_code=303)

    app.include_router(session.router)
    app.include_router(editor.router)  # before /jobs/{job_id}: /jobs/new is the editor's
    app.include_router(jobs.router)
    app.include_router(runs.router)
    app.include_router(resources.router)
    app.include_router(audit.router)
    app.include_router(dashboard.router)
    app.include_router(alerts.router)
    app.include_router(scheduling.router)
    app.include_router(admin.router)
    app.include_router(api_docs.router)  # /api/docs, FastAPI's CDN page being off
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
