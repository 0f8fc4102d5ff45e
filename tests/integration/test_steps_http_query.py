"""The ``http`` step against a real HTTP server on 127.0.0.1: the query string written in
``url`` or in a connection's ``path`` is sent, with the step's ``query`` after it; a header
value that HTTP cannot carry is a fatal error naming the header, not showing its value."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cadenza.domain.errors import Fatal
from cadenza.netguard import Address
from cadenza.steps.builtin.http import HttpConfig, HttpStep

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from http_ctx import HttpTestContext, settings_with


class _Raw(BaseHTTPRequestHandler):
    """Records the request target exactly as it came (query order and encoding kept)."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.server.targets.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_POST = do_GET


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    targets: list[str]


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Raw)
    srv.targets = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def _base(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def ctx(server: _Server, tmp_path: Path) -> Iterator[HttpTestContext]:
    connections = {
        "api": {"type": "http", "base_url": _base(server) + "/v1", "allow_private": True},
        "tokened": {"type": "http", "base_url": _base(server), "allow_private": True,
                    "headers": {"X-Api-Token": "t\u00f6ken-s3cr3t"}},
    }
    context = HttpTestContext(tmp_path, settings_with(connections))
    yield context
    context.close()


def loopback_is_public(address: Address) -> bool:
    """The local server stands for a public one, so that a bare ``url`` may reach it."""
    return True


def run(ctx: HttpTestContext, **fields: Any) -> dict[str, Any]:
    config = HttpConfig.model_validate({"name": "call", "type": "http", **fields})
    return dict(HttpStep(is_public=loopback_is_public).run(ctx, config).output)


def test_the_query_of_a_url_is_kept_and_the_steps_query_follows_it(
        ctx: HttpTestContext, server: _Server) -> None:
    url = _base(server) + "/echo?a=1&a=2&sp=x%20y&empty="
    out = run(ctx, url=url, query={"a": 3, "b": [4, 5], "flag": True, "skip": None})
    assert out["status"] == 200
    assert server.targets[-1] == "/echo?a=1&a=2&sp=x%20y&empty=&a=3&b=4&b=5&flag=true"
    run(ctx, url=url)  # no query of the step: the URL as written
    assert server.targets[-1] == "/echo?a=1&a=2&sp=x%20y&empty="


def test_the_query_of_a_connection_path_is_kept(ctx: HttpTestContext,
                                                server: _Server) -> None:
    run(ctx, connection="api", path="/items?page=2&sort=-date", query={"limit": 10})
    assert server.targets[-1] == "/v1/items?page=2&sort=-date&limit=10"
    run(ctx, connection="api", path="/items?page=3", method="POST", json={"x": 1})
    assert server.targets[-1] == "/v1/items?page=3"
    run(ctx, connection="api", path="/items", query={"q": "a b&c"})
    assert server.targets[-1] == "/v1/items?q=a+b%26c"


def test_a_non_ascii_header_value_is_fatal_naming_the_header_only(
        ctx: HttpTestContext, server: _Server) -> None:
    before = len(server.targets)
    with pytest.raises(Fatal) as info:
        run(ctx, connection="api", path="/x", headers={"X-Owner": "Zo\u00eb-s3cr3t"})
    message = str(info.value)
    assert "header 'X-Owner'" in message and "non-ASCII" in message
    assert "s3cr3t" not in message and "Zo" not in message
    with pytest.raises(Fatal) as info:
        run(ctx, connection="tokened", path="/x")
    message = str(info.value)
    assert "connection 'tokened'" in message and "header 'X-Api-Token'" in message
    assert "s3cr3t" not in message
    with pytest.raises(Fatal, match="header 'Idempotency-Key'"):
        run(ctx, connection="api", path="/x", method="POST", idempotency_key="cl\u00e9")
    assert len(server.targets) == before  # refused before anything was sent
