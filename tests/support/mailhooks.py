"""Real local receivers for notification tests: an SMTP server (aiosmtpd on loopback) and a
webhook receiver (``http.server`` in a thread). Both keep what they received."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Inbox:
    """What an SMTP server accepted: (envelope recipients, parsed message)."""

    mails: list[tuple[list[str], EmailMessage]] = field(default_factory=list)
    drop_data: bool = False
    """Close the connection in the middle of DATA (a server that dies mid-message)."""

    refuse_once: set[str] = field(default_factory=set)
    """Recipients answered "451 try again later" the first time they are named."""
    on_message: Any = None
    """Called with (recipients, message) before a message is kept; returning an SMTP
    answer (e.g. "451 ...") refuses it instead."""

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if address in self.refuse_once:
            self.refuse_once.discard(address)
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    def to(self, address: str) -> list[EmailMessage]:
        return [m for rcpt, m in self.mails if address in rcpt]

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.drop_data:
            session_transport = server.transport
            session_transport.abort()
            return "421 closing"
        raw = envelope.original_content or envelope.content
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        if self.on_message is not None:
            answer = self.on_message(list(envelope.rcpt_tos), message)
            if answer:
                return str(answer)
        self.mails.append((list(envelope.rcpt_tos), message))
        return "250 OK"


class Smtp:
    """An aiosmtpd server on a loopback port that can be stopped and started again."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.inbox = Inbox()
        self._controller: Any = None

    def start(self) -> Smtp:
        from aiosmtpd.controller import Controller

        self._controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None


@contextmanager
def smtp_server(port: int | None = None) -> Iterator[Smtp]:
    server = Smtp(port).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Hook:
    """A webhook receiver: every POST's headers and JSON body."""

    port: int
    posts: list[tuple[dict[str, str], Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@contextmanager
def webhook_receiver() -> Iterator[Hook]:
    hook = Hook(0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            hook.posts.append((dict(self.headers.items()), json.loads(body or b"null")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
