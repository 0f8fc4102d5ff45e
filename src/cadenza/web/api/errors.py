"""Errors as JSON: ``{"error": message, "field": ..., "problems": [...]}`` (docs/api.md).

The service layer's errors map to statuses once, here (docs/services.md): NotFound 404,
InvalidRequest 422, Refused 409, a write that did not happen 503, a stale jobs.toml 409,
an invalid configuration 422 with every problem located ``file:line:col`` (the messages of
``cadenza validate``). Messages go through the home's redactor: a secret never reaches a
response body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException

from cadenza.domain.errors import ConfigError, StaleConfigError, StoreError, WriteFailed
from cadenza.services.auth import Forbidden, Throttled, Unauthorized
from cadenza.services.errors import InvalidRequest, NotAHome, NotFound, Refused


class ErrorBody(BaseModel):
    """Every error's JSON: a message, and where it applies the field or located problems,
    or (a stale edit) the current hash and a diff."""

    model_config = ConfigDict(extra="allow")

    error: str
    field: str | None = None
    errors: list[dict[str, Any]] | None = None
    problems: list[dict[str, Any]] | None = None
    hash: str | None = None
    diff: str | None = None


_MEANINGS = {401: "no valid session or token", 403: "role too low, or CSRF/Origin refused",
             404: "no such object", 409: "not in this state, or a stale edit",
             422: "invalid input", 429: "too many failed logins",
             503: "the store or a file could not be written"}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in _MEANINGS.items()}
"""The error answers every route documents in the OpenAPI schema."""


def _redact(request: Request, text: str) -> str:
    web = getattr(request.app.state, "cadenza", None)
    home = getattr(web, "home", None)
    return home.redactor.redact_text(text) if home is not None else text


def error_body(request: Request, message: str, **extra: Any) -> dict[str, Any]:
    """The JSON of an error, its message redacted."""
    return {"error": _redact(request, message), **extra}


class StaleEdit(Exception):
    """A job edit based on an older jobs.toml: 409 with the current hash and a diff of
    what the edit would change in the current file."""

    def __init__(self, message: str, current_hash: str, diff: str) -> None:
        super().__init__(message)
        self.current_hash = current_hash
        self.diff = diff


_STATUS: list[tuple[type[Exception], int]] = [
    (Unauthorized, 401), (Forbidden, 403), (Throttled, 429), (NotFound, 404),
    (InvalidRequest, 422), (Refused, 409), (StaleConfigError, 409), (WriteFailed, 503),
    (StoreError, 503), (NotAHome, 503),
]


_NUL = "cannot contain NUL (0x00) bytes"
"""psycopg's words for a text with a NUL byte, which PostgreSQL refuses (SQLite keeps it)."""
NUL_MESSAGE = "a NUL byte is not allowed in text"


def _nul_cause(exc: BaseException) -> bool:
    """Whether ``exc`` comes of a text with a NUL byte given to PostgreSQL: the client's
    error (422), not the store's (503). The URL's are refused before the app
    (:class:`cadenza.web.limits.NulGuard`); this catches a body's (a login name, a reason)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if _NUL in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _not_json(request: Request, errors: Sequence[Any], body: bytes) -> str | None:
    """Why an API request's body was not read, when it came as another type than JSON
    (a form's ``text/plain`` or ``application/x-www-form-urlencoded``): the API reads JSON
    bodies only, whatever the text looks like. None otherwise (no body at all included)."""
    if not request.url.path.startswith("/api/") or not body.strip():
        return None
    if not any(tuple(e.get("loc", ())) == ("body",) for e in errors):
        return None
    given = request.headers.get("content-type", "")
    media = given.split(";", 1)[0].strip().lower()
    if media == "application/json" or (media.startswith("application/")
                                       and media.endswith("+json")):
        return None
    shown = f"Content-Type {media}" if media else "no Content-Type"
    return (f"the request body must be JSON sent with Content-Type: application/json "
            f"(got {shown}); it was not read")


def _page(request: Request, status: int, message: str, problems: list[dict[str, Any]] | None = None,
          headers: dict[str, str] | None = None) -> Response | None:
    """The HTML answer when the request is a page's (the UI installed ``page_error``), or
    None for the API's JSON."""
    page_error = getattr(request.app.state, "page_error", None)
    if page_error is None:
        return None
    from cadenza.web.ui.errors import is_page_path

    if not is_page_path(request.url.path):
        return None
    answer: Response = page_error(request, status, _redact(request, message), problems or (),
                                  headers)
    return answer


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    async def service_error(request: Request, exc: Exception) -> Response:
        if _nul_cause(exc):
            status, message = 422, NUL_MESSAGE
        else:
            status = next(code for kind, code in _STATUS if isinstance(exc, kind))
            message = str(exc)
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Throttled) \
            else None
        page = _page(request, status, message, headers=headers)
        if page is not None:
            return page
        return JSONResponse(error_body(request, message), status_code=status,
                            headers=headers)

    async def data_error(request: Request, exc: Exception) -> Response:
        """A database error no service turned into its own: a NUL byte is the client's
        (422); anything else is raised again (a 500, logged)."""
        if not _nul_cause(exc):
            raise exc
        page = _page(request, 422, NUL_MESSAGE)
        if page is not None:
            return page
        return JSONResponse(error_body(request, NUL_MESSAGE), status_code=422)

    async def config_error(request: Request, exc: Exception) -> Response:
        from cadenza.config.problems import Problem

        assert isinstance(exc, ConfigError)
        problems = [{"location": f"{p.file}:{p.line}:{p.col}", "field": p.path or None,
                     "message": _redact(request, p.message), "text": _redact(request, str(p))}
                    for p in exc.problems if isinstance(p, Problem)]
        page = _page(request, 422, str(exc), problems)
        if page is not None:
            return page
        return JSONResponse(error_body(request, str(exc), problems=problems),
                            status_code=422)

    async def stale(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StaleEdit)
        page = _page(request, 409, f"{exc}\n{exc.diff}")
        if page is not None:
            return page
        return JSONResponse(error_body(request, str(exc), hash=exc.current_hash,
                                       diff=_redact(request, exc.diff)), status_code=409)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        page = _page(request, exc.status_code, str(exc.detail),
                     headers=getattr(exc, "headers", None))
        if page is not None:
            return page
        return JSONResponse(error_body(request, str(exc.detail)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        unread = _not_json(request, errors, await request.body())
        if unread is not None:
            return JSONResponse(error_body(request, unread), status_code=415)
        first = errors[0] if errors else {}
        field = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        message = f"{field}: {first.get('msg', 'invalid')}" if field else "invalid request"
        # The input is left out: it may hold a password.
        details = [{"field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"),
                    "message": e.get("msg")} for e in errors]
        page = _page(request, 422, message, [{"field": d["field"], "text": f"{d['field']}: "
                                              f"{d['message']}"} for d in details])
        if page is not None:
            return page
        return JSONResponse(error_body(request, message, field=field or None,
                                       errors=details), status_code=422)

    app.add_exception_handler(ConfigError, config_error)
    app.add_exception_handler(StaleEdit, stale)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    for kind, _ in _STATUS:
        app.add_exception_handler(kind, service_error)
    app.add_exception_handler(DataError, data_error)
