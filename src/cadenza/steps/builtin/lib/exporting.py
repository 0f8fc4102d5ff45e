"""Reading a query's rows for the steps that write files (``file_export``, ``report``).

The query is checked and bound exactly as ``sql_query`` does it (one statement; every
``${...}`` token becomes a bind parameter, never SQL text), then read in chunks of
:data:`CHUNK` rows through a server-side cursor (SQLAlchemy ``stream_results``: a named
cursor on PostgreSQL, an unbuffered cursor on MariaDB; SQLite steps through its rows
anyway), so that memory stays bounded whatever the number of rows.

The reading transaction is never committed: it is rolled back when the rows have been
read (an export does not change the database). It is limited by the step's remaining time
like ``sql_query``'s (PostgreSQL ``statement_timeout`` per fetch, MariaDB
``max_statement_time``, SQLite a progress handler), and a cancel of the run cancels the
statement on the server. SQLite reads in a deferred transaction, so that an export does
not block the database's writers. Driver errors come out as the error classes of docs/retries.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from cadenza.domain.errors import Fatal, Retryable, StepError
from cadenza.domain.params import ParamError, render_sql
from cadenza.steps.builtin import sql_query
from cadenza.steps.builtin.lib import sqlutil
from cadenza.steps.runtime import StepContext, clock_of

CHUNK = 10_000


@dataclass
class Rows:
    """An open query: its column names (made unique) and its rows, in chunks."""

    columns: list[str]
    chunks: Iterator[list[tuple[Any, ...]]]


def bind(ctx: StepContext, engine: sa.Engine, query: str, what: str) -> tuple[str, Any]:
    """The driver's SQL and parameters of ``query`` (its ``${...}`` tokens bound)."""
    try:
        rendered, values = render_sql(query, ctx.scope)
    except ParamError as exc:
        raise Fatal(f"{what}: query: {exc}") from None
    dialect = sqlutil.kind(engine)
    try:
        pieces, literals = sql_query.parse(rendered, dialect)
    except Fatal as exc:
        raise Fatal(f"{what}: query: {exc}") from None
    for name in values:
        if any(f":{name}" in lit for lit in literals):
            raise Fatal(f"{what}: a ${{...}} token is inside a quoted string in the query; "
                        "write it without quotes: it is passed as a bind parameter")
    for kind, text in pieces:
        if kind == "bind" and text not in values:
            raise Fatal(f"{what}: the query uses :{text}, which is not a ${{...}} token "
                        "(write ::type for casts)")
    sql, params, used = sql_query.to_driver(pieces, engine.dialect.paramstyle or "named",
                                            values)
    ctx.log.debug("SQL %s; binds %s", "".join(
        t if k == "text" else f":{t}" for k, t in pieces), used)
    return sql, params


@contextmanager
def stream(ctx: StepContext, connection: str, query: str, what: str) -> Iterator[Rows]:
    """Run ``query`` on the named connection and yield its :class:`Rows` (see the module
    docstring); the transaction is rolled back when the block ends."""
    engine = ctx.sql_engine(connection)
    sql, params = bind(ctx, engine, query, what)
    remaining = ctx.remaining()
    if remaining <= 0:
        raise Retryable("step timeout: no time left for the step")
    clock = clock_of(ctx)
    guard = sqlutil.Guard(clock.monotonic() + remaining, remaining, clock)
    try:
        conn = engine.connect()
    except Exception as exc:
        raise sqlutil.translate(exc, f"{what}: cannot connect") from exc
    dialect, raw = sqlutil.kind(conn), sqlutil.raw_connection(conn)
    stop = threading.Event()
    result: sa.CursorResult[Any] | None = None
    watcher = threading.Thread(target=sqlutil._watch, args=(engine, conn, ctx, guard, stop),
                               name="cadenza-export-watch", daemon=True)
    try:
        if dialect == "sqlite":
            raw.set_progress_handler(lambda: int(guard.poll(ctx)), 20_000)
            conn.exec_driver_sql("SELECT 1")  # no BEGIN IMMEDIATE: reading takes no write lock
        elif dialect == "postgresql":
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(remaining * 1000) + 1}")
        if dialect == "mysql" and getattr(conn.dialect, "is_mariadb", False):
            sql = f"SET STATEMENT max_statement_time={max(remaining, 0.001):.3f} FOR {sql}"
        if dialect != "sqlite":
            watcher.start()
        result = conn.execution_options(stream_results=True, max_row_buffer=CHUNK
                                        ).exec_driver_sql(sql, params)
        if not result.returns_rows:
            raise Fatal(f"{what}: the query returns no rows (expected a SELECT, or a "
                        "statement with RETURNING)")
        columns = sql_query._unique([str(k) for k in result.keys()])

        def chunks() -> Iterator[list[tuple[Any, ...]]]:
            while True:
                guard.check(ctx)
                try:
                    chunk = result.fetchmany(CHUNK)
                except Exception as exc:
                    raise _error(exc, guard, what) from exc
                if not chunk:
                    return
                yield [tuple(row) for row in chunk]

        yield Rows(columns, chunks())
        if guard.stopped:
            raise guard.error()
    except StepError:
        raise
    except Exception as exc:
        raise _error(exc, guard, what) from exc
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
        if result is not None:  # a server-side cursor left open: close it first
            sqlutil.quietly(result.close)
        sqlutil.quietly(conn.rollback)
        if dialect == "sqlite":
            raw.set_progress_handler(None, 0)
        sqlutil.quietly(conn.close)


def _error(exc: BaseException, guard: sqlutil.Guard, what: str) -> StepError:
    if isinstance(exc, StepError):
        return exc
    return guard.error() if guard.stopped else sqlutil.translate(exc, what)
