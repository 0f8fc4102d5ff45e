"""The runs' routers are tried first (``web/app.py`` ``_hot_first``): every path of the app
still reaches the route it reached in the order the routers were included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Match

import cadenza.web.app as web_app
from cadenza.store import Store


def _paths(routes: list[Any]) -> list[tuple[str, str]]:
    """(method, a concrete path) for every route, parameters filled in."""
    found: list[tuple[str, str]] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            found.extend(_paths(inner.routes))
            continue
        path = getattr(route, "path", None)
        if path is None:
            continue
        concrete = re.sub(r"\{[^}]+\}", "x1", path) or "/"
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            found.append((method, concrete))
    return found


def _first_match(routes: list[Any], method: str, path: str) -> tuple[int, Any]:
    """What Starlette's router would take: the first full match, else the first partial."""
    scope = {"type": "http", "path": path, "root_path": "", "method": method,
             "headers": [], "query_string": b""}
    partial = None
    for route in routes:
        if hasattr(route, "_match"):  # FastAPI's included router: the route inside it
            match, _child, inner, _context = route._match(scope)
        else:
            (match, _child), inner = route.matches(scope), route
        if match == Match.FULL:
            return 0, inner
        if match == Match.PARTIAL and partial is None:
            partial = inner
    return 1, partial


def _who(route: Any) -> str:
    endpoint = getattr(route, "endpoint", None)
    if endpoint is not None:
        return f"{endpoint.__module__}.{endpoint.__qualname__}"
    return str(getattr(route, "path", type(route).__name__))


def test_the_runs_routers_come_first_and_shadow_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(f"sqlite:///{(tmp_path / 'c.db').as_posix()}")
    try:
        app = web_app.create_app(store)
        with monkeypatch.context() as m:
            m.setattr(web_app, "_hot_first", lambda app, routers: None)
            included_order = web_app.create_app(store)
    finally:
        store.close()
    routes = app.router.routes
    checked = 0
    for method, path in _paths(included_order.router.routes):
        now = _first_match(routes, method, path)
        before = _first_match(included_order.router.routes, method, path)
        # The same endpoint, whichever app's route object serves it.
        assert (now[0], _who(now[1])) == (before[0], _who(before[1])), (method, path)
        checked += 1
    assert checked > 60
    hot = [k for k, r in enumerate(routes) if getattr(r, "original_router", None) is not None
           and any(getattr(x, "path", "").startswith(("/runs", "/api/runs"))
                   for x in r.original_router.routes)]
    assert hot == [2, 3], [getattr(r, "path", r) for r in routes]
