"""Slow clients (slowloris): a deadline to send a request's headers, another to send its body.

A client that opens connections and sends its request a byte at a time holds a connection
and a task for as long as it likes; a few hundred such clients fill a server. uvicorn bounds
the idle time between requests (``timeout_keep_alive``) but not the time a request takes to
arrive, so ``cadenza serve`` adds both bounds of ``[server]``:

* ``header_timeout`` — :func:`deadline_protocol` makes uvicorn's HTTP protocol class (the
  one it would choose itself) arm a timer when a connection opens and when the first byte
  of a following request arrives; the timer is cancelled when the request's headers are
  complete (uvicorn has started a new request-response cycle). When it fires, the client
  gets ``408 Request Timeout`` and the connection is closed.
* ``body_timeout`` — :class:`BodyDeadline`, an ASGI middleware, gives the whole body one
  deadline from the app's first read. When it passes, the app sees the client as gone and
  the client gets 408 with ``Connection: close``.

Responses are never bounded: a live run page's event stream or a long download go on as
long as the client reads them. Both work the same on Windows (timers of the event loop, no
signals).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("cadenza.web")

TIMEOUT_BODY = b"request not received in time\n"
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                    % (len(TIMEOUT_BODY), TIMEOUT_BODY))


def _peer(client: Any) -> str:
    if isinstance(client, tuple) and len(client) == 2:
        return f"{client[0]}:{client[1]}"
    return "unknown"


def uvicorn_protocol() -> type[asyncio.Protocol]:
    """The HTTP/1.1 protocol class uvicorn's ``http="auto"`` picks: httptools' when it is
    installed, h11's otherwise."""
    try:
        import httptools  # noqa: F401
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        return HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is in the lock for every platform
        from uvicorn.protocols.http.h11_impl import H11Protocol
        return H11Protocol


def deadline_protocol(header_timeout: float,
                      base: type[asyncio.Protocol] | None = None) -> type[asyncio.Protocol]:
    """``base`` (uvicorn's protocol class) with a ``header_timeout`` seconds deadline on each
    request's line and headers; for ``uvicorn.Config(http=...)``."""
    parent: Any = base if base is not None else uvicorn_protocol()

    class HeaderDeadlineProtocol(parent):  # type: ignore[misc]
        """uvicorn's protocol with a deadline on request headers (module docstring)."""

        header_timer: asyncio.TimerHandle | None = None
        armed_for: object = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self.arm_header_timer()

        def data_received(self, data: bytes) -> None:
            if self.header_timer is None and self.between_requests():
                self.arm_header_timer()  # the first byte of the next request
            super().data_received(data)
            if self.header_timer is not None and self.cycle is not self.armed_for:
                self.cancel_header_timer()  # the headers are in: a new cycle started

        def connection_lost(self, exc: Exception | None) -> None:
            self.cancel_header_timer()
            super().connection_lost(exc)

        def between_requests(self) -> bool:
            cycle = self.cycle
            return cycle is None or bool(cycle.response_complete)

        def arm_header_timer(self) -> None:
            self.cancel_header_timer()
            self.armed_for = self.cycle
            self.header_timer = self.loop.call_later(header_timeout, self.headers_too_slow)

        def cancel_header_timer(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def headers_too_slow(self) -> None:
            self.header_timer = None
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            log.warning("client %s did not send its request headers within %gs: "
                        "disconnected (server.header_timeout)", _peer(self.client),
                        header_timeout)
            transport.write(TIMEOUT_RESPONSE)
            transport.close()

    return HeaderDeadlineProtocol


class BodyDeadline:
    """ASGI middleware: an HTTP request's body must arrive within ``timeout`` seconds of the
    app's first read; past that the app reads a disconnect and the client gets 408."""

    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        body_done = False
        timed_out = False
        started = False
        replaced = False

        async def bounded_receive() -> Message:
            nonlocal deadline, body_done, timed_out
            if body_done or timed_out:
                return await receive() if not timed_out else {"type": "http.disconnect"}
            if deadline is None:
                deadline = loop.time() + self.timeout
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                timed_out = True
                log.warning("client %s did not send its request body within %gs: "
                            "disconnected (server.body_timeout)", _peer(scope.get("client")),
                            self.timeout)
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started, replaced
            if replaced:
                return  # the app's own answer after the deadline: the 408 went instead
            if message["type"] == "http.response.start":
                started = True
                if timed_out:
                    replaced = True
                    await _send_timeout(send)
                    return
            await send(message)

        try:
            await self.app(scope, bounded_receive, tracked_send)
        except Exception:
            if not timed_out:
                raise
        if timed_out and not started:
            started = True
            await _send_timeout(send)


async def _send_timeout(send: Send) -> None:
    await send({"type": "http.response.start", "status": 408,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": TIMEOUT_BODY})
