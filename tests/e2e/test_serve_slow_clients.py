"""Slow clients against a real `cadenza serve`: a request whose headers or body arrive
slower than ``[server] header_timeout`` / ``body_timeout`` is cut with 408, while a long
response (a followed run log) and an idle keep-alive between requests are not.

Real sleeps here are the point: this is how a network client behaves, not a schedule."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.e2e.serve_helpers import Served, eventually

NAP = '''
import time


def nap(seconds: float = 3.0, ctx=None) -> float:
    time.sleep(seconds)
    return seconds
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    home = tmp_path_factory.mktemp("slow") / "home"
    cli = CliRunner()
    assert cli.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    config = home / "cadenza.toml"
    text = config.read_text(encoding="utf-8")
    assert "[server]" in text
    config.write_text(text.replace("[server]", '[server]\nheader_timeout = "1s"\n'
                                               'body_timeout = "1s"', 1), encoding="utf-8")
    (home / "plugins" / "slow_tasks.py").write_text(NAP, encoding="utf-8")
    with (home / "jobs.toml").open("a", encoding="utf-8") as jobs:
        jobs.write('\n[jobs.nap]\n\n[[jobs.nap.steps]]\nname = "nap"\ntype = "python"\n'
                   'callable = "slow_tasks:nap"\nop_kwargs = { seconds = 3.0 }\n')
    made = cli.invoke(app, ["--home", str(home), "tokens", "create", "ci", "--role",
                            "operator"])
    assert made.exit_code == 0, made.output
    token = next(w for w in made.output.split() if w.startswith("cdz_"))
    server = Served(home)
    try:
        server.wait_ready()
        yield server, token
    finally:
        server.stop()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (10 s at most)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_connection_that_sends_half_a_request_line_is_cut(served: tuple[Served, str]
                                                            ) -> None:
    server, _ = served
    with _connect(server.port) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /api/hea")
        answer = _read_all(sock)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert 0.8 <= waited < 4, waited


def test_a_silent_connection_is_cut(served: tuple[Served, str]) -> None:
    server, _ = served
    with _connect(server.port) as sock:
        started = time.monotonic()
        answer = _read_all(sock)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert waited < 4, waited


def test_headers_trickled_a_byte_at_a_time_are_cut_before_they_end(
        served: tuple[Served, str]) -> None:
    server, _ = served
    request = b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40 + b"\r\n\r\n"
    sent = 0
    with _connect(server.port) as sock:
        started = time.monotonic()
        try:
            for byte in request:
                sock.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.1)
                if time.monotonic() - started > 6:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = _read_all(sock)
    assert sent < len(request), "the whole request went through"
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"200 OK" not in answer


def test_a_body_slower_than_body_timeout_gets_408(served: tuple[Served, str]) -> None:
    server, token = served
    head = (f"POST /api/jobs/hello/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}"
            "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode()
    with _connect(server.port) as sock:
        sock.sendall(head)
        sock.sendall(b'{"params": ')
        started = time.monotonic()
        answer = _read_all(sock)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"connection: close" in answer.lower()
    assert waited < 4, waited


def test_normal_requests_keep_alive_and_long_responses_still_work(
        served: tuple[Served, str]) -> None:
    server, token = served
    base = f"http://127.0.0.1:{server.port}"
    bearer = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=bearer, timeout=30) as client:
        assert client.get("/api/health").is_success
        time.sleep(1.5)  # idle longer than header_timeout on the same connection
        assert client.get("/api/health").is_success
        posted = client.post("/api/jobs/nap/runs", json={})
        assert posted.status_code in (200, 201, 202), posted.text
        run_id = posted.json()["run_id"]
        eventually(lambda: client.get(f"/api/runs/{run_id}").json()["state"] == "RUNNING",
                   what="the nap to start")
        started = time.monotonic()
        stream = client.get(f"/api/runs/{run_id}/log", params={"follow": "1"})
        lasted = time.monotonic() - started
    assert stream.status_code == 200
    assert stream.text.endswith("event: end\ndata: {}\n\n"), stream.text
    assert lasted > 1.5, lasted  # longer than both timeouts, and not cut


def test_read_timeouts_have_bounds(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from cadenza.config.schema_settings import ServerSettings

    assert ServerSettings().header_timeout.total_seconds() == 10
    assert ServerSettings().body_timeout.total_seconds() == 30
    for bad in ("0s", "11m", "1h"):
        with pytest.raises(ValidationError, match="how long a client may take"):
            ServerSettings.model_validate({"header_timeout": bad})


def test_the_header_deadline_holds_on_uvicorns_pure_python_protocol_too() -> None:
    """Where httptools is missing, uvicorn speaks h11: the same deadline applies."""
    import threading

    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from cadenza.web.slow_clients import deadline_protocol
    from tests.e2e.serve_helpers import free_port

    async def hello(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"hi"})  # type: ignore[operator]

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(hello, host="127.0.0.1", port=port, log_level="error",
                                           http=deadline_protocol(1.0, H11Protocol)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: server.started, seconds=10, what="uvicorn to start")
        assert httpx.get(f"http://127.0.0.1:{port}/").text == "hi"
        with _connect(port) as sock:
            sock.sendall(b"GET / HT")
            answer = _read_all(sock)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
    finally:
        server.should_exit = True
        thread.join(10)
