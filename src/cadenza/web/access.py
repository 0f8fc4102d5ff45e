"""The access log: one structured line per request on the ``cadenza.access`` logger.

A line holds the method, the path, the status, the duration and who asked (a user name or
``api:NAME`` for a token of no user), as ``key=value`` pairs. Never a header, a cookie, a
body or a query string (a query may hold anything a client typed); the path goes through
the home's redactor, and `cadenza serve` writes the line through its redacting handler as
well.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.home import Home

log = logging.getLogger("cadenza.access")


class AccessLog:
    """ASGI middleware writing the access log (see the module docstring)."""

    def __init__(self, app: ASGIApp, clock: Clock, home: Home | None) -> None:
        self.app = app
        self.clock = clock
        self.home = home

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock.monotonic()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = str(scope.get("path", ""))
            if self.home is not None:
                path = self.home.redactor.redact_text(path)
            who = scope.get("state", {}).get("cadenza_principal", "-")
            client = scope.get("client")
            log.info("method=%s path=%s status=%d ms=%.1f user=%s client=%s",
                     scope.get("method"), path.encode("unicode_escape").decode("ascii"),
                     status[0], (self.clock.monotonic() - started) * 1000, who,
                     client[0] if client else "-")
