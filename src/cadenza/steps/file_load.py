"""``file_load``: load files (a glob) into a table of a SQL connection.

One step is one transaction (SQLite ``BEGIN IMMEDIATE``, PostgreSQL, MariaDB around the
data): the files matched by ``path`` (inside ``[files].roots``, see
:mod:`cadenza.steps.files`) are read in bounded batches (:mod:`cadenza.steps.readers`) and
written with the fastest safe path of the database: SQLite multi-row ``INSERT``,
PostgreSQL ``COPY`` (CSV produced by Arrow, or ``write_row``), MariaDB ``executemany``.

- ``append`` adds rows; ``upsert`` inserts or updates on ``key`` (``ON CONFLICT`` /
  ``ON DUPLICATE KEY UPDATE``); ``overwrite`` fills ``<table>__new`` (same shape as the live
  table) and swaps it in, so the live table is never empty nor half-loaded.
- A missing table is created with types inferred from the first batch (docs/steps.md).
- ``skip_if_loaded`` records ``(table_name, checksum, path, loaded_at)`` in
  ``cadenza_loaded_files`` of the target database in the same transaction as the rows, and
  skips files already recorded for the table (overwrite: skips when the table already
  holds exactly these files).

Output: ``{"rows", "table", "mode", "files", "checksums", "skipped"}``.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import Any, BinaryIO, Literal

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pacsv  # type: ignore[import-untyped]
import sqlalchemy as sa
from pydantic import Field, model_validator

from cadenza.config.types import FilePath, JsonMap, NonEmptyStr, fail
from cadenza.domain.errors import Deferred, Fatal, Retryable
from cadenza.steps import files, readers, sqlutil
from cadenza.steps.base import (
    ColumnList,
    CsvOptions,
    FileFormat,
    LoadMode,
    SqlConnectionName,
    StepConfig,
    TableName,
    format_from_path,
)
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult

WAIT_RETRY = timedelta(seconds=60)
MAX_NAME = 63



class FileLoadConfig(StepConfig):
    """``path`` (a glob, inside ``[files].roots``), ``connection`` and ``table``; the format
    comes from the extension unless given; ``upsert`` needs ``key``; ``constants`` add
    columns; ``columns`` renames; files already loaded (same checksum) are skipped."""

    path: FilePath
    connection: SqlConnectionName
    table: TableName
    format: FileFormat | None = None
    mode: LoadMode = "append"
    key: ColumnList | None = None
    constants: JsonMap = Field(default_factory=dict)
    columns: dict[str, NonEmptyStr] = Field(default_factory=dict)
    csv: CsvOptions = Field(default_factory=CsvOptions)
    on_missing: Literal["fail", "skip", "wait"] = "fail"
    skip_if_loaded: bool = True

    @model_validator(mode="after")
    def _format_and_key(self) -> FileLoadConfig:
        if self.format is None and format_from_path(self.path) is None:
            fail(f"cannot tell the format of {self.path!r} from its extension: expected "
                 "format = 'csv', 'xlsx', 'parquet' or 'json'")
        if self.mode == "upsert" and not self.key:
            fail("mode = 'upsert' expects 'key' (the column or columns that identify a row)")
        if self.mode != "upsert" and self.key:
            fail("'key' is used only with mode = 'upsert'")
        return self


class FileLoadStep(StepType):
    """Load files into a table (SPEC §4)."""

    name = "file_load"
    Config = FileLoadConfig

    def run(self, ctx: StepContext, config: FileLoadConfig) -> StepResult:
        """Find, check and load the files; see the module's docstring."""
        roots = ctx.settings.file_roots(ctx.home)
        found = files.find(config.path, roots)
        if not found:
            return _missing(ctx, config, roots)
        sums = []
        for item in found:  # every checksum first: skip_if_loaded decides on all of them
            with files.open_checked(item) as fh:
                sums.append((item, files.digest(fh)))
        engine = ctx.sql_engine(config.connection)
        with sqlutil.transaction(engine, ctx, f"file_load into {config.table}") as (conn, guard):
            load = _Load(ctx, config, conn, guard)
            return load.run(sums)


def _missing(ctx: StepContext, config: FileLoadConfig, roots: list[Any]) -> StepResult:
    where = ", ".join(str(r) for r in roots)
    if config.on_missing == "fail":
        raise Fatal(f"no file matches {config.path!r} in [files].roots ({where})")
    if config.on_missing == "wait":
        raise Deferred(datetime.now(UTC) + WAIT_RETRY,
                       f"no file matches {config.path!r} yet; waiting for it")
    ctx.log.warning("no file matches %s; skipped (on_missing = skip)", config.path)
    return StepResult(0, {"rows": 0, "table": config.table, "mode": config.mode, "files": [],
                          "checksums": [], "skipped": [{"path": config.path, "reason": "missing"}]})


class _Load:
    """One load, inside the step's transaction."""

    def __init__(self, ctx: StepContext, config: FileLoadConfig, conn: sa.Connection,
                 guard: sqlutil.Guard) -> None:
        self.ctx, self.config, self.conn, self.guard = ctx, config, conn, guard
        self.dialect = sqlutil.kind(conn)
        self.format = config.format or format_from_path(config.path) or "csv"
        self.table_columns: dict[str, str] | None = None

    def run(self, sums: list[tuple[files.FoundFile, str]]) -> StepResult:
        """Choose the files, load them, swap (overwrite), record them; the output."""
        config = self.config
        tracked = config.skip_if_loaded or config.mode == "overwrite"
        recorded = files.recorded(self.conn, config.table) if tracked else None
        todo, skipped = files.choose(sums, recorded or set(), config.skip_if_loaded,
                                     config.mode == "overwrite")
        output: dict[str, Any] = {"rows": 0, "table": config.table, "mode": config.mode,
                                  "files": [f.display for f, _ in todo],
                                  "checksums": [c for _, c in todo], "skipped": skipped}
        for entry in skipped:
            self.ctx.log.info("%s: skipped (%s)", entry["path"], entry["reason"])
        if not todo:
            return StepResult(0, output)
        if config.skip_if_loaded:
            # before the rows (MariaDB: DDL commits); IF NOT EXISTS: concurrent first loads
            self.conn.execute(sa.schema.CreateTable(files.LOADED, if_not_exists=True))
        dest = config.table
        if config.mode == "overwrite":
            dest = sqlutil.sibling(config.table, "__new")
        try:
            rows, after, replaces = self._fill(dest, todo)
            if config.mode == "overwrite":
                self.ctx.log.debug("swap %s into %s", dest, config.table)
                sqlutil.swap(self.conn, config.table, dest, replaces, after)
        except Exception:
            if self.dialect == "mysql" and dest != config.table:  # DDL is not transactional
                sqlutil.quietly(lambda: sqlutil.drop_table(self.conn, dest))
            raise
        if config.skip_if_loaded or (recorded is not None and config.mode == "overwrite"):
            files.record(self.conn, config.table, todo, replace=config.mode == "overwrite")
        output["rows"] = rows
        return StepResult(rows, output)

    # -- loading ------------------------------------------------------------------------

    def _fill(self, dest: str, todo: list[tuple[files.FoundFile, str]]) -> tuple[
            int, list[str], bool]:
        """Load every file into ``dest``; returns rows, statements to run after a swap,
        and whether the swap replaces a live table."""
        conn, config = self.conn, self.config
        after: list[str] = []
        live = sqlutil.exists(conn, config.table)
        if config.mode == "overwrite":
            sqlutil.drop_table(conn, dest)
            if live:
                after = sqlutil.copy_shape(conn, config.table, dest)
        if live:
            self.table_columns = sqlutil.columns_of(conn, dest)
        total = 0
        for item, checksum in todo:
            self.guard.check(self.ctx)
            with files.open_checked(item) as fh:
                if files.digest(fh) != checksum:
                    raise Retryable(f"{item.display} changed while the step ran; try again")
                fh.seek(0)
                rows = self._load_file(dest, item, fh, live)
            self.ctx.log.info("%s: %d rows into %s", item.display, rows, config.table)
            total += rows
        return total, after, live

    def _load_file(self, dest: str, item: files.FoundFile, fh: BinaryIO, live: bool) -> int:
        config = self.config
        source = readers.open_source(self.format, fh, item.display, config.csv)
        names = self._names(source.names, item.display)
        consts = list(config.constants.values())
        first = next(source.batches, None) or readers.Batch(
            0, [[] for _ in source.names], typed=False)
        if self.table_columns is None:
            hints = source.hints or [None] * len(names)
            categories = {n: (hints[i] or readers.infer_batch(first, i))
                          for i, n in enumerate(names)}
            categories.update({n: readers.infer([v], True) for n, v in config.constants.items()})
            if not categories:
                raise Fatal(f"{item.display}: no columns: cannot create table {config.table}")
            key = self._key_among(list(categories)) if config.mode == "upsert" else None
            sql = sqlutil.create_table(self.conn, dest, categories, key)
            self.ctx.log.debug("%s", sql)
            self.table_columns = categories
        targets = self._map(names + list(config.constants), item.display)
        writer = _Writer(self.conn, dest, targets,
                         [self.table_columns[t] for t in targets], config, consts)
        if config.mode == "upsert" and live:
            self._check_key(dest, targets)
        self.ctx.log.debug("%s", writer.describe())
        rows = 0
        batches = chain([first], source.batches)
        del first  # only the batch being written stays in memory
        try:
            with writer:
                for batch in batches:
                    self.guard.check(self.ctx)
                    if batch.size:
                        writer.write(batch)
                        rows += batch.size
        except Exception as exc:  # name the file (and where) in the database's complaint
            raise sqlutil.translate(exc, f"{item.display}: loading rows after {rows}") from exc
        return rows

    def _names(self, names: list[str], display: str) -> list[str]:
        renames = self.config.columns
        unknown = [k for k in renames if k not in {n.strip() for n in names}]
        if unknown:
            raise Fatal(f"{display}: columns: {unknown[0]!r} is not a column of the file "
                        f"(its columns: {', '.join(n.strip() for n in names)})")
        out = [renames.get(n.strip(), n.strip()) or f"column_{i}"
               for i, n in enumerate(names, 1)]
        every = out + list(self.config.constants)
        for name in every:
            if len(name) > MAX_NAME or any(ord(ch) < 32 for ch in name):
                raise Fatal(f"{display}: column name {name!r} is not usable (at most "
                            f"{MAX_NAME} characters, no control characters)")
        folded = [n.lower() for n in every]
        for i, name in enumerate(folded):
            if name in folded[:i]:
                what = "a constant" if i >= len(out) else "a column"
                raise Fatal(f"{display}: {what} named {every[i]!r} appears twice (column "
                            f"names are compared without case; rename with 'columns')")
        return out

    def _map(self, names: list[str], display: str) -> list[str]:
        assert self.table_columns is not None
        by_fold = {c.lower(): c for c in self.table_columns}
        targets = []
        for name in names:
            target = name if name in self.table_columns else by_fold.get(name.lower())
            if target is None:
                raise Fatal(f"{display}: column {name!r} is not in table {self.config.table} "
                            f"(its columns: {', '.join(self.table_columns)})")
            targets.append(target)
        return targets

    def _key_among(self, names: list[str]) -> list[str]:
        by_fold = {n.lower(): n for n in names}
        missing = [k for k in self.config.key or [] if k.lower() not in by_fold]
        if missing:
            raise Fatal(f"upsert key column {missing[0]!r} is not among the loaded columns "
                        f"({', '.join(names)})")
        return [by_fold[k.lower()] for k in self.config.key or []]

    def _check_key(self, dest: str, targets: list[str]) -> None:
        key = {k.lower() for k in self._key_among(targets)}
        if not any({c.lower() for c in s} == key for s in sqlutil.unique_keys(self.conn, dest)):
            raise Fatal(f"upsert needs a primary key or unique index on {self.config.key} "
                        f"in table {self.config.table}")


class _Writer:
    """Writes batches into one table with the dialect's bulk path."""

    def __init__(self, conn: sa.Connection, table: str, targets: list[str],
                 categories: list[str], config: FileLoadConfig, consts: list[Any]) -> None:
        self.conn, self.targets, self.width = conn, targets, len(targets)
        self.dialect, self.raw = sqlutil.kind(conn), sqlutil.raw_connection(conn)
        self.upsert = config.mode == "upsert"
        n_file = len(targets) - len(consts)
        self.consts = [sqlutil.adapter(self.dialect, cat)(v) for cat, v in
                       zip(categories[n_file:], consts, strict=True)]
        self.adapters = [sqlutil.adapter(self.dialect, cat) for cat in categories[:n_file]]
        cols = ", ".join(sqlutil.quote(conn, t) for t in targets)
        self.head = f"INSERT INTO {sqlutil.qualified(conn, table)} ({cols}) VALUES "
        self.tail = self._conflict(config.key or []) if self.upsert else ""
        self.copy = f"COPY {sqlutil.qualified(conn, table)} ({cols}) FROM STDIN".replace("%%", "%")
        self.one = "(" + ", ".join(["?" if self.dialect == "sqlite" else "%s"] * self.width) + ")"
        limit = 32_766 if sqlite3.sqlite_version_info >= (3, 32) else 999  # SQLite variables
        self.per_statement = max(1, min(100, limit // self.width))  # rows per INSERT (SQLite)
        self._stream: tuple[str, Any, Any, Any] | None = None

    def _conflict(self, key: list[str]) -> str:
        q = [sqlutil.quote(self.conn, t) for t in self.targets]
        keys = {k.lower() for k in key}
        rest = [c for c, t in zip(q, self.targets, strict=True) if t.lower() not in keys]
        if self.dialect == "mysql":
            sets = ", ".join(f"{c} = VALUES({c})" for c in rest or q[:1])
            return f" ON DUPLICATE KEY UPDATE {sets}"
        conflict = ", ".join(c for c, t in zip(q, self.targets, strict=True) if t.lower() in keys)
        if not rest:
            return f" ON CONFLICT ({conflict}) DO NOTHING"
        return f" ON CONFLICT ({conflict}) DO UPDATE SET " + ", ".join(
            f"{c} = excluded.{c}" for c in rest)

    def describe(self) -> str:
        """The statement the writer runs (for the debug log)."""
        if self.dialect == "postgresql" and not self.upsert:
            return self.copy
        return self.head + self.one + self.tail

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: Any) -> None:
        """End the open COPY (PostgreSQL): completed, or failed with the error."""
        self._switch(None, exc)

    def _switch(self, fmt: str | None, exc: Any = (None, None, None)) -> Any:
        """The COPY stream for ``fmt`` ("csv" from Arrow or "text" for rows), opened once
        per file so that the server inserts while the next batch is read."""
        if self._stream is not None and self._stream[0] != fmt:
            _, cursor, manager, _ = self._stream
            self._stream = None
            try:
                manager.__exit__(*exc)
            finally:
                cursor.close()
        if fmt is not None and self._stream is None:
            cursor = self.raw.cursor()
            manager = cursor.copy(self.copy + (" (FORMAT csv)" if fmt == "csv" else ""))
            self._stream = (fmt, cursor, manager, manager.__enter__())
        return self._stream[3] if self._stream else None

    def write(self, batch: readers.Batch) -> None:
        """Write one batch (with the constants) by the dialect's bulk path."""
        n = batch.size
        if self.dialect == "postgresql" and not self.upsert and _copyable(batch.arrow):
            self._copy_arrow(batch)
            return
        columns = batch.columns
        if batch.typed:
            columns = [[fn(v) for v in col] for fn, col in zip(self.adapters, columns, strict=True)]
        columns = columns + [[v] * n for v in self.consts]
        if self.dialect == "sqlite":
            self._sqlite(columns, n)
        elif self.dialect == "postgresql" and not self.upsert:
            copy = self._switch("text")
            for row in zip(*columns, strict=True):
                copy.write_row(row)
        else:
            with self.raw.cursor() as cur:
                cur.executemany(self.head + self.one + self.tail, list(zip(*columns, strict=True)))

    def _sqlite(self, columns: list[list[Any]], n: int) -> None:
        width, k = self.width, self.per_statement
        flat: list[Any] = [None] * (n * width)
        for j, col in enumerate(columns):
            flat[j::width] = col
        full = n // k * k
        cur = self.raw.cursor()
        try:
            if full:
                sql = self.head + ", ".join([self.one] * k) + self.tail
                step = k * width
                cur.executemany(sql, [flat[i:i + step] for i in range(0, full * width, step)])
            if full < n:
                cur.executemany(self.head + self.one + self.tail,
                                [flat[i:i + width] for i in range(full * width, n * width, width)])
        finally:
            cur.close()

    def _copy_arrow(self, batch: readers.Batch) -> None:
        arrays = list(batch.arrow.columns)
        for value in self.consts:
            arrays.append(pa.nulls(batch.size) if value is None else pa.array([value] * batch.size))
        table = pa.RecordBatch.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(include_header=False))
        self._switch("csv").write(memoryview(sink.getvalue()))


def _copyable(arrow: Any) -> bool:
    """Whether Arrow writes every column of the batch as text that COPY reads back."""
    t = pa.types
    checks = (t.is_string, t.is_large_string, t.is_integer, t.is_floating, t.is_boolean,
              t.is_date32, t.is_decimal, t.is_timestamp)
    return arrow is not None and all(any(c(f.type) for c in checks) for f in arrow.schema)
