"""The http step's pure parts, and the refusals it makes before any request is sent."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_ctx import HttpTestContext, settings_with

from cadenza.domain.errors import Fatal, Retryable
from cadenza.steps.builtin.http import HttpConfig, HttpStep, _join, _matches, _query, retry_after
from cadenza.steps.registry import registry

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("header", "expected"), [
    ("2", NOW + timedelta(seconds=2)),
    (" 120 ", NOW + timedelta(seconds=120)),
    ("Sun, 01 Mar 2026 12:00:30 GMT", NOW + timedelta(seconds=30)),
    ("Sun, 01 Mar 2026 11:00:00 GMT", NOW),  # a date in the past: now
    ("99999999999999999999", NOW + timedelta(days=1)),  # capped
    (None, NOW + timedelta(seconds=60)), ("soon", NOW + timedelta(seconds=60)),
    ("-5", NOW + timedelta(seconds=60)),
])
def test_retry_after(header: str | None, expected: datetime) -> None:
    assert retry_after(header, NOW) == expected


def test_expect_patterns() -> None:
    assert _matches(204, ["2xx"]) and _matches(404, ["2xx", "404"])
    assert not _matches(301, ["2xx"]) and not _matches(200, ["201"])


def test_query_values() -> None:
    assert _query({"a": 1, "b": [1, "x"], "c": False, "d": None, "e": {"k": [1]}}) == [
        ("a", 1), ("b", 1), ("b", "x"), ("c", False), ("e", '{"k":[1]}')]


@pytest.mark.parametrize(("base", "path", "joined"), [
    ("https://api.example.org", "/v1/x", "https://api.example.org/v1/x"),
    ("https://api.example.org/", "/v1/x?a=1", "https://api.example.org/v1/x?a=1"),
    ("https://api.example.org/base/", "/x", "https://api.example.org/base/x"),
    ("https://api.example.org/base", None, "https://api.example.org/base"),
    ("https://api.example.org/base", "/a b/@evil.org", "https://api.example.org/base/a%20b/@evil.org"),
])
def test_join_stays_on_the_base(base: str, path: str | None, joined: str) -> None:
    assert str(_join(base, path)) == joined


@pytest.mark.parametrize("path", ["/../x", "/a/..", "/%2E%2e/x", "//evil.org/x", "/a\\b",
                                  "x", "/a\nb", "/./a"])
def test_join_refuses_escapes(path: str) -> None:
    with pytest.raises(Fatal, match="path"):
        _join("https://api.example.org/base", path)


def test_http_is_registered_with_run() -> None:
    step_type = registry()["http"]
    assert step_type is HttpStep and callable(step_type().run)


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[HttpTestContext]:
    connections = {"db": {"type": "sql", "url": "sqlite:///x.db"},
                   "api": {"type": "http", "base_url": "https://api.example.org"}}
    context = HttpTestContext(tmp_path, settings_with(connections))
    yield context
    context.close()


def config(**fields: Any) -> HttpConfig:
    return HttpConfig.model_validate({"name": "call", "type": "http", **fields})


def test_refusals_before_sending(ctx: HttpTestContext) -> None:
    with pytest.raises(Fatal, match="no route of pool 'egress'; refusing to go direct"):
        HttpStep().run(ctx, config(url="https://example.org/", via="egress"))
    with pytest.raises(Fatal, match="not an http connection"):
        HttpStep().run(ctx, config(connection="db", path="/x"))
    ctx.is_cancelled = True
    with pytest.raises(Retryable, match="canceled"):
        HttpStep().run(ctx, config(connection="api", path="/x"))
    assert ctx.http_events() == []


def test_no_time_left_is_retryable(tmp_path: Path) -> None:
    ctx = HttpTestContext(tmp_path, settings_with(), timeout=0)
    try:
        with pytest.raises(Retryable, match="out of time"):
            HttpStep().run(ctx, config(url="https://example.org/"))
    finally:
        ctx.close()


def test_user_agent_and_encodings_are_set_unless_given(ctx: HttpTestContext) -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    class Step(HttpStep):
        def _target(self, ctx: Any, cfg: HttpConfig) -> Any:
            target = super()._target(ctx, cfg)
            target.client = httpx.Client(transport=httpx.MockTransport(record))
            target.owned = True
            return target

    Step().run(ctx, config(connection="api", path="/x"))
    Step().run(ctx, config(connection="api", path="/x",
                           headers={"User-Agent": "mine", "Accept-Encoding": "identity"}))
    assert seen[0].headers["user-agent"].startswith("cadenza/")
    assert seen[0].headers["accept-encoding"] == "gzip, deflate"
    assert (seen[1].headers["user-agent"], seen[1].headers["accept-encoding"]) == (
        "mine", "identity")
