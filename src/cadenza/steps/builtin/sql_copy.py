"""``sql_copy``: copy a query's rows or a table into a table, in batches (docs/sql_copy.md).

The source is read with a server-side cursor (PostgreSQL named cursor or ``COPY ... TO
STDOUT``, MariaDB unbuffered cursor, SQLite's lazy cursor), ``batch_size`` rows at a time, so
memory stays bounded whatever the size. Rows are written with the target's bulk path
(:mod:`cadenza.steps.builtin.lib.copying`): PostgreSQL ``COPY``, multi-row ``INSERT``
elsewhere. From PostgreSQL to PostgreSQL without coercion the rows pass as COPY text, never
becoming Python objects.

- ``overwrite`` fills ``<table>__new`` (the live table's shape, or made from the source's
  types) and swaps it in at the end (:func:`cadenza.steps.builtin.lib.sqlutil.swap`: in the step's
  transaction on PostgreSQL and SQLite, one atomic ``RENAME TABLE`` on MariaDB), so readers
  see the whole old table or the whole new one; a swap that fails leaves the old table live.
- ``append`` adds rows; ``upsert`` inserts or updates on ``key``.
- ``type_coercion = "jde"``: JD Edwards tables
  (:func:`cadenza.steps.builtin.lib.sqltypes.jde_columns`).

Per-batch checkpoints (docs/exactly-once.md): with a ``ctx`` that keeps checkpoints (the
executor's), each batch commits together with the copy's progress (rows done) in
``cadenza_load_progress`` of the target database; a later attempt (a retry, or a resume after a
crash) skips exactly the rows already committed, so every row lands once (the source must return the
same rows in the same order: a table unchanged in between, or a query with ``ORDER BY``). Each
attempt takes the copy over with its own holder token; an older attempt still running fails its next
commit. A copy that fails for good drops its ``__new`` table and progress. A ``ctx`` without
checkpoints copies in one transaction.

Output: ``{"source_rows", "target_rows", "batches", "elapsed", "table", "mode"}``.
"""

from __future__ import annotations

import math
import uuid
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import Field, model_validator

from cadenza.config.labels import ADVANCED
from cadenza.config.types import NonEmptyStr, StrictModel, fail
from cadenza.domain.errors import Fatal
from cadenza.domain.params import ParamError, render, render_sql
from cadenza.steps.base import RUN_TUNABLE, ColumnList, SqlConnectionName, StepConfig, TableName
from cadenza.steps.builtin.lib import copying, sqltypes, sqlutil
from cadenza.steps.builtin.sql_query import parse, to_driver
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult, clock_of


class CopySource(StrictModel):
    """Where rows come from: a ``query`` or a ``table`` on a SQL ``connection``."""

    connection: SqlConnectionName = Field(description=(
        "The SQL connection rows are read from, e.g. erp."))
    query: NonEmptyStr | None = Field(None, title="SQL", description=(
        "The rows to copy, e.g. SELECT * FROM orders WHERE day = :day; or a table."))
    table: TableName | None = Field(None, description="A whole table to copy, e.g. orders.")

    @model_validator(mode="after")
    def _query_or_table(self) -> CopySource:
        if (self.query is None) == (self.table is None):
            fail("expected exactly one of 'query' or 'table'")
        return self


class CopyTarget(StrictModel):
    """Where rows go: a ``table`` on a SQL ``connection``."""

    connection: SqlConnectionName = Field(description=(
        "The SQL connection rows are written to, e.g. warehouse."))
    table: TableName = Field(description="The table written, e.g. staging_orders.")


class SqlCopyConfig(StepConfig):
    """``overwrite`` fills ``<table>__new`` then swaps it in, so the live table is never
    empty; ``upsert`` needs ``key``; ``create`` makes a missing target table;
    ``type_coercion = "jde"`` reads JD Edwards tables (with ``decimal_mode``);
    ``trim_strings`` drops trailing spaces of text values."""

    source: CopySource = Field(description="Where rows come from.")
    target: CopyTarget = Field(description="Where rows go.")
    mode: Literal["overwrite", "append", "upsert"] = Field("overwrite", description=(
        "overwrite swaps in a full copy (the table is never empty), append adds rows, "
        "upsert updates by key."), json_schema_extra=RUN_TUNABLE)
    key: ColumnList | None = Field(None, title="Key columns", description=(
        "The columns that identify a row, for upsert, e.g. order_id."))
    batch_size: int = Field(10_000, ge=1, le=10_000_000, json_schema_extra=ADVANCED | RUN_TUNABLE,
                            description="Rows written per batch.")
    create: bool = Field(True, title="Create the table", json_schema_extra=ADVANCED,
                         description="Create a missing target table.")
    type_coercion: Literal["none", "jde"] = Field("none", json_schema_extra=ADVANCED | RUN_TUNABLE,
                                                 description=(
        "jde reads JD Edwards dates and decimals as such."))
    decimal_mode: Literal["truncate", "preserve"] | None = Field(
        None, json_schema_extra=ADVANCED | RUN_TUNABLE,
        description="With jde: truncate or preserve the decimals of numbers.")
    trim_strings: bool = Field(False, json_schema_extra=ADVANCED | RUN_TUNABLE, description=(
        "Drop trailing spaces of text values."))

    @model_validator(mode="after")
    def _key_with_upsert(self) -> SqlCopyConfig:
        if self.mode == "upsert" and not self.key:
            fail("mode = 'upsert' expects 'key' (the column or columns that identify a row)")
        if self.mode != "upsert" and self.key:
            fail("'key' is used only with mode = 'upsert'")
        if self.decimal_mode is not None and self.type_coercion != "jde":
            fail("'decimal_mode' is used only with type_coercion = 'jde'")
        return self


class SqlCopyStep(StepType):
    """Copy rows between SQL connections (docs/sql_copy.md)."""

    name = "sql_copy"
    Config = SqlCopyConfig
    #: the source's query renders its ${...} tokens into bind parameters, never SQL text
    raw_fields = frozenset({"source"})

    def run(self, ctx: StepContext, config: SqlCopyConfig) -> StepResult:
        """Read, coerce, write in batches, swap (overwrite); see the module's docstring."""
        try:
            src_name = str(render(config.source.connection, ctx.scope))
        except ParamError as exc:
            raise Fatal(f"source.connection: {exc}") from None
        src_engine = ctx.sql_engine(src_name)
        src_dialect = sqlutil.kind(src_engine)
        sql, params, describe = _source_sql(ctx, config.source, src_engine, src_dialect)
        engine = ctx.sql_engine(config.target.connection)
        copy_id = _copy_id(ctx, config)
        table = config.target.table
        try:
            with sqlutil.transaction(engine, ctx, f"sql_copy into {table}") as (conn, guard):
                progress = None if copy_id is None else copying.Progress(
                    ctx, conn, guard, copy_id, table)
                source = copying.Source(src_engine, src_dialect, sql, params,
                                        config.source.table, config.batch_size, src_name,
                                        describe)
                return _Copy(ctx, config, conn, guard, progress, source).run()
        except Fatal:
            if copy_id is not None:  # failed for good: no attempt will resume this copy
                copying.abandon(engine, table, config.mode == "overwrite", copy_id, ctx)
            raise


def _source_sql(ctx: StepContext, source: CopySource, engine: sa.Engine,
                dialect: str) -> tuple[str, dict[str, Any] | tuple[Any, ...], str | None]:
    """The source's SELECT for the driver, its bind parameters, and (a SQLite query) the
    SELECT with NULL for each parameter, whose columns' declared types a view shows."""
    if source.table is not None:
        with engine.connect() as conn:
            return f"SELECT * FROM {sqlutil.qualified(conn, source.table)}", (
                () if dialect == "sqlite" else {}), None
    try:
        rendered, values = render_sql(source.query or "", ctx.scope)
    except ParamError as exc:
        raise Fatal(f"source.query: {exc}") from None
    pieces, literals = parse(rendered.strip().rstrip(";"), dialect)
    for name in values:
        if any(f":{name}" in lit for lit in literals):
            raise Fatal("source.query: a ${...} token is inside a quoted string; write it "
                        "without quotes: it is passed as a bind parameter")
    sql, params, _ = to_driver(pieces, engine.dialect.paramstyle or "named", values)
    describe = "".join(text if kind == "text" else "NULL" for kind, text in pieces)
    return sql, params, describe if dialect == "sqlite" else None


def _copy_id(ctx: StepContext, config: SqlCopyConfig) -> str | None:
    """This step's copy id: an earlier attempt's (``ctx.last_checkpoint``) or a new one,
    saved before anything is committed; None for a one-transaction copy."""
    if not callable(getattr(ctx, "checkpoint", None)):
        return None
    saved = ctx.last_checkpoint
    if isinstance(saved, dict) and saved.get("table") == config.target.table and isinstance(
            saved.get("copy"), str):
        return str(saved["copy"])
    copy_id = uuid.uuid4().hex
    ctx.checkpoint({"copy": copy_id, "table": config.target.table})
    return copy_id


class _Copy:
    """One copy, inside the target's transaction."""

    def __init__(self, ctx: StepContext, config: SqlCopyConfig, conn: sa.Connection,
                 guard: sqlutil.Guard, progress: copying.Progress | None,
                 source: copying.Source) -> None:
        self.ctx, self.config, self.conn, self.guard = ctx, config, conn, guard
        self.progress, self.source = progress, source
        self.dialect = sqlutil.kind(conn)
        self.table = config.target.table
        self.clock = clock_of(ctx)
        self.started = self.clock.monotonic()

    def run(self) -> StepResult:
        config, conn, progress = self.config, self.conn, self.progress
        skip = 0
        if progress is not None:
            progress.start()
            if progress.result is not None:
                self.ctx.log.info("copied by an earlier attempt of this step (%s rows)",
                                  progress.result.get("source_rows"))
                return StepResult(int(progress.result.get("target_rows") or 0),
                                  progress.result)
            skip = progress.rows
        overwrite = config.mode == "overwrite"
        dest = sqlutil.sibling(self.table, "__new") if overwrite else self.table
        live = sqlutil.exists(conn, self.table)
        passthrough = (self.source.dialect == self.dialect == "postgresql"
                       and config.type_coercion == "none" and not config.trim_strings
                       and config.mode != "upsert")
        try:
            with self.source.open(passthrough) as stream:
                cols = stream.columns
                if config.type_coercion == "jde":
                    cols = sqltypes.jde_columns(cols, config.decimal_mode or "truncate")
                _check_names(cols)
                after, skip = self._prepare(dest, live, cols, skip)
                names = self._targets(dest, cols)
                writer = copying.Writer(conn, dest, names, cols, config.key
                                        if config.mode == "upsert" else None)
                rows = self._stream(stream, writer, cols, skip, passthrough)
            if overwrite:
                self.ctx.log.info("swapping %s into %s (%d rows)", dest, self.table, rows)
                sqlutil.swap(conn, self.table, dest, live, after)
                self.ctx.log.info("swapped: %s now holds the new rows", self.table)
        except Exception:
            if self.dialect == "mysql" and overwrite and progress is None:
                # DDL is not transactional (a resumable copy keeps __new for its next attempt)
                sqlutil.quietly(lambda: sqlutil.drop_table(conn, dest))
            raise
        # an overwritten table holds exactly the rows copied: no count of a big table
        target_rows = rows if overwrite else int(conn.exec_driver_sql(
            f"SELECT count(*) FROM {sqlutil.qualified(conn, self.table)}").scalar() or 0)
        output: dict[str, Any] = {
            "source_rows": rows, "target_rows": target_rows,
            "batches": math.ceil(rows / config.batch_size),
            "elapsed": round(self.clock.monotonic() - self.started, 3),
            "table": self.table, "mode": config.mode}
        if progress is not None:
            progress.finish(output)
        self.ctx.log.info("%d rows copied into %s in %d batches", rows, self.table,
                          output["batches"])
        return StepResult(target_rows, output)

    def _prepare(self, dest: str, live: bool, cols: list[sqltypes.Col],
                 skip: int) -> tuple[list[str], int]:
        """Make ``dest`` ready; returns the statements to run after a swap and the rows to
        skip (0 when an earlier attempt's ``__new`` is gone)."""
        conn, config = self.conn, self.config
        after: list[str] = []
        if config.mode == "overwrite":
            if skip and sqlutil.exists(conn, dest):
                self.ctx.log.info("resuming the copy into %s after %d rows", dest, skip)
                return (sqlutil.sqlite_extras(conn, self.table) if live else []), skip
            skip = 0
            if self.progress is not None:
                self.progress.rows = 0
            sqlutil.drop_table(conn, dest)
            if live:
                return sqlutil.copy_shape(conn, self.table, dest), 0
        elif skip:
            self.ctx.log.info("resuming the copy into %s after %d rows", dest, skip)
        if not sqlutil.exists(conn, dest):
            if not config.create:
                raise Fatal(f"target table {self.table!r} does not exist (create = false)")
            key = _key_among(config.key, cols) if config.mode == "upsert" else None
            sql = copying.create_table(conn, dest, cols, key)
            self.ctx.log.debug("%s", sql)
        if self.progress is not None:
            self.progress.commit()  # the table exists before the first batch
        return after, skip

    def _targets(self, dest: str, cols: list[sqltypes.Col]) -> list[str]:
        """The target's column for each source column (same name, case aside)."""
        have = [c.name for c in sqltypes.table_columns(self.conn, dest, self.dialect)]
        by_fold = {n.lower(): n for n in have}
        out = []
        for col in cols:
            name = col.name if col.name in have else by_fold.get(col.name.lower())
            if name is None:
                raise Fatal(f"source column {col.name!r} is not in table {self.table} (its "
                            f"columns: {', '.join(have)})")
            out.append(name)
        if self.config.mode == "upsert":
            keys = {k.lower() for k in _key_among(self.config.key, cols)}
            if not any({c.lower() for c in s} == keys
                       for s in sqlutil.unique_keys(self.conn, dest)):
                raise Fatal(f"upsert needs a primary key or unique index on {self.config.key} "
                            f"in table {self.table}")
        return out

    def _stream(self, stream: copying.Stream, writer: copying.Writer,
                cols: list[sqltypes.Col], skip: int, passthrough: bool) -> int:
        """Write every batch after the first ``skip`` rows; each commits with its progress
        (resumable copy). Returns the rows copied (``skip`` included)."""
        config = self.config
        sink = _Sink(self, writer, skip, passthrough)
        if passthrough:  # the target writes (and commits) while the source is read
            with writer:
                copying.pipeline(stream.raw_batches(skip), sink.take,
                                 2 * (config.batch_size // copying.PIECE + 1))
            return sink.total
        convert = [sqltypes.reader(self.source.dialect, s, d, config.trim_strings,
                                   config.type_coercion == "jde")
                   for s, d in zip(stream.columns, cols, strict=True)]
        with writer:
            for n, rows in stream.batches(skip, convert):
                sink.take((n, rows, True))
        return sink.total


class _Sink:
    """What the target does with each piece of rows: write it; at a batch's end, commit
    it with the copy's progress (resumable copy) and log it."""

    def __init__(self, copy: _Copy, writer: copying.Writer, skip: int,
                 passthrough: bool) -> None:
        self.copy, self.writer, self.passthrough = copy, writer, passthrough
        self.total, self.number, self.since = skip, skip // copy.config.batch_size, 0

    def take(self, item: tuple[int, Any, bool]) -> None:
        n, data, ends = item
        copy, writer = self.copy, self.writer
        copy.guard.check(copy.ctx)
        try:
            if self.passthrough:
                writer.write_raw(data)
            else:
                writer.write(data)
        except Exception as exc:
            raise sqlutil.translate(
                exc, f"writing rows {self.total + 1}..{self.total + n} into {copy.table}"
            ) from exc
        self.total += n
        self.since += n
        if not ends:
            return
        self.number += 1
        if copy.progress is not None:
            writer.pause()
            copy.progress.advance(self.total)
            copy.progress.commit()
        copy.ctx.log.info("batch %d: %d rows (%d in all) into %s", self.number, self.since,
                          self.total, copy.table)
        self.since = 0


def _check_names(cols: list[sqltypes.Col]) -> None:
    seen: set[str] = set()
    for col in cols:
        if not col.name or len(col.name) > 63 or any(ord(ch) < 32 for ch in col.name):
            raise Fatal(f"source column name {col.name!r} is not usable (1 to 63 characters, "
                        "no control characters)")
        if col.name.lower() in seen:
            raise Fatal(f"the source has two columns named {col.name!r} (names are compared "
                        "without case; alias one in source.query)")
        seen.add(col.name.lower())


def _key_among(key: list[str] | None, cols: list[sqltypes.Col]) -> list[str]:
    by_fold = {c.name.lower(): c.name for c in cols}
    missing = [k for k in key or [] if k.lower() not in by_fold]
    if missing:
        raise Fatal(f"upsert key column {missing[0]!r} is not among the source's columns "
                    f"({', '.join(by_fold.values())})")
    return [by_fold[k.lower()] for k in key or []]

