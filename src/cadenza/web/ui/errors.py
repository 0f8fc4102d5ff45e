"""Errors on pages: the API's handlers (:mod:`cadenza.web.api.errors`) call
:func:`page_error` for every path that is not the API's, so a page shows an HTML page and
an htmx action a message in the page's ``#flash`` area, with the same words as the API
and the CLI (located ``file:line:col`` problems included)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from cadenza.web.ui.render import N_, is_htmx, render

if TYPE_CHECKING:
    from cadenza.services.auth import Principal

TITLES = {400: N_("Bad request"), 401: N_("Log in"), 403: N_("Not allowed"),
          404: N_("Not found"), 405: N_("Not allowed"), 409: N_("Conflict"),
          413: N_("Too large"), 422: N_("Invalid input"), 429: N_("Too many attempts"),
          503: N_("Unavailable")}


def is_page_path(path: str) -> bool:
    """True for the pages' paths (everything but the API, /metrics and static files)."""
    return not (path.startswith("/api/") or path == "/api" or path == "/metrics"
                or path.startswith("/static/"))


def page_error(request: Request, status: int, message: str,
               problems: Sequence[Mapping[str, Any]] = (),
               headers: Mapping[str, str] | None = None) -> Response:
    """The HTML answer of an error on a page (the message already redacted)."""
    from cadenza.web.ui.session import login_page

    current = request.headers.get("hx-current-url", "")
    if status == 401:
        if is_htmx(request):
            from urllib.parse import quote, urlsplit

            back = urlsplit(current)
            target = (back.path or "/jobs") + (f"?{back.query}" if back.query else "")
            return Response(status_code=401,
                            headers={"HX-Redirect": f"/login?next={quote(target, safe='/')}"})
        query = f"?{request.url.query}" if request.url.query else ""
        return login_page(request, next_path=request.url.path + query, status=401)
    values = {"status": status, "title": TITLES.get(status, N_("Error")), "message": message,
              "problems": list(problems)}
    if is_htmx(request):
        extra = {"HX-Retarget": "#flash", "HX-Reswap": "innerHTML"}
        return render(request, "ui/_flash.html", {**values, "kind": "error"}, status=status,
                      headers={**dict(headers or {}), **extra})
    answer: HTMLResponse = render(request, "ui/error.html", values, status=status,
                                  headers=headers, me=_reader(request))
    return answer


def _reader(request: Request) -> Principal | None:
    """Who reads the error page, if they have a session (for the top bar), else None."""
    from cadenza.services.auth import AuthService
    from cadenza.web.auth import SESSION_COOKIE, context

    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return None
    try:
        web = context(request)
        return AuthService(web.store, web.clock).session(cookie)
    except Exception:
        return None
