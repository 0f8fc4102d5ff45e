"""``/api/docs``: the API reference (docs/api.md), drawn in the browser by Swagger UI from
``/api/openapi.json``. Everything it needs is served from ``/static`` (vendored Swagger UI
and its licence, ``static/api_docs.js`` to start it): it works offline, and under the
Content-Security-Policy (no inline script, no other host). FastAPI's own docs page loads
its scripts from a CDN with an inline script; the app turns it off (``docs_url=None``).
Like every route, it needs a login; "Try it out" sends requests with that session.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from cadenza.web.ui.auth import PageViewer
from cadenza.web.ui.render import render

router = APIRouter(include_in_schema=False)

SPEC_URL = "/api/openapi.json"


@router.get("/api/docs", response_class=HTMLResponse)
def api_docs(me: PageViewer, request: Request) -> HTMLResponse:
    """The interactive API reference."""
    return render(request, "ui/api_docs.html", {"spec_url": SPEC_URL}, me=me)
