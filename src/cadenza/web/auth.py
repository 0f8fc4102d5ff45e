"""Who is calling, and may they: the web app's authentication dependencies (docs/api.md).

* A request authenticates with ``Authorization: Bearer cdz_...`` (an API token) or the
  session cookie ``cadenza_session`` (HttpOnly, SameSite=Lax, Secure over https). Anything
  else is 401, on every route but ``/api/health`` and ``POST /api/login``.
* A state-changing request (POST, PUT, PATCH, DELETE) made with a session must carry the
  session's CSRF token in ``X-CSRF-Token`` and an ``Origin`` (or, failing that, ``Referer``)
  of this server: 403 otherwise. A foreign ``Origin`` is refused whatever the credentials.
* Each route declares the one role it needs with one of :data:`VIEWER`, :data:`OPERATOR`,
  :data:`EDITOR`, :data:`ADMIN`; a lower role gets 403. The route walk test checks that
  every route declares exactly one.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network
from typing import TYPE_CHECKING, Annotated, Any, TypeVar
from urllib.parse import urlsplit

import anyio.to_thread
from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse

from cadenza.services.auth import AuthService, Principal

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.home import Home
    from cadenza.services import Services
    from cadenza.services.health import NodeStatus
    from cadenza.store import Store

T = TypeVar("T")

READ_THREADS = 2
"""Worker threads that may run the hot reads (with their credential check) and the other
credential checks at once on PostgreSQL (each waits for a few network round trips). More
let more threads contend for the interpreter than there are round trips to overlap: under
W6's 10 clients, with one hand-off per request, 2 threads answered p95 25-38 ms against
40-45 ms with 4 and 45 with 1, and left the node more time to drain (docs/benchmarks.md)."""

SESSION_COOKIE = "cadenza_session"
CSRF_COOKIE = "cadenza_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class WebContext:
    """What the routes share: the open store, the home (configuration, secrets,
    jobs.toml), the clock, and what applies a changed jobs.toml (a node's reload)."""

    store: Store
    home: Home | None
    clock: Clock
    reload: Callable[[], object] | None = None
    metrics_allow: tuple[IPv4Network | IPv6Network, ...] = ()
    """``[server] metrics_allow``: who may read ``/metrics`` without a token."""
    answer_class: type[JSONResponse] = JSONResponse
    """The app's redacting JSON response (:mod:`cadenza.web.redacting`)."""
    language: str | None = None
    """``[server] language``: the pages' language when the reader chose none."""
    node_status: Callable[[], NodeStatus] | None = None
    """What the node serving the app says of itself (``/api/health``, ``/metrics``)."""
    _limiters: dict[int, anyio.CapacityLimiter] = field(default_factory=dict, repr=False)

    def answer(self, content: Any, status_code: int = 200) -> JSONResponse:
        """``content`` as the redacted JSON answer, made here (in the endpoint's worker
        thread) rather than by FastAPI's validation and encoding of a returned value,
        which cost more than the rest of a list request (docs/benchmarks.md, W6). The
        route keeps its return annotation for the OpenAPI document."""
        return self.answer_class(content, status_code=status_code)

    async def read(self, reader: Callable[[], T]) -> T:
        """``reader()`` for an ``async`` route: on SQLite here, on the event loop (a page
        of history is a few local indexed reads, well under a millisecond, and a WAL reader
        never waits for a writer); on PostgreSQL in a worker thread, which waits for the
        network round trips. The hand-off to a thread and back, and the threads' contention
        for the interpreter, cost the hot reads more than their own work
        (docs/benchmarks.md, W6). Only for cheap reads: a slow one here would stall every
        request of the server."""
        if self.store.dialect == "sqlite":
            return reader()
        return await anyio.to_thread.run_sync(reader, limiter=self.read_limiter())

    def read_limiter(self) -> anyio.CapacityLimiter:
        """The worker threads of the hot reads and credential checks on PostgreSQL: at
        most :data:`READ_THREADS` at once, per event loop."""
        loop = id(asyncio.get_running_loop())
        limiter = self._limiters.get(loop)
        if limiter is None:
            limiter = self._limiters[loop] = anyio.CapacityLimiter(READ_THREADS)
        return limiter


def context(request: Request) -> WebContext:
    """The app's :class:`WebContext`."""
    web: WebContext = request.app.state.cadenza
    return web


def client_address(request: Request) -> str:
    """The peer's address; when the peer is one of ``[server] trusted_proxies``, the
    client named by its ``X-Forwarded-For`` (uvicorn rewrites the peer; nobody else's
    proxy headers are believed)."""
    return request.client.host if request.client is not None else "unknown"


def same_origin(request: Request, origin: str) -> bool:
    """True when ``origin`` (an Origin or Referer value) names this server."""
    parts = urlsplit(origin)
    host = request.headers.get("host", "")
    return bool(parts.scheme) and parts.scheme == request.url.scheme \
        and parts.netloc.lower() == host.lower()


def check_origin(request: Request) -> None:
    """403 for a state-changing request whose ``Origin`` is another site's."""
    origin = request.headers.get("origin")
    if request.method not in SAFE_METHODS and origin is not None \
            and not same_origin(request, origin):
        raise HTTPException(403, "cross-site request refused: the Origin is not this server")


def authenticate(request: Request) -> Principal:
    """The caller, checked: 401 without valid credentials, 403 for a session's
    state-changing request without its CSRF token or this server's Origin."""
    auth = AuthService(context(request).store, context(request).clock)
    check_origin(request)
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise HTTPException(401, "use Authorization: Bearer <token>",
                                headers={"WWW-Authenticate": "Bearer"})
        principal = auth.bearer(value.strip())
        if principal is None:
            raise HTTPException(401, "invalid or revoked token",
                                headers={"WWW-Authenticate": "Bearer"})
        return principal
    cookie = request.cookies.get(SESSION_COOKIE)
    principal = auth.session(cookie) if cookie else None
    if principal is None:
        raise HTTPException(401, "log in first (POST /api/login) or send a bearer token",
                            headers={"WWW-Authenticate": "Bearer"})
    if request.method not in SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent, principal.csrf_token or ""):
            raise HTTPException(403, f"missing or wrong {CSRF_HEADER} header")
        origin = request.headers.get("origin") or request.headers.get("referer")
        if origin is None or not same_origin(request, origin):
            raise HTTPException(403, "a state-changing request needs this server's Origin")
    return principal


@dataclass(frozen=True)
class AtRead:
    """A caller whose check is made with the route's read (:meth:`read`): the dependency
    of ``require(..., at_read=True)``. A hot read on PostgreSQL then hands off to a worker
    thread once, for the check's round trip and the read's, instead of twice (the check,
    then the read): W6, docs/benchmarks.md. A route that never calls :meth:`read` reads
    nothing as anyone; the route walk test (401 without credentials on every route)
    would find one that answered anyway."""

    request: Request
    check: Callable[[Request], Principal]

    async def read(self, reader: Callable[[Principal], T]) -> T:
        """Check the caller (401 / 403 exactly as the dependency would), then
        ``reader(principal)``: in one worker thread on PostgreSQL, on the event loop on
        SQLite (:meth:`WebContext.read`). Let the reader only read: encoding the answer
        or rendering the page belongs on the event loop after it, where it does not fight
        the loop for the interpreter (W6 on PostgreSQL: p95 52-53 -> 43 ms)."""
        request, check = self.request, self.check
        return await context(request).read(lambda: reader(check(request)))


def require(role: str, *, when_anonymous: Callable[[], Exception] | None = None,
            name: str = "require", at_read: bool = False) -> Callable[[Request], Awaitable[Any]]:
    """A dependency admitting callers whose role is ``role`` or above (403 otherwise).
    ``when_anonymous`` replaces the 401 of a caller without credentials (the pages answer
    it with the login form). ``at_read``: the dependency gives an :class:`AtRead`, which
    makes the same check with the route's read."""
    def check(request: Request) -> Principal:
        try:
            principal = authenticate(request)
        except HTTPException as exc:
            if exc.status_code == 401 and when_anonymous is not None:
                raise when_anonymous() from None
            raise
        request.state.cadenza_principal = principal.name  # for the access log
        if not principal.allows(role):
            raise HTTPException(403, f"this needs the {role} role; you have "
                                     f"{principal.role or 'no built-in role'}")
        return principal

    async def deferred(request: Request) -> AtRead:
        return AtRead(request, check)

    async def dependency(request: Request) -> Principal:
        # On SQLite the check is one local indexed read (tens of microseconds): done here,
        # on the event loop, it saves the request a hand-off to a worker thread and back,
        # which cost more than the read (docs/benchmarks.md, W6). PostgreSQL's is a
        # network round trip: a worker thread waits for it.
        web = context(request)
        if web.store.dialect == "sqlite":
            return check(request)
        return await anyio.to_thread.run_sync(check, request, limiter=web.read_limiter())

    made: Callable[[Request], Awaitable[Any]] = deferred if at_read else dependency
    made.required_role = role  # type: ignore[attr-defined]  # read by the route walk
    made.check = check  # type: ignore[attr-defined]  # for a sync caller
    made.__name__ = f"{name}_{role}" + ("_at_read" if at_read else "")
    return made


VIEWER = require("viewer")
OPERATOR = require("operator")
EDITOR = require("editor")
ADMIN = require("admin")

AsViewer = Annotated[Principal, Depends(VIEWER)]
ViewerAtRead = Annotated[AtRead, Depends(require("viewer", at_read=True))]
"""A viewer checked with the route's hot read (:class:`AtRead`)."""
AsOperator = Annotated[Principal, Depends(OPERATOR)]
AsEditor = Annotated[Principal, Depends(EDITOR)]
AsAdmin = Annotated[Principal, Depends(ADMIN)]


@contextmanager
def services_for(request: Request, principal: Principal) -> Iterator[Services]:
    """Services acting for ``principal`` on the app's home and store (closed after)."""
    from cadenza.services import Actor, Services

    web = context(request)
    if web.home is None:
        raise HTTPException(503, "this server has no home (configuration) to act on")
    services = Services(web.home, actor=Actor.user(principal.name), clock=web.clock,
                        store=web.store)
    services.jobs.on_change = web.reload
    try:
        yield services
    finally:
        services.close()


@contextmanager
def services_for_link(request: Request) -> Iterator[Services]:
    """Services acting for the holder of a one-use link of an alert e-mail (no login: the
    link's token is the permission; the actor is ``link:alert``)."""
    from cadenza.services import Actor, Services

    web = context(request)
    if web.home is None:
        raise HTTPException(503, "this server has no home (configuration) to act on")
    services = Services(web.home, actor=Actor("link", "alert"), clock=web.clock,
                        store=web.store)
    try:
        yield services
    finally:
        services.close()
