"""``sql_query``: run one query on a SQL connection; record the rows returned or affected.

The query (``query``, or the ``.sql`` ``file`` under the home) must be exactly one
statement: a scanner that knows the dialect's quotes, comments and dollar-quoting refuses a
second statement (a trailing ``;`` is fine). Each ``${...}`` token becomes a bind parameter
(:func:`cadenza.domain.params.render_sql`), and so does each ``:name`` of the step's
``params``; values never become SQL text. Lists and objects bind as JSON text.

The statement runs in one transaction, committed on success, limited by the step's
remaining time (PostgreSQL ``statement_timeout``, MariaDB ``max_statement_time``, SQLite
progress handler); past it the statement is canceled on the server and the step raises
``Retryable("step timeout ...")``.

Output (JSON): ``fetch = "count"``: ``{"rows"}``; ``"first"``: ``{"rows", "columns",
"first"}`` (``first`` is an object, or null without rows); ``"all"``: ``{"rows", "columns",
"rows_data", "truncated"}`` (``rows_data`` is a list of objects, at most ``max_rows``).
``rows`` counts every row returned (SELECT, RETURNING) or else the rows affected. Values:
dates and times in ISO 8601, Decimal as a string (exact), bytes in base64, intervals in
seconds, non-finite floats as strings.
"""

from __future__ import annotations

import base64
import json
import math
import re
import uuid
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import Field, model_validator

from cadenza.config.labels import ADVANCED
from cadenza.config.types import JsonMap, NonEmptyStr, RelativePath, fail
from cadenza.domain.errors import Fatal
from cadenza.domain.params import ParamError, render_sql
from cadenza.private_files import of_settings
from cadenza.steps.base import RUN_TUNABLE, SqlConnectionName, StepConfig
from cadenza.steps.builtin.lib import sqlutil
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult

MAX_SQL_FILE = 1 << 20
FETCH_CHUNK = 1000
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")

Piece = tuple[Literal["text", "bind"], str]


class SqlQueryConfig(StepConfig):
    """``connection`` and ``query`` (or ``file``, a ``.sql`` file relative to the home);
    ``params`` are bind values; ``fetch`` says what is recorded as output."""

    connection: SqlConnectionName = Field(description=(
        "A SQL connection of cadenza.toml, e.g. warehouse."))
    query: NonEmptyStr | None = Field(None, title="SQL", description=(
        "The statement to run, e.g. DELETE FROM staging WHERE day < :cutoff; or a file."))
    file: RelativePath | None = Field(None, title="SQL file", description=(
        "A .sql file relative to the Cadenza home, instead of SQL, e.g. sql/cleanup.sql."))
    params: JsonMap = Field(default_factory=dict, title="Bind values", description=(
        "Values for the statement's :names, one per line, e.g. cutoff = \"${params.day}\"."))
    fetch: Literal["count", "first", "all"] = Field("count", title="Output", description=(
        "What the run records: the row count, the first row, or all rows."),
            json_schema_extra=RUN_TUNABLE)
    max_rows: int = Field(1000, ge=1, le=1_000_000,
        json_schema_extra=ADVANCED | RUN_TUNABLE, description=(
        "The most rows recorded with fetch = all."))

    @model_validator(mode="after")
    def _query_or_file(self) -> SqlQueryConfig:
        if (self.query is None) == (self.file is None):
            fail("expected exactly one of 'query' or 'file'")
        return self


class SqlQueryStep(StepType):
    """Run one SQL statement (docs/steps.md)."""

    name = "sql_query"
    Config = SqlQueryConfig
    raw_fields = frozenset({"query"})

    def run(self, ctx: StepContext, config: SqlQueryConfig) -> StepResult:
        """Render, check, bind and run the statement; see the module's docstring."""
        text = config.query if config.query is not None else _read_file(ctx, config.file or "")
        try:
            rendered, values = render_sql(text, ctx.scope)
        except ParamError as exc:
            raise Fatal(f"query: {exc}") from None
        clash = sorted(values.keys() & config.params.keys())
        if clash:
            raise Fatal(f"params: the name {clash[0]!r} is reserved for ${{...}} tokens")
        values.update(config.params)
        engine = ctx.sql_engine(config.connection)
        dialect = sqlutil.kind(engine)
        pieces, literals = parse(rendered, dialect)
        for name in values:
            if name.startswith("cz_") and any(f":{name}" in lit for lit in literals):
                raise Fatal("a ${...} token is inside a quoted string in the query; write it "
                            "without quotes: it is passed as a bind parameter")
        sql, params, used = to_driver(pieces, engine.dialect.paramstyle or "named", values)
        ctx.log.debug("SQL %s; binds %s", "".join(
            t if k == "text" else f":{t}" for k, t in pieces), used)
        with sqlutil.transaction(engine, ctx, f"sql_query on {config.connection!r}") as (
                conn, guard):
            if dialect == "mysql" and getattr(conn.dialect, "is_mariadb", False):
                # MariaDB's per-statement limit (elsewhere the watcher enforces the deadline)
                sql = f"SET STATEMENT max_statement_time={max(guard.left(), 0.001):.3f} FOR {sql}"
            result = conn.exec_driver_sql(sql, params)
            output = _collect(result, config, lambda: guard.check(ctx))
        ctx.log.info("%d rows", output["rows"])
        return StepResult(int(output["rows"]), output)


def _read_file(ctx: StepContext, name: str) -> str:
    home = ctx.home.resolve()
    path = (home / name.replace("\\", "/")).resolve()
    if not path.is_relative_to(home):
        raise Fatal(f"file {name!r} resolves outside the home directory")
    of_settings(ctx.home, ctx.settings).check(path, f"step {ctx.step.name!r}: file")
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_SQL_FILE + 1)
    except OSError as exc:
        raise Fatal(f"cannot read the query file {name!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_SQL_FILE:
        raise Fatal(f"query file {name!r} is larger than {MAX_SQL_FILE} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Fatal(f"query file {name!r} is not UTF-8 text ({exc.reason})") from None


# -- the one-statement scanner ----------------------------------------------------------

def parse(sql: str, dialect: str) -> tuple[list[Piece], list[str]]:
    """Split ``sql`` into text and ``:name`` bind pieces, outside quotes and comments,
    refusing a second statement; also returns the string literals (for checks)."""
    pieces: list[Piece] = []
    literals: list[str] = []
    n, i, start, end = len(sql), 0, 0, -1

    def line(at: int) -> int:
        return sql.count("\n", 0, at) + 1

    while i < n:
        c = sql[i]
        comment = sql.startswith(("--", "/*"), i) or (c == "#" and dialect == "mysql")
        if comment:
            if dialect == "mysql" and sql.startswith(("/*!", "/*M!"), i):
                raise Fatal(f"line {line(i)}: MySQL executable comments /*! */ are refused")
            i = _skip_comment(sql, i, dialect == "postgresql", line)
            continue
        if end >= 0:
            if not c.isspace():
                raise Fatal(f"expected one SQL statement; another one starts at line {line(i)} "
                            f"after the ';' of line {line(end)}")
            i += 1
            continue
        if c in "'\"`" or (c == "[" and dialect == "sqlite"):
            j = _skip_quoted(sql, i, dialect, line)
            if c == "'" or (c == '"' and dialect == "mysql"):
                literals.append(sql[i:j])
            i = j
        elif c == "$" and dialect == "postgresql" and (m := _DOLLAR.match(sql, i)) and not (
                i and (sql[i - 1].isalnum() or sql[i - 1] in "_$")):
            close = sql.find(m.group(0), m.end())
            if close < 0:
                raise Fatal(f"line {line(i)}: dollar-quoted string {m.group(0)} is not closed")
            literals.append(sql[i:close])
            i = close + len(m.group(0))
        elif c == ":" and (m := _WORD.match(sql, i + 1)) and not (
                sql.startswith(":", m.end()) and not sql.startswith("::", m.end())) \
                and not (i and (sql[i - 1].isalnum() or sql[i - 1] in "_:\\")):
            pieces += [("text", sql[start:i]), ("bind", m.group(0))]
            i = start = m.end()
        elif c == ";":
            end = i
            i += 1
        else:
            i += 1
    pieces.append(("text", sql[start:end if end >= 0 else n]))
    if not any(k == "bind" or _has_code(t, dialect) for k, t in pieces):
        raise Fatal("the query is empty")
    return pieces, literals


def _skip_quoted(sql: str, i: int, dialect: str, line: Any) -> int:
    quote = sql[i]
    close = "]" if quote == "[" else quote
    escapes = (dialect == "mysql" and quote in "'\"") or (
        dialect == "postgresql" and quote == "'" and i > 0 and sql[i - 1] in "eE"
        and not (i > 1 and (sql[i - 2].isalnum() or sql[i - 2] == "_")))
    j, n = i + 1, len(sql)
    while j < n:
        ch = sql[j]
        if escapes and ch == "\\":
            j += 2
        elif ch == close:
            if close != "]" and sql.startswith(close * 2, j):
                j += 2
            else:
                return j + 1
        else:
            j += 1
    raise Fatal(f"line {line(i)}: the quote {quote} opened here is not closed")


def _skip_comment(sql: str, i: int, nested: bool, line: Any) -> int:
    if not sql.startswith("/*", i):
        newline = sql.find("\n", i)
        return len(sql) if newline < 0 else newline + 1
    depth, j = 1, i + 2
    while j < len(sql):
        if sql.startswith("*/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        elif nested and sql.startswith("/*", j):
            depth, j = depth + 1, j + 2
        else:
            j += 1
    raise Fatal(f"line {line(i)}: the comment /* opened here is not closed")


def _has_code(text: str, dialect: str) -> bool:
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith(("--", "/*"), i) or (text[i] == "#" and dialect == "mysql"):
            i = _skip_comment(text, i, dialect == "postgresql", lambda _: 0)
        else:
            return True
    return False


def to_driver(pieces: list[Piece], paramstyle: str, values: dict[str, Any]) -> tuple[
        str, Any, dict[str, Any]]:
    """The driver's SQL and parameters for ``paramstyle``; ``%`` doubled where the driver
    formats with ``%``. Also returns the values used (for the debug log)."""
    percent = paramstyle in ("format", "pyformat")
    out: list[str] = []
    named: dict[str, Any] = {}
    positional: list[Any] = []
    for kind, text in pieces:
        if kind == "text":
            out.append(text.replace("%", "%%") if percent else text)
            continue
        if text not in values:
            known = ", ".join(sorted(k for k in values if not k.startswith("cz_"))) or "none"
            raise Fatal(f"the query uses :{text} but params has no {text!r} (params: {known})")
        value = values[text]
        if isinstance(value, dict | list):
            value = json.dumps(value, ensure_ascii=False)
        named[text] = value
        positional.append(value)
        out.append({"named": f":{text}", "pyformat": f"%({text})s", "qmark": "?",
                    "format": "%s"}.get(paramstyle, f":{len(positional)}"))
    params = named if paramstyle in ("named", "pyformat") else tuple(positional)
    return "".join(out), params, named


# -- results --------------------------------------------------------------------------

def _collect(result: sa.CursorResult[Any], config: SqlQueryConfig, check: Any) -> dict[str, Any]:
    if not result.returns_rows:
        rows = max(result.rowcount, 0)
        if config.fetch == "count":
            return {"rows": rows}
        if config.fetch == "first":
            return {"rows": rows, "columns": [], "first": None}
        return {"rows": rows, "columns": [], "rows_data": [], "truncated": False}
    columns = _unique([str(k) for k in result.keys()])
    want = {"count": 0, "first": 1, "all": config.max_rows}[config.fetch]
    kept: list[Any] = []
    count = 0
    while chunk := result.fetchmany(FETCH_CHUNK):
        check()
        if len(kept) < want:
            kept.extend(chunk[:want - len(kept)])
        count += len(chunk)
    data = [{c: jsonable(v) for c, v in zip(columns, row, strict=True)} for row in kept]
    if config.fetch == "count":
        return {"rows": count}
    if config.fetch == "first":
        return {"rows": count, "columns": columns, "first": data[0] if data else None}
    return {"rows": count, "columns": columns, "rows_data": data, "truncated": count > want}


def _unique(names: list[str]) -> list[str]:
    """Result column names made unique: a repeated ``id`` becomes ``id_2``, ``id_3``..."""
    out: list[str] = []
    taken: set[str] = set()
    for name in names:
        candidate, n = name, 1
        while candidate in taken:
            n += 1
            candidate = f"{name}_{n}"
        taken.add(candidate)
        out.append(candidate)
    return out


def jsonable(value: Any) -> Any:
    """A database value as JSON: see the module's docstring."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)
