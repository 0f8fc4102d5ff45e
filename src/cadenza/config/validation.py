"""Pydantic errors → located problems whose message says what was expected.

:func:`validate_model` validates one piece of raw TOML data against a model and reports
each error at the right spot: unknown keys at the key (listing the allowed ones), missing
keys at the table that lacks them, wrong values at the value. Error locations are mapped
through the raw data, so pydantic's union tags and type names never reach the user.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from cadenza.config.problems import Anchor, KeyPath, PathElem, Reporter

M = TypeVar("M", bound=BaseModel)

_TYPE_MESSAGES = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "finite_number": "expected a finite number (not nan or inf)",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected an array",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
    "invalid-json-value": "expected a string, number, boolean, array or table (not a date)",
}
_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def validate_model(cls: type[M], data: object, report: Reporter, at: KeyPath = (),
                   **extra: Any) -> M | None:
    """Validate ``data`` (found at ``at`` in the file) as ``cls``; report every error.

    ``extra`` keys are added to a table ``data`` before validation (values the file
    does not hold, like a job's id taken from its table name). Returns None on errors.
    """
    payload = {**data, **extra} if extra and isinstance(data, dict) else data
    try:
        return cls.model_validate(payload)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            report_error(error, cls, payload, report, at, hidden=frozenset(extra))
        return None


def report_error(error: ErrorDetails, cls: type[BaseModel], data: object, report: Reporter,
                 at: KeyPath, hidden: frozenset[str] = frozenset()) -> None:
    """Report one pydantic error of validating ``data`` as ``cls`` (``hidden`` keys are
    not offered as allowed keys: the loader supplies them)."""
    loc = tuple(error["loc"])
    kind = error["type"]
    path, anchor = data_path(loc, data, missing=kind == "missing")
    if kind == "missing":
        report.error((*at, *path), f"missing required key {path[-1]!r}", at="parent")
        return
    if kind == "extra_forbidden":
        allowed = [k for k in _allowed(cls, loc) if k not in hidden]
        report.error((*at, *path), _unknown_key(str(path[-1]), allowed), at="key")
        return
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        ctx = error.get("ctx", {})
        expected = str(ctx.get("expected_tags", "")).replace("'", "")
        if kind == "union_tag_not_found" or not expected:
            expected = _tags(cls, loc)
            report.error((*at, *path, "type"), f"missing required key 'type': expected one "
                         f"of {expected}", at="parent")
        else:
            report.error((*at, *path, "type"), f"unknown type {ctx.get('tag')!r}: expected "
                         f"one of {expected}")
        return
    report.error((*at, *path), _message(error), at=anchor)


def data_path(loc: Sequence[PathElem], data: object,
              missing: bool = False) -> tuple[KeyPath, Anchor]:
    """The path of ``loc`` in ``data``: union tags and type names dropped (the last element
    is kept when ``missing``: it names the missing key)."""
    out: list[PathElem] = []
    current = data
    anchor: Anchor = "value"
    for k, elem in enumerate(loc):
        last = k == len(loc) - 1
        if elem == "[key]":
            anchor = "key"
        elif isinstance(current, dict) and isinstance(elem, str) and elem in current:
            out.append(elem)
            current = current[elem]
        elif isinstance(current, list) and isinstance(elem, int) and 0 <= elem < len(current):
            out.append(elem)
            current = current[elem]
        elif last and missing and isinstance(current, dict):
            out.append(elem)
    return tuple(out), anchor


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx", {})
    value = error.get("input")
    if kind in _TYPE_MESSAGES:
        return f"{_TYPE_MESSAGES[kind]}, got {describe(value)}"
    if kind in _BOUNDS:
        symbol, name = _BOUNDS[kind]
        return f"expected a number {symbol} {ctx.get(name)}, got {describe(value)}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected')}, got {describe(value)}"
    if kind in ("too_short", "string_too_short"):
        least = ctx.get("min_length", 1)
        if kind == "string_too_short":
            return f"expected at least {least} character(s), got {describe(value)}"
        return f"expected at least {least} item(s), got {describe(value)}"
    if kind in ("too_long", "string_too_long"):
        return f"expected at most {ctx.get('max_length')} item(s) or characters"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    return str(error["msg"])


def describe(value: object) -> str:
    """A short description of a TOML value for messages: its type and, if short, itself."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}" if len(value) <= 60 else "a long string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _unknown_key(key: str, allowed: list[str]) -> str:
    if not allowed:
        return f"unknown key {key!r}"
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key {key!r}{hint}; allowed keys: {', '.join(allowed)}"


def model_keys(cls: type[BaseModel]) -> list[str]:
    """The keys a model accepts, as written in TOML (aliases included)."""
    return [info.alias or name for name, info in cls.model_fields.items()]


def _allowed(cls: type[BaseModel], loc: Sequence[PathElem]) -> list[str]:
    """The keys accepted by the table holding the unknown key ``loc[-1]``."""
    target: Any = cls
    for elem in loc[:-1]:
        target = _step(target, elem)
        if target is None:
            return []
    models = [m for m in union_members(target) if isinstance(m, type) and issubclass(m, BaseModel)]
    return model_keys(models[0]) if len(models) == 1 else []


def _tags(cls: type[BaseModel], loc: Sequence[PathElem]) -> str:
    target: Any = cls
    for elem in loc:
        target = _step(target, elem)
        if target is None:
            return "(unknown)"
    tags = [str(type_tag(m)) for m in union_members(target) if type_tag(m) is not None]
    return ", ".join(tags)


def _step(tp: Any, elem: PathElem) -> Any:
    """The type found one step (a field, an index, a table key or a union tag) into ``tp``."""
    for member in union_members(tp):
        if isinstance(member, type) and issubclass(member, BaseModel):
            fields = {info.alias or name: info for name, info in member.model_fields.items()}
            if isinstance(elem, str) and elem in fields:
                return fields[elem].annotation
            if type_tag(member) == elem:
                return member
            continue
        origin = typing.get_origin(member)
        args = typing.get_args(member)
        if origin is list and isinstance(elem, int) and args:
            return args[0]
        if origin is dict and isinstance(elem, str) and len(args) == 2:
            return args[1]
    for member in union_members(tp):  # a discriminated union: the tag picks the member
        if type_tag(member) == elem:
            return member
    return None


def union_members(tp: Any) -> list[Any]:
    """``tp`` without ``Annotated``/``Optional`` wrappers, as the list of its union members."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in typing.get_args(tp):
            if arg is not type(None):
                out.extend(union_members(arg))
        return out
    return [tp]


def type_tag(tp: Any) -> object:
    if isinstance(tp, type) and issubclass(tp, BaseModel) and "type" in tp.model_fields:
        args = typing.get_args(tp.model_fields["type"].annotation)
        return args[0] if len(args) == 1 else None
    return None


def raw_table(value: object) -> Mapping[str, Any]:
    """``value`` when it is a table, else an empty one (for checks on invalid data)."""
    return value if isinstance(value, dict) else {}
