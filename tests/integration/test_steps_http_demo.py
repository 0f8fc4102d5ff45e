"""The demo home's ``downstream`` connection answers in-process: the ``tell-downstream``
step of ``sales-load`` succeeds with no server running and the network cut off."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from cadenza.config.schema_settings import HttpConnection
from cadenza.domain.errors import Fatal
from cadenza.domain.params import Scope, render
from cadenza.home import Home, create_home
from cadenza.steps.builtin.http import HttpConfig, HttpStep

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from http_ctx import HttpTestContext, settings_with


@pytest.fixture
def demo(tmp_path: Path) -> Home:
    return create_home(tmp_path / "home", example=True)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No name resolution and no outgoing connection in this process."""

    def cut(*args: Any, **kwargs: Any) -> Any:
        raise OSError("network cut off by the test")

    monkeypatch.setattr(socket, "getaddrinfo", cut)
    monkeypatch.setattr(socket.socket, "connect", cut)
    monkeypatch.setattr(socket, "create_connection", cut)


@pytest.fixture
def ctx(demo: Home) -> Iterator[HttpTestContext]:
    context = HttpTestContext(demo.path, demo.load_config().settings, step_name="tell-downstream")
    yield context
    context.close()


def test_the_demo_home_has_the_app_and_points_the_connection_at_it(demo: Home) -> None:
    assert (demo.path / "plugins" / "demo_downstream.py").is_file()
    assert (demo.path / "plugins" / "demo_tasks.py").is_file()
    downstream = demo.load_config().settings.connections["downstream"]
    assert isinstance(downstream, HttpConnection)
    assert downstream.app == "demo_downstream:app" and not downstream.allow_private


def test_tell_downstream_succeeds_offline(demo: Home, ctx: HttpTestContext,
                                          offline: None) -> None:
    [*_, step] = demo.load_config().jobs["sales-load"].steps
    assert isinstance(step, HttpConfig)
    scope = Scope(params={"period": "2026-01"}, steps={"load-file": {"rows": 24}},
                  run_id="run-1")
    rendered = step.model_copy(update={"json_": render(step.json_, scope),
                                       "idempotency_key": render(step.idempotency_key, scope)})
    out = HttpStep().run(ctx, rendered).output
    assert out["status"] == 200
    assert out["json"] == {"accepted": True, "period": "2026-01", "rows": 24,
                           "idempotency_key": "run-1:2026-01"}
    assert render("${steps.tell-downstream.status}", Scope(steps={"tell-downstream": out})) \
        == 200
    [event] = ctx.http_events()
    assert event["route"] == "in-process" and event["host"] == "downstream.invalid"
    assert event["status"] == 200 and event["method"] == "POST"


def test_the_demo_app_answers_like_a_service(ctx: HttpTestContext, offline: None) -> None:
    def call(**fields: Any) -> Any:
        config = HttpConfig.model_validate({"name": "tell-downstream", "type": "http",
                                            "connection": "downstream", **fields})
        return HttpStep().run(ctx, config).output

    with pytest.raises(Fatal, match="HTTP 404"):
        call(path="/elsewhere")
    with pytest.raises(Fatal, match="HTTP 405"):
        call(path="/refresh")
    with pytest.raises(Fatal, match="HTTP 400"):
        call(path="/refresh", method="POST", body="not json")
    assert call(path="/refresh", method="POST", json={"period": "x"})["json"]["accepted"]


def test_app_must_be_module_colon_attribute_and_loadable(tmp_path: Path) -> None:
    for bad in ("demo_downstream", "a b:app", "mod:", ":app", "mod:app()"):
        with pytest.raises(ValidationError, match="module:attribute"):
            HttpConnection.model_validate({"type": "http", "base_url": "http://x.invalid",
                                           "app": bad})
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "not_an_app.py").write_text("app = 3\n", encoding="utf-8")
    connections = {"missing": {"type": "http", "base_url": "http://x.invalid",
                               "app": "no_such_module_here:app"},
                   "notcallable": {"type": "http", "base_url": "http://x.invalid",
                                   "app": "not_an_app:app"}}
    ctx = HttpTestContext(tmp_path, settings_with(connections))
    try:
        with pytest.raises(Fatal, match="cannot load the in-process HTTP app"):
            ctx.connection("missing")
        with pytest.raises(Fatal, match="not a WSGI callable"):
            ctx.connection("notcallable")
    finally:
        ctx.close()
        sys.modules.pop("not_an_app", None)


def test_an_app_that_raises_fails_the_step(tmp_path: Path) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "broken_app.py").write_text(
        "def app(environ, start_response):\n    raise RuntimeError('boom')\n", encoding="utf-8")
    settings = settings_with({"broken": {"type": "http", "base_url": "http://x.invalid",
                                         "app": "broken_app:app"}})
    ctx = HttpTestContext(tmp_path, settings)
    try:
        config = HttpConfig.model_validate({"name": "call", "type": "http",
                                            "connection": "broken", "path": "/x"})
        with pytest.raises(Fatal, match="in-process HTTP app failed: RuntimeError: boom"):
            HttpStep().run(ctx, config)
        [event] = ctx.http_events()
        assert event["route"] == "in-process" and event["status"] is None
    finally:
        ctx.close()
        sys.modules.pop("broken_app", None)
