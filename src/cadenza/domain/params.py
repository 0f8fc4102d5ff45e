"""Parameters: their types, and ``${...}`` substitution. Pure: no I/O, ``now`` never read.

Precedence, later wins: job ``params`` → preset ``params`` → run overrides; for one step:
shared params → the step's ``op_kwargs`` → run overrides of that step's args.

A token is ``${NAMESPACE...}``; ``$${`` writes a literal ``${``. A value that is exactly one
token keeps the token's type; a token inside a longer string is rendered as text. Tokens
are looked up, never evaluated. In SQL text a token becomes a bind parameter.

A parameter's type is its declared default's (:func:`param_type`); :func:`convert` turns a
given value into it, or says what was expected.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cadenza.domain.outputs import not_kept, truncation

TOKEN_RE = re.compile(r"(?<!\$)\$\{([^{}]*)\}")
ESCAPED = "$${"

#: namespaces allowed in jobs.toml (run time) and only in cadenza.toml (config time)
RUN_NAMESPACES = ("params", "steps", "run", "job")
DATE_TOKENS = ("today", "yesterday", "month.current", "month.previous")
CONFIG_NAMESPACES = ("env", "secret")
RUN_FACTS = ("id", "scheduled_for", "trigger")
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class ParamError(ValueError):
    """A token cannot be parsed or resolved; the message names the token."""


@dataclass(frozen=True)
class Token:
    """One ``${...}`` occurrence: its namespace, the dotted parts after it, and where it was."""

    raw: str
    namespace: str
    parts: tuple[str, ...]
    start: int
    end: int


def parse_token(body: str, start: int = 0, end: int = 0) -> Token:
    """Parse the inside of ``${...}``; raise :class:`ParamError` for unknown forms."""
    raw = "${" + body + "}"
    text = body.strip()
    if text.startswith("date:"):
        if not text[5:]:
            raise ParamError(f"{raw}: date needs a format, like ${{date:%Y%m%d}}")
        return Token(raw, "date", (text[5:],), start, end)
    if text in DATE_TOKENS:
        return Token(raw, text, (), start, end)
    namespace, _, rest = text.partition(".")
    parts = tuple(rest.split(".")) if rest else ()
    if namespace not in RUN_NAMESPACES + CONFIG_NAMESPACES:
        known = ", ".join([*RUN_NAMESPACES, *DATE_TOKENS, "date:FMT", *CONFIG_NAMESPACES])
        raise ParamError(f"{raw}: unknown token; expected one of {known}")
    if not parts or any(not p for p in parts):
        raise ParamError(f"{raw}: expected {namespace}.NAME")
    if namespace in ("params", "env", "secret", "job") and len(parts) != 1:
        raise ParamError(f"{raw}: expected {namespace}.NAME with a single name")
    if namespace == "steps" and len(parts) < 2:
        raise ParamError(f"{raw}: expected steps.STEP.FIELD")
    if namespace == "run" and (len(parts) != 1 or parts[0] not in RUN_FACTS):
        raise ParamError(f"{raw}: expected one of run.id, run.scheduled_for, run.trigger")
    if namespace == "job" and parts[0] != "id":
        raise ParamError(f"{raw}: expected job.id")
    return Token(raw, namespace, parts, start, end)


def find_tokens(text: str) -> list[Token]:
    """Every token in ``text`` (escaped ``$${`` excluded), in order."""
    return [parse_token(m.group(1), m.start(), m.end()) for m in TOKEN_RE.finditer(text)]


@dataclass(frozen=True)
class Scope:
    """What tokens resolve against at run time."""

    params: Mapping[str, Any] = field(default_factory=dict)
    steps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    run_id: str = ""
    trigger: str = ""
    job_id: str = ""
    scheduled_for: datetime | None = None
    timezone: str = "UTC"

    def local_time(self) -> datetime:
        if self.scheduled_for is None:
            raise ParamError("date tokens need the run's scheduled time")
        return self.scheduled_for.astimezone(ZoneInfo(self.timezone))


def lookup(token: Token, scope: Scope) -> Any:
    """The value of one token in ``scope``."""
    ns, parts = token.namespace, token.parts
    if ns == "params":
        if parts[0] not in scope.params:
            raise ParamError(f"{token.raw}: no parameter {parts[0]!r}")
        return scope.params[parts[0]]
    if ns == "steps":
        step, *path = parts
        if step not in scope.steps:
            raise ParamError(f"{token.raw}: no output of an earlier step {step!r}")
        value: Any = scope.steps[step]
        for key in path:
            if isinstance(value, Mapping) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            elif (cut := truncation(value)) is not None:
                raise ParamError(f"{token.raw}: {not_kept(step, *cut)}")
            else:
                raise ParamError(f"{token.raw}: step {step!r} has no {key!r}")
        return value
    if ns == "run":
        facts: dict[str, Any] = {"id": scope.run_id, "trigger": scope.trigger,
                                 "scheduled_for": scope.scheduled_for.isoformat()
                                 if scope.scheduled_for else None}
        return facts[parts[0]]
    if ns == "job":
        return scope.job_id
    if ns in CONFIG_NAMESPACES:
        raise ParamError(f"{token.raw}: {ns} tokens belong in cadenza.toml, not in a job")
    local = scope.local_time()
    if ns == "today":
        return local.date().isoformat()
    if ns == "yesterday":
        return (local.date() - timedelta(days=1)).isoformat()
    if ns == "month.current":
        return f"{local.year:04d}-{local.month:02d}"
    if ns == "month.previous":
        year, month = (local.year - 1, 12) if local.month == 1 else (local.year, local.month - 1)
        return f"{year:04d}-{month:02d}"
    return local.strftime(parts[0])  # date:FMT


def render(value: Any, scope: Scope) -> Any:
    """Substitute every token in ``value`` (recursively through dicts and lists)."""
    if isinstance(value, Mapping):
        return {k: render(v, scope) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render(v, scope) for v in value]
    if not isinstance(value, str):
        return value
    tokens = find_tokens(value)
    if len(tokens) == 1 and tokens[0].start == 0 and tokens[0].end == len(value):
        return lookup(tokens[0], scope)
    out, last = [], 0
    for token in tokens:
        out.append(value[last:token.start])
        resolved = lookup(token, scope)
        out.append("" if resolved is None else str(resolved))
        last = token.end
    out.append(value[last:])
    return "".join(out).replace(ESCAPED, "${")


def render_sql(query: str, scope: Scope) -> tuple[str, dict[str, Any]]:
    """Turn each token of ``query`` into a bind parameter ``:cz_N``; values never become SQL."""
    binds: dict[str, Any] = {}
    out, last = [], 0
    for index, token in enumerate(find_tokens(query)):
        out.append(query[last:token.start])
        name = f"cz_{index}"
        binds[name] = lookup(token, scope)
        out.append(f":{name}")
        last = token.end
    out.append(query[last:])
    return "".join(out).replace(ESCAPED, "${"), binds


def merge(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Later layers win (job → preset → run; or shared → op_kwargs → step args)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            merged.update(layer)
    return merged


# --- typed parameters ------------------------------------------------------------------------
#
# A parameter's type is the type of its declared default (a job's ``params``, a step's
# ``op_kwargs``). A value given for it — text from ``-p``/``--arg`` or the form, a JSON value
# from the API, a TOML value from a preset or a ``call_job`` step — is converted to that type
# once, when the run is requested, so every path stores the same value. Values are JSON:
# a date or date-time parameter holds its ISO text.

PARAM_TYPES = ("string", "integer", "float", "boolean", "date", "datetime", "list", "table",
               "any")
_EXPECTED = {
    "string": "a string",
    "integer": "an integer",
    "float": "a number",
    "boolean": "true or false",
    "date": "a date (YYYY-MM-DD)",
    "datetime": "a date and time (YYYY-MM-DDTHH:MM:SS)",
    "list": "a list (JSON, like [1, 2])",
    "table": 'a table (JSON, like {"key": 1})',
}
_INTEGER = re.compile(r"[+-]?[0-9]+")


class ParamTypeError(ValueError):
    """A value does not convert to its parameter's type; the message names the parameter,
    the expected type and the value."""


def param_type(default: Any) -> str:
    """The type a parameter declared with ``default`` takes (one of :data:`PARAM_TYPES`):
    ``any`` for no default (``None``), else the default's type; a string default (tokens
    included) makes a ``string`` parameter."""
    if default is None:
        return "any"
    if isinstance(default, bool):
        return "boolean"
    if isinstance(default, int):
        return "integer"
    if isinstance(default, float):
        return "float"
    if isinstance(default, datetime):
        return "datetime"
    if isinstance(default, date):
        return "date"
    if isinstance(default, list | tuple):
        return "list"
    if isinstance(default, Mapping):
        return "table"
    return "string"


def expected(kind: str) -> str:
    """How a message names the values of type ``kind`` ("an integer")."""
    return _EXPECTED.get(kind, "any value")


def as_json(value: Any) -> Any:
    """A declared default as a run holds it: a date or date-time as its ISO text."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def has_token(value: Any) -> bool:
    """Whether ``value`` is text holding a ``${...}`` token (resolved when the run starts,
    so its type is not checked before)."""
    return isinstance(value, str) and TOKEN_RE.search(value) is not None


def convert(name: str, value: Any, default: Any, *, label: str | None = None) -> Any:
    """``value`` converted to the type of ``default`` (see :func:`param_type`).

    Text is parsed (``"7"`` → 7, ``"true"`` → True, ``"2026-01-31"`` for a date, JSON for a
    list or table); a typed value must already be of the type (an integer is accepted for a
    float). A string holding a ``${...}`` token is left as it is. Raises
    :class:`ParamTypeError` ("parameter n: expected an integer, got 'x'"; ``label``
    replaces "parameter n")."""
    return convert_to(name, value, param_type(default), label=label)


def convert_to(name: str, value: Any, kind: str, *, label: str | None = None) -> Any:
    """:func:`convert` for a parameter of type ``kind`` (one of :data:`PARAM_TYPES`)."""
    if kind == "any" or has_token(value):
        return value
    converted = _convert(kind, value)
    if converted is _REFUSED:
        raise ParamTypeError(f"{label or f'parameter {name}'}: expected {expected(kind)}, "
                             f"got {value!r}")
    return converted


_REFUSED = object()


def _convert(kind: str, value: Any) -> Any:
    if isinstance(value, str) and kind != "string":
        return _parse(kind, value.strip())
    if kind == "string":
        return value if isinstance(value, str) else _REFUSED
    if kind == "boolean":
        return value if isinstance(value, bool) else _REFUSED
    if isinstance(value, bool):
        return _REFUSED  # never 1 or 0
    if kind == "integer":
        return value if isinstance(value, int) else _REFUSED
    if kind == "float":
        ok = isinstance(value, int | float) and math.isfinite(value)
        return float(value) if ok else _REFUSED
    if kind == "datetime":
        return value.isoformat() if isinstance(value, datetime) else _REFUSED
    if kind == "date":
        ok = isinstance(value, date) and not isinstance(value, datetime)
        return value.isoformat() if ok else _REFUSED
    if kind == "list":
        return list(value) if isinstance(value, list | tuple) else _REFUSED
    return dict(value) if isinstance(value, Mapping) else _REFUSED


def _parse(kind: str, text: str) -> Any:
    """Text for a parameter of type ``kind`` (not ``string``)."""
    try:
        if kind == "integer":
            return int(text) if _INTEGER.fullmatch(text) else _REFUSED
        if kind == "float":
            number = float(text)
            return number if math.isfinite(number) else _REFUSED
        if kind == "boolean":
            return {"true": True, "false": False}.get(text.lower(), _REFUSED)
        if kind == "date":
            return date.fromisoformat(text).isoformat()
        if kind == "datetime":
            return datetime.fromisoformat(text).isoformat()
        loaded = json.loads(text)
    except ValueError:
        return _REFUSED
    if kind == "list":
        return loaded if isinstance(loaded, list) else _REFUSED
    return loaded if isinstance(loaded, dict) else _REFUSED


def convert_all(values: Mapping[str, Any], declared: Mapping[str, Any]
                ) -> tuple[dict[str, Any], list[str]]:
    """Each of ``values`` converted to the type of its default in ``declared`` (a name not
    declared is kept as it is: the caller refuses it); and the problems, one per value
    that does not convert."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name, value in values.items():
        if name not in declared:
            out[name] = value
            continue
        try:
            out[name] = convert(name, value, declared[name])
        except ParamTypeError as exc:
            problems.append(str(exc))
            out[name] = value
    return out, problems
