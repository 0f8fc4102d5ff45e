"""Request limits, applied before the app reads the request:

* a body larger than :data:`MAX_BODY_BYTES` is refused with 413 (by ``Content-Length``, and
  counted as it streams in for a chunked body), so a client cannot make the server buffer
  an unbounded request;
* a URL with a NUL byte in its path or a query parameter is refused with 422, naming the
  parameter (:class:`NulGuard`): no id, name or filter of Cadenza holds one, and
  PostgreSQL refuses it in any text it is given, which made ``/api/events?resource=%00``
  a 503 "store read failed" instead of the client's error;
* an integer query parameter (a limit, an id, a keyset cursor) is declared with bounds
  (``ge``/``le``, at most :data:`MAX_ID`): a larger one is a 422 naming it, never a value
  that overflows the store's integers (SQLite's INTEGER and PostgreSQL's bigint are 64-bit)
  and ends the request with a 500.
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024  # a jobs.toml edit or a run request is a few KiB
MAX_ID = 2**63 - 1
"""The largest id or cursor an integer query parameter may give: the store's integers
(SQLite's INTEGER, PostgreSQL's bigint) hold no more."""


class BodyLimit:
    """ASGI middleware enforcing :data:`MAX_BODY_BYTES` (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and (not value.isdigit()
                                              or int(value) > self.max_bytes):
                await self._refuse(send)
                return
        seen = 0
        started = refused = False

        async def counting() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes and not started:
                    # Answer now, and tell the app the client left: it stops reading, and
                    # whatever it answers to that is dropped below.
                    refused = True
                    await self._refuse(send)
                    return {"type": "http.disconnect"}
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counting, sending)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": f"request body larger than {self.max_bytes} bytes"})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body.encode()})


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


class NulGuard:
    """ASGI middleware refusing a NUL byte in the URL (see the module docstring). Costs a
    byte search of the path and the query string per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query: bytes = scope.get("query_string", b"")
            in_path = "\x00" in scope.get("path", "")
            if in_path or b"%00" in query or b"\x00" in query:
                await self._refuse(send, "path" if in_path else _parameter(query))
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(send: Send, where: str) -> None:
        body = json.dumps({"error": f"{where}: a NUL byte is not allowed", "field": where})
        await send({"type": "http.response.start", "status": 422,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body.encode()})


def _parameter(query: bytes) -> str:
    """The name of the first query parameter holding a NUL byte, when it is a plain name
    (a hostile name is not echoed)."""
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True,
                                 encoding="latin-1"):
        if "\x00" in name or "\x00" in value:
            return name if _NAME.fullmatch(name) else "a query parameter"
    return "the query"
