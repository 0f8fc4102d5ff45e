"""Serving, the composition root of ``cadenza serve``: a node (scheduler, workers) and the
HTTP server over one home, as one object.

:func:`open_server` builds it from the services (validated configuration, the store on the
services' clock, wired by :func:`cadenza.assembly.assemble`); the shell starts it, waits on
it, and stops it::

    server = open_server(services, ServeOptions(...))   # ConfigError for a bad config,
                                                        # Refused when the port is taken
    server.start(); server.run_until_stopped(on_web_stopped); server.stop()

Signals are the shell's: it calls ``server.stop_event.set()`` and ``server.reload()``.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import uvicorn

    from cadenza.audit import Redactor
    from cadenza.clock import Clock
    from cadenza.config.schema_settings import ServerSettings
    from cadenza.node import Node
    from cadenza.services.context import Services

WAKE_SECONDS = 0.5 if os.name == "nt" else None
"""How often the main thread wakes while it waits for the stop: on Windows a Ctrl+C is only
handled when it does (a thread blocked in a wait cannot be interrupted there); elsewhere a
signal interrupts the wait, and the HTTP server's thread says itself when it dies, so the
main thread sleeps until then (an idle node's CPU is its wake-ups: docs/benchmarks.md)."""
EVERY_INTERFACE = ("0.0.0.0", "::")


def exposed_host(host: str) -> bool:
    """True unless ``host`` is a loopback address or ``localhost``: any other address is
    reachable from other machines."""
    import ipaddress

    if host.lower() == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return True


def exposure_warning(host: str, *, tls: bool, proxied: bool) -> str | None:
    """The warning ``cadenza serve`` prints for ``host``: None on a loopback address, or
    when the server speaks TLS itself (``[server] tls_cert``/``tls_key``) or trusts a
    TLS-terminating proxy (``[server] trusted_proxies``); else why plain HTTP on the
    network is a risk and what to set."""
    if not exposed_host(host) or tls or proxied:
        return None
    return (f"warning: listening on {host} exposes Cadenza to the network over plain HTTP "
            "(passwords, cookies and tokens in clear): set [server] tls_cert and tls_key, "
            "or bind 127.0.0.1 behind a TLS-terminating proxy (and list it in [server] "
            "trusted_proxies)")


@dataclass(frozen=True)
class ServeOptions:
    """``None``: the value of cadenza.toml."""

    host: str | None = None
    port: int | None = None
    workers: int | None = None
    web: bool = True
    scheduler: bool = True


class RedactingFormatter(logging.Formatter):
    """A log line as the terminal or log file receives it: the whole formatted record (its
    message, arguments and traceback) through the home's redactor, then without control
    characters (:func:`~cadenza.audit.terminal.printable`): a secret never reaches the
    terminal, and a log line quoting a remote server cannot drive it."""

    def __init__(self, redactor: Redactor, fmt: str) -> None:
        super().__init__(fmt)
        self._redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        from cadenza.audit.terminal import printable

        return printable(self._redactor.redact_text(super().format(record)))


class Server:
    """A node and, unless disabled, the HTTP server, over the services' store."""

    def __init__(self, services: Services, node: Node, host: str, port: int,
                 web: uvicorn.Server | None, sock: socket.socket | None = None, *,
                 tls: bool = False, proxied: bool = False) -> None:
        self.services = services
        self.tls = tls
        self.proxied = proxied
        self.node = node
        self.host = host
        self.port = port
        self.web = web
        self.socket = sock
        self._web_thread: threading.Thread | None = None
        self.web_died = False
        """Whether the HTTP server's thread ended without being told to."""
        self._web_told_to_exit = False

    @property
    def stop_event(self) -> threading.Event:
        return self.node.stop_event

    @property
    def workers(self) -> int:
        return self.node.workers

    @property
    def scheduling(self) -> bool:
        return self.node.scheduler is not None

    @property
    def exposed(self) -> bool:
        """Whether its address is reachable from other machines over plain HTTP (neither
        TLS nor a trusted proxy is configured): a warning for people."""
        return self.warning is not None

    @property
    def warning(self) -> str | None:
        """What ``cadenza serve`` warns about its address (:func:`exposure_warning`)."""
        return exposure_warning(self.host, tls=self.tls, proxied=self.proxied)

    @property
    def url(self) -> str:
        """The server's address as people type it (https when it speaks TLS)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}/"

    def reload(self) -> None:
        """Ask the node to load the configuration again (applied when valid)."""
        self.node.request_reload()

    def start(self) -> None:
        self.node.start()
        if self.web is not None:
            sockets = [self.socket] if self.socket is not None else None
            self._web_thread = threading.Thread(target=self._serve_web, args=(sockets,),
                                                name="cadenza-web", daemon=True)
            self._web_thread.start()

    def _serve_web(self, sockets: list[socket.socket] | None) -> None:
        """The HTTP server's thread: serve until told to exit; an end it was not asked for
        (a crash, a failed start) sets :attr:`web_died` and the stop event."""
        assert self.web is not None
        try:
            self.web.run(sockets)
        finally:
            if not self._web_told_to_exit:
                self.web_died = True
                self.stop_event.set()

    def run_until_stopped(self, on_web_stopped: Callable[[], None]) -> bool:
        """Block until :attr:`stop_event` is set; if the HTTP server thread died, call
        ``on_web_stopped``. True when it stopped because the HTTP server died."""
        clock = self.services.clock
        while not clock.wait(self.stop_event, WAKE_SECONDS):
            pass
        if self.web_died:
            on_web_stopped()
        return self.web_died

    def stop(self) -> None:
        """No new runs; wait for the running ones; stop the HTTP server; close."""
        if self.web is not None:
            self._web_told_to_exit = True
            self.web.should_exit = True
        self.node.stop()
        if self._web_thread is not None:
            self._web_thread.join(10)
        if self.socket is not None:
            self.socket.close()
        self.services.close()


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (the HTTP server listens on it), taken before
    anything starts; :class:`Refused` saying why it cannot be (``cannot listen on
    127.0.0.1:8080: address already in use``)."""
    from cadenza.services.errors import Refused

    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock: socket.socket | None = None
    try:
        # IPPROTO_TCP, not 0: the accepted connections inherit the protocol number, and
        # asyncio switches Nagle's algorithm off (TCP_NODELAY) only on sockets that say TCP.
        # With it on, each answer's body waited for the client's delayed ACK of its
        # headers: 40 ms per request on a kept-alive connection (bench/api.py, W6).
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        exclusive = getattr(socket, "SO_EXCLUSIVEADDRUSE", None)
        if os.name == "nt":  # Windows' SO_REUSEADDR would share a port that is in use
            if exclusive is not None:
                sock.setsockopt(socket.SOL_SOCKET, exclusive, 1)
        else:  # restart at once over connections of a previous server in TIME_WAIT
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise Refused(f"cannot listen on {where}: {_why(exc)}") from None
    sock.set_inheritable(True)
    return sock


def _why(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})"
    reasons = {
        errno.EADDRINUSE: "address already in use (another server holds this port; choose "
                          "one with --port or [server].port)",
        errno.EACCES: "permission denied (ports below 1024 need privileges)",
        errno.EADDRNOTAVAIL: "address not available on this machine (check --host or "
                             "[server].host)",
    }
    reason = reasons.get(exc.errno) if exc.errno is not None else None
    text = exc.strerror or str(exc)
    return reason or (text[:1].lower() + text[1:])


def log_handler(redactor: Redactor, clock: Clock, stream: TextIO) -> logging.Handler:
    """The handler of ``cadenza serve``'s log lines (at INFO, on the ``cadenza`` logger):
    each line through the home's redactor, without control characters; store write
    failures (a full disk) at most once a minute (:mod:`cadenza.node.throttle`). The
    benchmarks log through it too, so that they measure what ``cadenza serve`` does."""
    from cadenza.node.throttle import WriteFailureThrottle

    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter(redactor,
                                            "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(WriteFailureThrottle(clock))
    return handler


def open_server(services: Services, options: ServeOptions) -> Server:
    """Build the node and HTTP server for ``services`` (the whole configuration must be
    valid: ConfigError with located problems otherwise). Log lines of ``cadenza`` go to
    stderr through the home's redactor, without control characters; store write failures
    (a full disk) at most once a minute (:mod:`cadenza.node.throttle`)."""
    import uvicorn

    from cadenza.node import Node
    from cadenza.web.app import create_app
    from cadenza.web.slow_clients import BodyDeadline

    config = services.config()
    root = logging.getLogger("cadenza")
    root.addHandler(log_handler(services.home.redactor, services.clock, sys.stderr))
    root.setLevel(logging.INFO)

    server = config.settings.server
    host = options.host or server.host
    port = options.port or server.port
    sock = listen(host, port) if options.web else None  # before anything starts
    store = services.store()
    node = Node(services.home, config, store, clock=services.clock, workers=options.workers,
                scheduler=options.scheduler)
    web = None
    if options.web:
        def reload() -> bool:
            node.request_reload()  # applied by the dispatcher at its next occasion
            return True

        app = create_app(store, home=services.home, reload=reload,
                         metrics_allow=server.metrics_allow, language=server.language,
                         node_status=node.status)
        bounded = BodyDeadline(app, server.body_timeout.total_seconds())
        web = uvicorn.Server(uvicorn.Config(bounded, host=host, port=port, log_level="warning",
                                            **uvicorn_settings(services.home.path, server)))
    return Server(services, node, host, port, web, sock, tls=server.tls,
                  proxied=bool(server.trusted_proxies))


def uvicorn_settings(home: Path, server: ServerSettings) -> dict[str, Any]:
    """uvicorn's TLS and proxy options for ``[server]``: the certificate and key (paths
    relative to the home), and proxy headers believed only from ``trusted_proxies`` (uvicorn
    would otherwise trust 127.0.0.1 by default, letting any local process pick the client
    address that login throttling and the access log use); and the slow-client bound on
    request headers (:mod:`cadenza.web.slow_clients`)."""
    from cadenza.config.checks_server import tls_path
    from cadenza.web.slow_clients import deadline_protocol

    options: dict[str, Any] = {"proxy_headers": bool(server.trusted_proxies),
                               "forwarded_allow_ips": list(server.trusted_proxies),
                               "http": deadline_protocol(server.header_timeout.total_seconds()),
                               "timeout_keep_alive": 5}
    if server.tls_cert is not None and server.tls_key is not None:
        options["ssl_certfile"] = str(tls_path(home, server.tls_cert))
        options["ssl_keyfile"] = str(tls_path(home, server.tls_key))
    return options
