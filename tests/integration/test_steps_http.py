"""The ``http`` step against a real HTTP server on 127.0.0.1 (``http_ctx.LocalServer``).

The server is reached through a connection with ``allow_private = true`` (it is on
loopback); the egress refusals themselves are in ``test_steps_http_guard.py``.
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from cadenza.domain.errors import Deferred, Fatal, ResourceFault, Retryable
from cadenza.domain.params import Scope, render
from cadenza.steps.builtin.http import PREVIEW_CAP, HttpConfig, HttpStep

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from http_ctx import BIG_TEXT, HttpTestContext, LocalServer, settings_with


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    srv = LocalServer()
    yield srv
    srv.close()


@pytest.fixture
def make_ctx(server: LocalServer, tmp_path: Path) -> Iterator[Any]:
    made: list[HttpTestContext] = []

    def make(step_timeout: float = 30.0, **connection: Any) -> HttpTestContext:
        local = {"type": "http", "base_url": server.url(""), "allow_private": True,
                 **connection}
        ctx = HttpTestContext(tmp_path, settings_with({"local": local}),
                             timeout=step_timeout)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.close()


def run(ctx: HttpTestContext, **fields: Any) -> dict[str, Any]:
    config = HttpConfig.model_validate({"name": "call", "type": "http", **fields})
    result = HttpStep().run(ctx, config)
    assert result.rows is None
    return dict(result.output)


def test_get_json_is_exposed_to_later_steps(make_ctx: Any, server: LocalServer) -> None:
    ctx = make_ctx()
    out = run(ctx, connection="local", path="/json")
    assert out["status"] == 200
    assert out["json"] == {"a": {"b": 42}, "list": [1, 2]}
    assert out["url"] == server.url("/json")
    assert out["headers"]["content-type"] == "application/json"
    assert isinstance(out["elapsed_ms"], int) and out["truncated"] is False
    scope = Scope(steps={"call": out})
    assert render("${steps.call.json.a.b}", scope) == 42
    assert render("${steps.call.status}", scope) == 200
    [event] = ctx.http_events()
    assert event["method"] == "GET" and event["host"] == "127.0.0.1"
    assert event["status"] == 200 and event["route"] is None
    assert isinstance(event["latency_ms"], int)


def test_post_json_with_query_headers_and_idempotency_key(make_ctx: Any,
                                                          server: LocalServer) -> None:
    ctx = make_ctx(headers={"X-Conn": "c", "X-Both": "from-connection"})
    out = run(ctx, connection="local", path="/echo", method="POST",
              json={"period": "2026-01", "rows": 24},
              query={"a": 1, "b": [1, 2], "c": True, "skip": None},
              headers={"X-Both": "from-step"})
    assert out["json"]["method"] == "POST"
    seen = server.seen[-1]
    assert json.loads(seen.body) == {"period": "2026-01", "rows": 24}
    assert seen.query == {"a": ["1"], "b": ["1", "2"], "c": ["true"]}
    assert seen.headers["x-conn"] == "c" and seen.headers["x-both"] == "from-step"
    assert seen.headers["idempotency-key"] == "run-1:call"
    assert seen.headers["user-agent"].startswith("cadenza/")
    assert seen.headers["content-type"] == "application/json"


def test_idempotency_key_given_and_absent_on_get(make_ctx: Any, server: LocalServer) -> None:
    ctx = make_ctx()
    run(ctx, connection="local", path="/echo", method="PUT", body="raw text",
        idempotency_key="run-1:2026-01")
    assert server.seen[-1].headers["idempotency-key"] == "run-1:2026-01"
    assert server.seen[-1].body == b"raw text"
    run(ctx, connection="local", path="/echo")
    assert "idempotency-key" not in server.seen[-1].headers


def test_expect_codes_and_patterns(make_ctx: Any) -> None:
    ctx = make_ctx()
    assert run(ctx, connection="local", path="/status/204")["status"] == 204
    assert run(ctx, connection="local", path="/status/404", expect=404)["status"] == 404
    assert run(ctx, connection="local", path="/status/302", expect=["3xx"])["status"] == 302
    with pytest.raises(Fatal, match=r"HTTP 201.*expected 200"):
        run(ctx, connection="local", path="/status/201", expect=200)


def test_preview_is_capped_at_64_kib(make_ctx: Any) -> None:
    out = run(make_ctx(), connection="local", path="/big")
    assert len(BIG_TEXT) == 1024 * 1024
    assert len(out["preview"]) == PREVIEW_CAP == 64 * 1024
    assert out["truncated"] is True and out["json"] is None


@pytest.mark.reliability_case(29)
def test_json_over_10_mib_is_not_decoded(make_ctx: Any) -> None:
    ctx = make_ctx()
    out = run(ctx, connection="local", path="/bigjson")
    assert out["json"] is None and out["truncated"] is True
    assert len(out["preview"]) == PREVIEW_CAP
    assert any("not decoded" in line for _, line in ctx.log_record.lines)


@pytest.mark.reliability_case(29)
def test_gzip_is_decoded_and_a_gzip_bomb_is_cut(make_ctx: Any) -> None:
    ctx = make_ctx()
    assert run(ctx, connection="local", path="/gzip-json")["json"] == {"zipped": True}
    tracemalloc.start()
    try:
        out = run(ctx, connection="local", path="/bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out["json"] is None and out["truncated"] is True
    assert peak < 64 * 1024 * 1024  # the bomb inflates to 256 MiB; reading stops at 10 MiB
    text = run(ctx, connection="local", path="/bomb", query={"type": "text/plain"})
    assert text["preview"] == "\x00" * PREVIEW_CAP


def test_429_defers_until_retry_after(make_ctx: Any) -> None:
    ctx = make_ctx()
    before = datetime.now(UTC)
    with pytest.raises(Deferred) as caught:
        run(ctx, connection="local", path="/status/429", query={"retry_after": "2"})
    assert caught.value.until is not None
    assert abs((caught.value.until - before).total_seconds() - 2) < 1
    when = (datetime.now(UTC) + timedelta(seconds=90)).replace(microsecond=0)
    with pytest.raises(Deferred) as caught:
        run(ctx, connection="local", path="/status/429",
            query={"retry_after": format_datetime(when, usegmt=True)})
    assert caught.value.until == when


@pytest.mark.parametrize("status", [502, 503, 504, 408])
def test_gateway_errors_are_retryable(make_ctx: Any, status: int) -> None:
    with pytest.raises(Retryable, match=str(status)):
        run(make_ctx(), connection="local", path=f"/status/{status}")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 500])
def test_client_errors_are_fatal_with_a_redacted_excerpt(make_ctx: Any, status: int) -> None:
    with pytest.raises(Fatal) as caught:
        run(make_ctx(), connection="local", path=f"/status/{status}",
            query={"leak": "1"})
    message = str(caught.value)
    assert f"HTTP {status}" in message and "bad request" in message
    assert "hunter2" not in message


def test_407_is_a_resource_fault(make_ctx: Any) -> None:
    with pytest.raises(ResourceFault):
        run(make_ctx(), connection="local", path="/status/407")


@pytest.mark.reliability_case(29)
def test_timeout_is_retryable_and_bounded(make_ctx: Any) -> None:
    started = time.monotonic()
    with pytest.raises(Retryable, match="timed out"):
        run(make_ctx(step_timeout=1.0), connection="local", path="/slow", query={"s": "3"})
    assert time.monotonic() - started < 2.5
    with pytest.raises(Retryable, match="timed out"):  # the connection's timeout caps too
        run(make_ctx(timeout="1s"), connection="local", path="/slow", query={"s": "3"})


def test_connection_refused_is_retryable(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = HttpTestContext(tmp_path, settings_with({"local": {
        "type": "http", "base_url": f"http://127.0.0.1:{port}", "allow_private": True}}))
    try:
        with pytest.raises(Retryable, match="ConnectError"):
            run(ctx, connection="local", path="/")
        assert ctx.http_events()[0]["status"] is None
    finally:
        ctx.close()


def test_secrets_stay_out_of_output_events_and_log(make_ctx: Any, server: LocalServer) -> None:
    ctx = make_ctx(headers={"Authorization": "Bearer s3cr3t-token", "X-Api-Key": "k3y-v4lue"})
    config = {"connection": "local", "path": "/cookie", "query": {"api_key": "q-s3cr3t"}}
    out = run(ctx, **config)
    assert server.seen[-1].headers["authorization"] == "Bearer s3cr3t-token"  # it was sent
    assert server.seen[-1].query["api_key"] == ["q-s3cr3t"]
    assert out["headers"]["set-cookie"] == "***" and out["headers"]["x-request-id"] == "abc"
    shown = json.dumps([out, [e.__dict__ for e in ctx.events], ctx.log_record.lines])
    for secret in ("s3cr3t-token", "k3y-v4lue", "q-s3cr3t", "s3cr3t-cookie"):
        assert secret not in shown
    assert "api_key=***" in out["url"]


@pytest.mark.reliability_case(29)
def test_crlf_in_a_rendered_header_is_refused_before_sending(make_ctx: Any,
                                                             server: LocalServer) -> None:
    ctx = make_ctx()
    before = len(server.seen)
    config = HttpConfig.model_validate({"name": "call", "type": "http", "connection": "local",
                                        "path": "/echo", "headers": {"X-A": "${params.a}"}})
    for bad in ({"headers": {"X-A": "a\r\nX-Injected: 1"}},
                {"headers": {"X-A\r\nX-B": "1"}},
                {"idempotency_key": "k\nX-Injected: 1"}):
        with pytest.raises(Fatal, match="line break"):
            HttpStep().run(ctx, config.model_copy(update=bad))
    assert len(server.seen) == before and ctx.http_events() == []


@pytest.mark.parametrize("path", ["/../admin", "/a/%2e%2e/b", "//evil.example/x", "/a\\b"])
def test_path_stays_under_the_connection(make_ctx: Any, path: str) -> None:
    config = HttpConfig.model_validate({"name": "call", "type": "http", "connection": "local",
                                        "path": "/${params.p}"})
    with pytest.raises(Fatal, match="path"):
        HttpStep().run(make_ctx(), config.model_copy(update={"path": path}))


def test_head_and_redirects_within_a_connection(make_ctx: Any, server: LocalServer) -> None:
    ctx = make_ctx()
    assert run(ctx, connection="local", path="/json", method="HEAD")["preview"] == ""
    out = run(ctx, connection="local", path="/redirect", method="POST", json={"x": 1},
              query={"to": "/json", "code": "303"})
    assert out["json"] == {"a": {"b": 42}, "list": [1, 2]}
    assert [e["status"] for e in ctx.http_events()[-2:]] == [303, 200]
    assert [e["hop"] for e in ctx.http_events()[-2:]] == [0, 1]
    assert server.seen[-1].method == "GET"  # 303: the body is not sent again


@pytest.mark.reliability_case(29)
def test_a_body_that_trickles_in_is_cut_at_the_deadline(make_ctx: Any) -> None:
    """A server that answers at once and then sends its body one byte every 0.2 s (each
    read well within any per-read timeout) is stopped by the step's deadline for the whole
    exchange: a retryable timeout after about the step's time, not after the 8 s the body
    would take. The connection's own ``timeout`` caps the whole exchange the same way."""
    started = time.monotonic()
    with pytest.raises(Retryable, match="time"):
        run(make_ctx(step_timeout=1.0), connection="local", path="/trickle",
            query={"n": "40", "every": "0.2"})
    assert time.monotonic() - started < 2.5
    started = time.monotonic()
    with pytest.raises(Retryable, match="time"):
        run(make_ctx(timeout="1s"), connection="local", path="/trickle",
            query={"n": "40", "every": "0.2"})
    assert time.monotonic() - started < 2.5


@pytest.mark.reliability_case(29)
@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="a full accept queue drops SYNs on Linux (Windows answers a reset)")
def test_a_host_that_never_answers_the_connect_is_a_retryable_connect_timeout(
        tmp_path: Path) -> None:
    """A server whose accept queue is full drops the SYN of a new connection, as an
    unreachable or firewalled host does: the connect itself hangs, and the step stops at
    the connection's timeout with a retryable ConnectTimeout, recorded in its
    HTTP_REQUEST event."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))  # fills the queue, never accepted
    ctx = HttpTestContext(tmp_path, settings_with({"dark": {
        "type": "http", "base_url": f"http://127.0.0.1:{port}", "allow_private": True,
        "timeout": "1s"}}))
    try:
        started = time.monotonic()
        with pytest.raises(Retryable, match="ConnectTimeout"):
            run(ctx, connection="dark", path="/")
        assert time.monotonic() - started < 2.5
        [event] = ctx.http_events()
        assert event["status"] is None and "ConnectTimeout" in event["error"]
    finally:
        ctx.close()
        filler.close()
        listener.close()
