"""A small, honest stand-in for the executor's StepContext, for the ``http`` step's tests.

It stands in for the executor's context (built elsewhere) and implements the protocol of
:mod:`cadenza.steps.runtime` the way the executor does for what the http step uses:

* ``connection(name)`` opens an httpx Client through the real
  :meth:`cadenza.executor.connections.Connections.http_client` (so the egress policy, the
  DNS pinning and the in-process ``app`` are the product's own); ``resolver`` and
  ``is_public`` are passed through to it when a test injects them;
* ``event(...)`` and ``log`` record what they are given (no redaction here: redaction is
  the executor's job, and the tests check that the step itself never puts raw secrets in
  what it hands over);
* ``clock`` is the system clock unless the test gives one; ``remaining()`` counts down
  from the step's timeout on its monotonic time; ``cancelled()`` is a flag a test may set.

:class:`LocalServer` is the real HTTP server the integration tests talk to: the stdlib's
``ThreadingHTTPServer`` on 127.0.0.1 with a random port, recording each request.
"""

from __future__ import annotations

import functools
import gzip
import json
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import sqlalchemy as sa

from cadenza.clock import Clock, SystemClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.params import Scope
from cadenza.executor.connections import Connections
from cadenza.netguard import PublicPolicy, Resolver
from cadenza.steps.runtime import RunInfo, StepInfo, StepLog


@dataclass
class RecordingLog:
    """Run-log lines as (level, text)."""

    lines: list[tuple[str, str]] = field(default_factory=list)

    def _add(self, level: str, message: str, args: tuple[object, ...]) -> None:
        self.lines.append((level, message % args if args else message))

    def debug(self, message: str, *args: object) -> None:
        self._add("DEBUG", message, args)

    def info(self, message: str, *args: object) -> None:
        self._add("INFO", message, args)

    def warning(self, message: str, *args: object) -> None:
        self._add("WARNING", message, args)

    def error(self, message: str, *args: object) -> None:
        self._add("ERROR", message, args)


@dataclass
class Event:
    """One ``ctx.event`` call."""

    event_type: str
    message: str
    payload: dict[str, Any]
    level: str


def settings_with(connections: Mapping[str, Mapping[str, Any]] | None = None) -> Settings:
    """Settings holding only ``connections`` (raw tables, as in cadenza.toml)."""
    return Settings.model_validate({"connections": dict(connections or {})})


class HttpTestContext:
    """The ``ctx`` an http step sees, for one step run."""

    def __init__(self, home: Path, settings: Settings, *, run_id: str = "run-1",
                 step_name: str = "call", timeout: float = 30.0,
                 resolver: Resolver | None = None, is_public: PublicPolicy | None = None,
                 steps: Mapping[str, Mapping[str, Any]] | None = None,
                 clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.params: Mapping[str, Any] = {}
        self.run = RunInfo(id=run_id, job_id="job", trigger="manual:test",
                           scheduled_for=self.clock.now(), log_level="INFO")
        self.step = StepInfo(name=step_name, type="http", attempt=1, timeout_seconds=timeout)
        self.log_record = RecordingLog()
        self.log: StepLog = self.log_record
        self.home = home
        self.settings = settings
        self.scope = Scope(steps=dict(steps or {}), run_id=run_id, job_id="job",
                           scheduled_for=self.run.scheduled_for)
        self.events: list[Event] = []
        self.is_cancelled = False
        self._deadline = self.clock.monotonic() + timeout
        self._resolver = resolver
        self._is_public = is_public
        self._connections = Connections(home, settings)
        self._clients: list[httpx.Client] = []

    @property
    def job(self) -> RunInfo:
        return self.run

    def connection(self, name: str) -> httpx.Client:
        client = self._connections.http_client(name, resolver=self._resolver,
                                               is_public=self._is_public)
        self._clients.append(client)
        return client

    def sql_engine(self, name: str) -> sa.Engine:
        return self._connections.sql_engine(name)

    def event(self, event_type: str, message: str, payload: Mapping[str, Any] | None = None,
              level: str = "INFO") -> None:
        self.events.append(Event(event_type, message, dict(payload or {}), level))

    def cancelled(self) -> bool:
        return self.is_cancelled

    def remaining(self) -> float:
        return max(0.0, self._deadline - self.clock.monotonic())

    def previous(self, step: str) -> Mapping[str, Any] | None:
        output = self.scope.steps.get(step)
        if output is None:
            return None
        return {"state": "SUCCEEDED", "rows": output.get("rows"), "output": dict(output)}

    def http_events(self) -> list[dict[str, Any]]:
        """The payloads of the HTTP_REQUEST events, in order."""
        return [e.payload for e in self.events if e.event_type == "HTTP_REQUEST"]

    def close(self) -> None:
        """Close what ``connection()`` opened (the executor does this after the step)."""
        for client in self._clients:
            client.close()
        self._connections.close()


# --- a real HTTP server on 127.0.0.1, for the integration tests ------------------------------

BIG_TEXT = b"x" * (1024 * 1024)
BIG_JSON = b'{"x": "' + b"a" * (11 * 1024 * 1024) + b'"}'
BOMB_SIZE = 256 * 1024 * 1024
#: an error body holding a secret (``/status/NNN?leak=1``)
LEAKY_BODY = b'bad request: password=hunter2 "detail": "x"'


@functools.cache
def gzip_bomb(size: int = BOMB_SIZE) -> bytes:
    """``size`` zero bytes, gzip-compressed (about a thousandth of ``size``)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    parts = [compressor.compress(block) for _ in range(size // len(block))]
    return b"".join([*parts, compressor.flush()])




@dataclass
class Seen:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _send(self, status: int, body: bytes = b"", content_type: str = "text/plain",
              headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        one = {k: v[0] for k, v in query.items()}
        self.server.seen.append(Seen(self.command, parts.path, query,
                                     {k.lower(): v for k, v in self.headers.items()}, body))
        route = parts.path
        if route == "/json":
            self._send(200, b'{"a": {"b": 42}, "list": [1, 2]}', "application/json")
        elif route == "/echo":
            answer = {"method": self.command, "body": body.decode("utf-8", "replace")}
            self._send(200, json.dumps(answer).encode(), "application/json")
        elif route == "/big":
            self._send(200, BIG_TEXT)
        elif route == "/bigjson":
            self._send(200, BIG_JSON, "application/json")
        elif route == "/bomb":
            self._send(200, gzip_bomb(), one.get("type", "application/json"),
                       {"Content-Encoding": "gzip"})
        elif route == "/gzip-json":
            self._send(200, gzip.compress(b'{"zipped": true}'), "application/json",
                       {"Content-Encoding": "gzip"})
        elif route.startswith("/status/"):
            extra = {"Retry-After": one["retry_after"]} if "retry_after" in one else {}
            text = LEAKY_BODY if "leak" in one else one.get("body", "").encode()
            self._send(int(route.rsplit("/", 1)[1]), text, headers=extra)
        elif route == "/redirect":
            self._send(int(one.get("code", "302")), headers={"Location": one["to"]})
        elif route == "/loop":
            self._send(302, headers={"Location": "/loop"})
        elif route == "/slow":
            time.sleep(float(one.get("s", "3")))
            self._send(200, b"late")
        elif route == "/trickle":  # headers at once, then one byte every `every` seconds
            size, every = int(one.get("n", "40")), float(one.get("every", "0.2"))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            for _ in range(size):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(every)
        elif route == "/cookie":
            self._send(200, b"ok", headers={"Set-Cookie": "session=s3cr3t-cookie; HttpOnly",
                                            "X-Request-Id": "abc"})
        else:
            self._send(404, b"no such page")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    seen: list[Seen]

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that stops reading early (the caps) is expected here


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 (random port) recording every request."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.seen = []
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def seen(self) -> list[Seen]:
        return self._server.seen

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
