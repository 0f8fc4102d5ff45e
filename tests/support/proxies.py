"""Real proxies and a real IP-echo server on loopback, for the egress and health tests.

Everything here is a real network peer on 127.0.0.0/8, started in a tmp dir on a free port
and stopped by its fixture:

* :class:`EchoServer` (stdlib ``ThreadingHTTPServer`` on 127.0.0.1): ``/ip`` answers the
  JSON ``{"ip": <the client's address>, "country": <its region>}`` with the region looked
  up in :data:`REGIONS` by the address the connection really came from; ``/generate_204``
  answers 204; ``/hello`` answers ``hello``; ``/hold`` answers only once the test calls
  :meth:`EchoServer.release` (or after 20 s). Loopback has a whole /8: a proxy that sends
  from 127.0.0.2 egresses in "FR", from 127.0.0.3 in "DE", from 127.0.0.1 in "US" — so a
  route's egress region is what the echo server really saw, not a header anyone could set.
* :class:`FaultProxy`: a small HTTP proxy of the tests' own (forwarding for ``http://``
  targets, ``CONNECT`` tunnels for the rest) whose faults a test switches at run time:
  ``delay`` (seconds before it answers anything), ``refuse()`` (stop listening: connections
  are refused) and ``resume()``, ``credentials`` (407 without the right
  ``Proxy-Authorization``), ``source`` (the loopback address it sends from: the egress
  region) and ``kill()`` (drop every open connection and stop listening).
* :class:`FaultSocks`: the same as a SOCKS5 proxy (RFC 1928), with username/password
  authentication (RFC 1929) when it has ``credentials``: wrong ones are refused.
* :func:`tinyproxy` (Debian's ``tinyproxy``: HTTP forwarding and CONNECT, optional basic
  auth, ``Bind`` for its outgoing address) and :func:`danted` (Debian's ``dante-server``,
  SOCKS5 with its ``external`` address) and :func:`pproxy_socks` (pproxy from PyPI: SOCKS5
  with a user name and password), each a running process with its URL.

When a binary is missing the fixture calls ``service_missing`` (skip locally, fail in CI).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import service_missing

REGIONS = {"127.0.0.1": "US", "127.0.0.2": "FR", "127.0.0.3": "DE"}
"""The region the echo server gives each loopback source address."""
FR, DE, US = "127.0.0.2", "127.0.0.3", "127.0.0.1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, timeout: float = 10.0, proc: subprocess.Popen[Any] | None = None
                   ) -> None:
    """Block until something accepts TCP connections on 127.0.0.1:``port``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


# --- the IP-echo server ----------------------------------------------------------------------

class _EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _EchoHttp

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", kind: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        client = self.client_address[0]
        path = urlsplit(self.path).path
        self.server.seen.append((client, path))
        if path == "/ip":
            answer = {"ip": client, "country": REGIONS.get(client, "ZZ")}
            self._send(200, json.dumps(answer).encode(), "application/json")
        elif path == "/generate_204":
            self._send(204)
        elif path == "/hello":
            self._send(200, b"hello")
        elif path == "/hold":
            self.server.held.set()
            self.server.release.wait(20)
            self._send(200, b"released")
        else:
            self._send(404, b"no such page")


class _EchoHttp(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # many probes at once (the default backlog of 5 drops some)
    seen: list[tuple[str, str]]
    held: threading.Event
    release: threading.Event

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a proxy killed mid-answer is what some tests do


class EchoServer:
    """The IP-echo and probe server on 127.0.0.1 (see the module doc)."""

    def __init__(self) -> None:
        self._server = _EchoHttp(("127.0.0.1", 0), _EchoHandler)
        self._server.seen = []
        self._server.held = threading.Event()
        self._server.release = threading.Event()
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def seen(self) -> list[tuple[str, str]]:
        """(client address, path) of every request, in order."""
        return self._server.seen

    def wait_held(self, timeout: float = 10.0) -> bool:
        """Block until a request waits in ``/hold``."""
        return self._server.held.wait(timeout)

    def release(self) -> None:
        """Let every ``/hold`` request (now and later) answer."""
        self._server.release.set()

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


# --- the fault-injecting proxy ---------------------------------------------------------------

class FaultProxy:
    """An HTTP proxy on 127.0.0.1 whose faults a test switches at run time (module doc)."""

    def __init__(self, *, source: str = US, credentials: tuple[str, str] | None = None
                 ) -> None:
        self.source = source
        self.credentials = credentials
        self.delay = 0.0
        self.requests = 0
        self.errors: list[str] = []
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.resume()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url_with(self, user: str, password: str) -> str:
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    # faults ---------------------------------------------------------------------------------

    def refuse(self) -> None:
        """Stop listening: new connections are refused (open ones go on)."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            listener.close()

    def resume(self) -> None:
        """Listen again on the same port."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def kill(self) -> None:
        """Stop listening and drop every open connection (a proxy that died)."""
        self.refuse()
        with self._lock:
            doomed, self._open = list(self._open), set()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._stopped.set()
        self.kill()

    # serving --------------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopped.is_set():
            with self._lock:
                if self._listener is not listener:
                    return
            try:
                client, _ = listener.accept()
            except OSError:
                return
            client.settimeout(None)
            self._track(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def _serve(self, client: socket.socket) -> None:
        try:
            head = _read_head(client)
            if head is None:
                return
            self.requests += 1
            if self.delay:
                time.sleep(self.delay)
            line, headers, rest = head
            method, target, _ = line.split(" ", 2)
            if self.credentials is not None and not self._authorized(headers):
                client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                               b"Proxy-Authenticate: Basic realm=\"fault\"\r\n"
                               b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                return
            if method == "CONNECT":
                host, port = target.rsplit(":", 1)
                upstream = self._connect(host, int(port))
                if upstream is None:
                    client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    return
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
            else:
                parts = urlsplit(target)
                upstream = self._connect(parts.hostname or "", parts.port or 80)
                if upstream is None:
                    client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    return
                path = parts.path + (f"?{parts.query}" if parts.query else "") or "/"
                kept = [h for h in headers if not h.lower().startswith(
                    ("proxy-", "connection:", "keep-alive:"))]
                upstream.sendall("\r\n".join([f"{method} {path} HTTP/1.1", *kept,
                                              "Connection: close", "", ""]).encode("latin-1")
                                 + rest)
                # The answer says it closes (it does): the client must not reuse this
                # connection for a next request.
                answer = _read_head(upstream)
                if answer is None:
                    return
                status, answer_headers, body = answer
                answer_headers = [h for h in answer_headers
                                  if not h.lower().startswith(("connection:", "keep-alive:"))]
                client.sendall("\r\n".join([status, *answer_headers, "Connection: close",
                                            "", ""]).encode("latin-1") + body)
            _pipe(client, upstream)
        except Exception as exc:  # a broken peer; kept for a test that wants to know
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._open.discard(client)
            client.close()

    def _authorized(self, headers: list[str]) -> bool:
        assert self.credentials is not None
        user, password = self.credentials
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return any(h.lower().startswith("proxy-authorization:")
                   and h.split(":", 1)[1].strip() == f"Basic {token}" for h in headers)

    def _connect(self, host: str, port: int) -> socket.socket | None:
        try:
            upstream = socket.create_connection((host, port), 5,
                                                source_address=(self.source, 0))
        except OSError:
            return None
        upstream.settimeout(None)
        self._track(upstream)
        return upstream



class FaultSocks(FaultProxy):
    """A SOCKS5 proxy (RFC 1928, CONNECT only) with the same faults; with ``credentials``
    it requires the username/password method (RFC 1929) and refuses wrong ones."""

    @property
    def url(self) -> str:
        return f"socks5://127.0.0.1:{self.port}"

    def url_with(self, user: str, password: str) -> str:
        return f"socks5://{user}:{password}@127.0.0.1:{self.port}"

    def _serve(self, client: socket.socket) -> None:
        try:
            head = _recv_exact(client, 2)
            methods = _recv_exact(client, head[1])
            self.requests += 1
            if self.delay:
                time.sleep(self.delay)
            if self.credentials is None:
                client.sendall(b"\x05\x00")
            elif 2 not in methods:
                client.sendall(b"\x05\xff")
                return
            else:
                client.sendall(b"\x05\x02")
                _, size = _recv_exact(client, 2)
                user = _recv_exact(client, size).decode()
                password = _recv_exact(client, _recv_exact(client, 1)[0]).decode()
                if (user, password) != self.credentials:
                    client.sendall(b"\x01\x01")
                    return
                client.sendall(b"\x01\x00")
            _, command, _, kind = _recv_exact(client, 4)
            if kind == 1:
                host = socket.inet_ntoa(_recv_exact(client, 4))
            elif kind == 3:
                host = _recv_exact(client, _recv_exact(client, 1)[0]).decode()
            else:
                host = socket.inet_ntop(socket.AF_INET6, _recv_exact(client, 16))
            port = int.from_bytes(_recv_exact(client, 2), "big")
            upstream = self._connect(host, port) if command == 1 else None
            if upstream is None:
                client.sendall(b"\x05\x05\x00\x01" + bytes(6))
                return
            client.sendall(b"\x05\x00\x00\x01" + bytes(6))
            _pipe(client, upstream)
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._open.discard(client)
            client.close()


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client closed the connection")
        data += chunk
    return data

def _read_head(sock: socket.socket) -> tuple[str, list[str], bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    return lines[0], lines[1:], rest


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until either side closes."""
    def copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=copy, args=(b, a), daemon=True)
    other.start()
    copy(a, b)
    other.join(30)
    b.close()


# --- real proxy daemons ----------------------------------------------------------------------

@dataclass
class ProxyProcess:
    """A proxy daemon started by a fixture: its URL (with credentials when it has some)."""

    url: str
    port: int
    proc: subprocess.Popen[bytes]

    def kill(self) -> None:
        """SIGKILL: the proxy dies with its open connections."""
        self.proc.kill()
        self.proc.wait(10)


@contextlib.contextmanager
def _running(argv: list[str], port: int, url: str, log: Path) -> Iterator[ProxyProcess]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        try:
            wait_listening(port, proc=proc)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{argv[0]} did not start: {exc}\n{log.read_text()}") from exc
        yield ProxyProcess(url, port, proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@contextlib.contextmanager
def tinyproxy(tmp: Path, *, source: str = US, credentials: tuple[str, str] | None = None
              ) -> Iterator[ProxyProcess]:
    """Debian's tinyproxy on 127.0.0.1 (HTTP forwarding and CONNECT to any port), sending
    from ``source``; with ``credentials``, basic auth."""
    binary = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
    if not os.path.exists(binary):
        service_missing("tinyproxy", "the tinyproxy binary is not installed")
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    lines = [f"Port {port}", "Listen 127.0.0.1", f"Bind {source}", "Timeout 30",
             "MaxClients 100", "Allow 127.0.0.0/8", "LogLevel Info",
             f"PidFile \"{tmp / 'tinyproxy.pid'}\"", "DisableViaHeader Yes"]
    if os.geteuid() == 0:
        lines += ["User nobody", "Group nogroup"]
    url = f"http://127.0.0.1:{port}"
    if credentials is not None:
        lines.append(f"BasicAuth {credentials[0]} {credentials[1]}")
        url = f"http://{credentials[0]}:{credentials[1]}@127.0.0.1:{port}"
    conf = tmp / "tinyproxy.conf"
    conf.write_text("\n".join(lines) + "\n")
    with _running([binary, "-d", "-c", str(conf)], port, url, tmp / "tinyproxy.log") as p:
        yield p


@contextlib.contextmanager
def danted(tmp: Path, *, source: str = US) -> Iterator[ProxyProcess]:
    """Debian's dante-server (``danted``): SOCKS5 without authentication on 127.0.0.1,
    its outgoing (``external``) address ``source``."""
    binary = shutil.which("danted") or "/usr/sbin/danted"
    if not os.path.exists(binary):
        service_missing("dante-server", "/usr/sbin/danted is not installed")
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    conf = tmp / "danted.conf"
    users = "user.privileged: root\nuser.unprivileged: nobody\n" if os.geteuid() == 0 else ""
    conf.write_text(
        f"logoutput: {tmp / 'danted.out'}\n"
        f"internal: 127.0.0.1 port = {port}\nexternal: {source}\n"
        f"clientmethod: none\nsocksmethod: none\n{users}"
        "client pass {\n from: 127.0.0.0/8 to: 0.0.0.0/0\n}\n"
        "socks pass {\n from: 127.0.0.0/8 to: 0.0.0.0/0\n command: connect\n}\n")
    argv = [binary, "-f", str(conf), "-p", str(tmp / "danted.pid"), "-N", "1"]
    with _running(argv, port, f"socks5://127.0.0.1:{port}", tmp / "danted.log") as p:
        yield p


@contextlib.contextmanager
def pproxy_socks(tmp: Path, *, credentials: tuple[str, str] | None = None
                 ) -> Iterator[ProxyProcess]:
    """pproxy (PyPI) as a SOCKS5 server on 127.0.0.1, with ``credentials`` when given."""
    try:
        import pproxy  # noqa: F401
    except ImportError as exc:
        service_missing("pproxy", exc)
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    listen = f"socks5://127.0.0.1:{port}"
    url = listen
    if credentials is not None:
        listen += f"#{credentials[0]}:{credentials[1]}"
        url = f"socks5://{credentials[0]}:{credentials[1]}@127.0.0.1:{port}"
    # pproxy installs uvloop when it can import it (Cadenza depends on uvloop), then asks
    # for asyncio's current loop, which uvloop >= 0.22 no longer makes: hide uvloop from it.
    argv = [sys.executable, "-c", _PPROXY_WITHOUT_UVLOOP, "-l", listen]
    with _running(argv, port, url, tmp / "pproxy.log") as p:
        yield p


_PPROXY_WITHOUT_UVLOOP = (
    "import sys, types; stub = types.ModuleType('uvloop'); stub.install = lambda: None; "
    "sys.modules['uvloop'] = stub; from pproxy.server import main; main()")


# --- fixtures (import ``*_fixture`` into a test module; the fixture's name drops the suffix) --

@pytest.fixture(name="echo")
def echo_fixture() -> Iterator[EchoServer]:
    """The IP-echo and probe server."""
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture(name="fault_proxy")
def fault_proxy_fixture() -> Iterator[FaultProxy]:
    """A fault-injecting HTTP proxy egressing from 127.0.0.2 ("FR")."""
    proxy = FaultProxy(source=FR)
    yield proxy
    proxy.close()


@pytest.fixture(name="tiny")
def tiny_fixture(tmp_path: Path) -> Iterator[ProxyProcess]:
    """tinyproxy egressing from 127.0.0.2 ("FR")."""
    with tinyproxy(tmp_path / "tinyproxy", source=FR) as proxy:
        yield proxy


@pytest.fixture(name="dante")
def dante_fixture(tmp_path: Path) -> Iterator[ProxyProcess]:
    """danted (SOCKS5) egressing from 127.0.0.3 ("DE")."""
    with danted(tmp_path / "danted", source=DE) as proxy:
        yield proxy


# --- many proxies in another process ---------------------------------------------------------

@dataclass
class Fleet:
    """An IP-echo server and ``count`` fault proxies served by a separate process (so that
    hundreds of proxies do not compete with the code under test for this process's GIL)."""

    echo_port: int
    proxy_ports: list[int]
    proc: subprocess.Popen[str]

    def echo_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.echo_port}{path}"

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextlib.contextmanager
def fleet(count: int, delay: float) -> Iterator[Fleet]:
    """A :class:`Fleet` of ``count`` proxies egressing as "FR", each waiting ``delay``
    seconds before it serves a request."""
    root = Path(__file__).parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.proxies", str(count),
                             str(delay)], cwd=root, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ports = json.loads(proc.stdout.readline())
    running = Fleet(ports["echo"], ports["proxies"], proc)
    try:
        yield running
    finally:
        running.close()


def _serve_fleet(count: int, delay: float) -> None:
    server = EchoServer()
    proxies = [FaultProxy(source=FR) for _ in range(count)]
    for proxy in proxies:
        proxy.delay = delay
    print(json.dumps({"echo": server.port, "proxies": [p.port for p in proxies]}), flush=True)
    sys.stdin.read()  # until the test closes our stdin
    for proxy in proxies:
        proxy.close()
    server.close()


if __name__ == "__main__":
    _serve_fleet(int(sys.argv[1]), float(sys.argv[2]))
