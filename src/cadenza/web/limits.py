"""Request size limits: a body larger than :data:`MAX_BODY_BYTES` is refused with 413
before the app reads it (by ``Content-Length``, and counted as it streams in for a chunked
body), so a client cannot make the server buffer an unbounded request."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024  # a jobs.toml edit or a run request is a few KiB


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
