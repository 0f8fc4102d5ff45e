"""The ``python`` step's calling convention: which keyword arguments, ``ctx``, returns."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from cadenza import Fatal
from cadenza.steps.builtin.python import arguments, load_callable, plugins_first, to_result


def named(a: int, b: int = 0) -> None:
    """Takes a and b."""


def with_ctx(a: int, ctx: Any = None) -> None:
    """Takes a and ctx."""


def takes_all(**kwargs: Any) -> None:
    """Takes anything."""


def test_own_arguments_always_go_and_shared_params_only_when_accepted() -> None:
    ctx = object()
    assert arguments(named, {"a": 1, "period": "p"}, {"b": 2}, ctx) == {"a": 1, "b": 2}
    assert arguments(with_ctx, {"a": 1}, {}, ctx) == {"a": 1, "ctx": ctx}
    assert arguments(takes_all, {"a": 1, "period": "p"}, {"b": 2}, ctx) == {
        "a": 1, "period": "p", "b": 2}
    with pytest.raises(Fatal, match=r"does not accept 'c'.*it accepts: a, b"):
        arguments(named, {}, {"c": 1}, ctx)


@pytest.mark.parametrize(("value", "rows", "output"), [
    (None, None, {}),
    (7, 7, {}),
    ({"files": ["a"]}, None, {"files": ["a"]}),
    ({"rows": 3, "x": 1}, 3, {"rows": 3, "x": 1}),
])
def test_returns(value: object, rows: int | None, output: dict[str, Any]) -> None:
    result = to_result(value, "m:f")
    assert result.rows == rows and dict(result.output) == output


@pytest.mark.parametrize(("value", "message"), [
    ({"x": object()}, "not JSON-able"),
    ({"x": float("nan")}, "not JSON-able"),
    ({1: "a"}, "non-string keys"),
    (True, "returned bool"),
    ("text", "returned str"),
])
def test_bad_returns_are_fatal(value: object, message: str) -> None:
    with pytest.raises(Fatal, match=message):
        to_result(value, "m:f")


def test_callables_come_from_plugins_first(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "cz_unit_plugin.py").write_text(
        "class Tools:\n    @staticmethod\n    def go():\n        return 1\nVALUE = 3\n")
    plugins_first(tmp_path)
    try:
        assert sys.path[0] == str(plugins)
        assert load_callable("cz_unit_plugin:Tools.go")() == 1
        with pytest.raises(Fatal, match="has no 'missing'"):
            load_callable("cz_unit_plugin:missing")
        with pytest.raises(Fatal, match="is a int, not a function"):
            load_callable("cz_unit_plugin:VALUE")
        with pytest.raises(Fatal, match="cannot import 'cz_no_such_module'"):
            load_callable("cz_no_such_module:f")
    finally:
        sys.path.remove(str(plugins))
        sys.modules.pop("cz_unit_plugin", None)
