"""``file_load``: load files (a glob) into a table of a SQL connection.

One step is one transaction (SQLite ``BEGIN IMMEDIATE``, PostgreSQL, MariaDB around the data):
the files matched by ``path`` (inside ``[files].roots``, see
:mod:`cadenza.steps.builtin.lib.files`) are read in bounded batches
(:mod:`cadenza.steps.builtin.lib.readers`) and written with the fastest safe path of the
database: SQLite multi-row ``INSERT``, PostgreSQL ``COPY`` (CSV produced by Arrow, or
``write_row``), MariaDB ``executemany``.

- ``append`` adds rows; ``upsert`` inserts or updates on ``key`` (``ON CONFLICT`` /
  ``ON DUPLICATE KEY UPDATE``); ``overwrite`` fills ``<table>__new`` (same shape as the live
  table) and swaps it in, so the live table is never empty nor half-loaded.
- A missing table is created with types inferred from the first batch (docs/steps.md).
- ``skip_if_loaded`` records ``(table_name, checksum, path, loaded_at)`` in
  ``cadenza_loaded_files`` of the target database in the same transaction as the rows, and
  skips files already recorded for the table (overwrite: skips when the table already
  holds exactly these files).

Per-batch checkpoints (docs/exactly-once.md): with a ``ctx`` that keeps checkpoints (the
executor's), a load commits every :data:`COMMIT_ROWS` rows and at the end of each file,
together with its progress in ``cadenza_load_progress`` of the target database (rows done
per file checksum), in the same transaction as the rows. The load's id is saved with
``ctx.checkpoint`` before its first commit; a later attempt of the step (a retry, or a
resume after a crash) finds it in ``ctx.last_checkpoint`` and skips exactly the rows
already committed, so a resumed load neither skips nor doubles rows. ``overwrite`` keeps
filling ``<table>__new`` across attempts and swaps it in at the end (readers see the old
table or the whole new one). A load that ended is recorded as done with its output: an
attempt after that (a crash between the last commit and the step's end) returns it. A
``ctx`` without checkpoints (tests, benchmarks) loads in one transaction.
Fencing: each attempt takes the load over by writing its own holder token on the load's
progress row, and every commit checks it; an older attempt still running (a hung worker
that lost its lease) fails its next commit and rolls that batch back. A load that fails
for good (``Fatal``, cancel) drops its ``__new`` table and progress; rows of ``append`` /
``upsert`` committed before that stay (the log says how many).

Output: ``{"rows", "table", "mode", "files", "checksums", "skipped"}``.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from itertools import chain
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

import sqlalchemy as sa
from pydantic import Field, model_validator

from cadenza.config.labels import ADVANCED
from cadenza.config.types import FilePath, JsonMap, NonEmptyStr, fail
from cadenza.domain.errors import Deferred, Fatal, Retryable
from cadenza.private_files import of_settings
from cadenza.steps.base import (
    RUN_TUNABLE,
    ColumnList,
    CsvOptions,
    FileFormat,
    LoadMode,
    SqlConnectionName,
    StepConfig,
    TableName,
    format_from_path,
)
from cadenza.steps.builtin.lib import files, sqlutil
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult, clock_of

if TYPE_CHECKING:  # pyarrow and openpyxl at first use, not when the step types load
    from cadenza.steps.builtin.lib import readers

WAIT_RETRY = timedelta(seconds=60)
MAX_NAME = 63
COMMIT_ROWS = 50_000
"""A resumable load commits (rows and progress together) every this many rows, and at the
end of each file."""
KEEP_PROGRESS = timedelta(days=30)
"""Progress rows of loads older than this are pruned (by the next load that ends)."""
#: progress of resumable loads, kept in the target database; the row with checksum "" is
#: the load's own (holder token, done, output)
PROGRESS = sa.Table(
    "cadenza_load_progress", sa.MetaData(),
    sa.Column("load_id", sa.String(32), primary_key=True),
    sa.Column("checksum", sa.String(64), primary_key=True),
    sa.Column("table_name", sa.String(255), nullable=False),
    sa.Column("rows_done", sa.BigInteger, nullable=False),
    sa.Column("done", sa.Boolean, nullable=False),
    sa.Column("holder", sa.String(32), nullable=True),
    sa.Column("result_json", sa.Text, nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    mysql_charset="utf8mb4",
)


def take_over(conn: sa.Connection, load_id: str, table: str, holder: str,
              now: datetime) -> bool:
    """Make ``holder`` the holder of the load (or copy) ``load_id``, creating the progress
    table and the load's own row when missing; ``True`` when an earlier attempt had
    started it (its rows say how far it got). A later attempt's holder fences out an
    earlier one that still runs. Shared by file_load and sql_copy."""
    p = PROGRESS
    conn.execute(sa.schema.CreateTable(p, if_not_exists=True))
    taken = conn.execute(p.update().where(p.c.load_id == load_id, p.c.checksum == "")
                         .values(holder=holder, updated_at=now)).rowcount
    if not taken:
        conn.execute(p.insert().values(load_id=load_id, checksum="", table_name=table,
                                       rows_done=0, done=False, holder=holder,
                                       updated_at=now))
    return bool(taken)


def fence(conn: sa.Connection, load_id: str, holder: str, now: datetime, what: str,
          noun: str, **values: Any) -> None:
    """Write ``values`` on the load's own progress row if ``holder`` still holds it; raise
    Retryable (``what`` names the step and its table, ``noun`` the work: load, copy) when a
    later attempt took it over."""
    p = PROGRESS
    if not conn.execute(p.update().where(p.c.load_id == load_id, p.c.checksum == "",
                                         p.c.holder == holder)
                        .values(updated_at=now, **values)).rowcount:
        raise Retryable(f"{what}: another attempt of this step took the {noun} over; this "
                        "one stops (its last batch is rolled back)")


class FileLoadConfig(StepConfig):
    """``path`` (a glob, inside ``[files].roots``), ``connection`` and ``table``; the format
    comes from the extension unless given; ``upsert`` needs ``key``; ``constants`` add
    columns; ``columns`` renames; files already loaded (same checksum) are skipped."""

    path: FilePath = Field(description=(
        "The files to load, inside the file roots; a glob, e.g. inbox/sales-*.csv."))
    connection: SqlConnectionName = Field(description=(
        "The SQL connection of the table, e.g. warehouse."))
    table: TableName = Field(description=(
        "The table the rows go to, e.g. staging_sales or schema.table."))
    format: FileFormat | None = Field(None, description=(
        "The file format (default: from the extension)."), json_schema_extra=RUN_TUNABLE)
    mode: LoadMode = Field("append", description=(
        "append adds rows, overwrite replaces the table's rows, upsert updates by key."),
            json_schema_extra=RUN_TUNABLE)
    key: ColumnList | None = Field(None, title="Key columns", description=(
        "The columns that identify a row, for upsert, e.g. order_id."))
    constants: JsonMap = Field(default_factory=dict, title="Added columns",
                               json_schema_extra=ADVANCED, description=(
        "Columns added to every row, one per line, e.g. source = \"shop\"."))
    columns: dict[str, NonEmptyStr] = Field(default_factory=dict, title="Renamed columns",
                                            json_schema_extra=ADVANCED, description=(
        "File column = table column, one per line, e.g. \"Order No\" = \"order_id\"."))
    csv: CsvOptions = Field(default_factory=CsvOptions, json_schema_extra=ADVANCED | RUN_TUNABLE,
                            description="How a CSV file is read.")
    on_missing: Literal["fail", "skip", "wait"] = Field("fail", description=(
        "When no file matches: fail the step, skip it, or wait for one."),
            json_schema_extra=RUN_TUNABLE)
    skip_if_loaded: bool = Field(True, json_schema_extra=ADVANCED | RUN_TUNABLE, description=(
        "A file loaded before (same checksum) is not loaded again."))

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
    """Load files into a table (docs/steps.md)."""

    name = "file_load"
    Config = FileLoadConfig

    def run(self, ctx: StepContext, config: FileLoadConfig) -> StepResult:
        """Find, check and load the files; see the module's docstring."""
        roots = ctx.settings.file_roots(ctx.home)
        found = files.find(config.path, roots, of_settings(ctx.home, ctx.settings),
                           f"step {ctx.step.name!r}: path")
        if not found:
            return _missing(ctx, config, roots)
        sums = []
        for item in found:  # every checksum first: skip_if_loaded decides on all of them
            with files.open_checked(item) as fh:
                sums.append((item, files.digest(fh)))
        engine = ctx.sql_engine(config.connection)
        load_id = _load_id(ctx, config)
        try:
            with sqlutil.transaction(engine, ctx, f"file_load into {config.table}") as (
                    conn, guard):
                resume = None if load_id is None else _Resume(ctx, conn, guard, load_id,
                                                              config.table)
                load = _Load(ctx, config, conn, guard, resume)
                return load.run(sums)
        except Fatal:
            if load_id is not None:  # failed for good: no attempt will resume this load
                _abandon(engine, config, load_id, ctx)
            raise


def _load_id(ctx: StepContext, config: FileLoadConfig) -> str | None:
    """The id of this step's load: an earlier attempt's (``ctx.last_checkpoint``) or a new
    one, saved before anything is committed; None for a one-transaction load."""
    if not callable(getattr(ctx, "checkpoint", None)):
        return None  # a context without checkpoints: one transaction
    saved = ctx.last_checkpoint
    if isinstance(saved, dict) and saved.get("table") == config.table and isinstance(
            saved.get("load"), str):
        return str(saved["load"])
    load_id = uuid.uuid4().hex
    ctx.checkpoint({"load": load_id, "table": config.table})
    return load_id


def _abandon(engine: sa.Engine, config: FileLoadConfig, load_id: str,
             ctx: StepContext) -> None:
    """Drop what a load that failed for good left: its ``__new`` table and its progress."""
    def clean() -> None:
        with engine.begin() as conn:
            if config.mode == "overwrite":
                sqlutil.drop_table(conn, sqlutil.sibling(config.table, "__new"))
            if sqlutil.exists(conn, PROGRESS.name):
                done = conn.execute(sa.select(PROGRESS.c.rows_done).where(
                    PROGRESS.c.load_id == load_id, PROGRESS.c.checksum == "")).scalar()
                conn.execute(PROGRESS.delete().where(PROGRESS.c.load_id == load_id))
                if done and config.mode != "overwrite":
                    ctx.log.warning("%s rows committed into %s before the failure stay",
                                    done, config.table)
    sqlutil.quietly(clean)


class _Resume:
    """The progress of one resumable load in the target database (see the module
    docstring): taken over at start, advanced and fenced at each commit."""

    def __init__(self, ctx: StepContext, conn: sa.Connection, guard: sqlutil.Guard,
                 load_id: str, table: str) -> None:
        self.ctx, self.conn, self.guard = ctx, conn, guard
        self.clock = clock_of(ctx)
        self.load_id, self.table = load_id, table
        self.holder = uuid.uuid4().hex
        self.files: dict[str, tuple[int, bool]] = {}
        self.result: dict[str, Any] | None = None
        self.resumed = False
        self.rows = 0

    def start(self) -> None:
        """Take the load over (or create it); read what earlier attempts committed."""
        p = PROGRESS
        if take_over(self.conn, self.load_id, self.table, self.holder, self.clock.now()):
            self.resumed = True
            for checksum, rows, done, result in self.conn.execute(sa.select(
                    p.c.checksum, p.c.rows_done, p.c.done, p.c.result_json).where(
                    p.c.load_id == self.load_id)):
                if checksum == "":
                    self.rows = int(rows)
                    if done and result:
                        self.result = json.loads(result)
                else:
                    self.files[checksum] = (int(rows), bool(done))
        sqlutil.recommit(self.conn, self.guard, self.ctx)

    def advance(self, checksum: str, rows_done: int, done: bool, total: int) -> None:
        """Record a file's progress (in the transaction of its rows)."""
        p, now = PROGRESS, self.clock.now()
        changed = self.conn.execute(p.update().where(
            p.c.load_id == self.load_id, p.c.checksum == checksum).values(
            rows_done=rows_done, done=done, updated_at=now)).rowcount
        if not changed:
            self.conn.execute(p.insert().values(
                load_id=self.load_id, checksum=checksum, table_name=self.table,
                rows_done=rows_done, done=done, updated_at=now))
        self.files[checksum] = (rows_done, done)
        self._fence(rows_done=total)

    def commit(self) -> None:
        sqlutil.recommit(self.conn, self.guard, self.ctx)

    def finish(self, output: dict[str, Any]) -> None:
        """Mark the load done with its output, and prune old loads' progress (committed by
        the step's transaction, with the last rows and the swap)."""
        self._fence(rows_done=int(output["rows"]), done=True,
                    result_json=json.dumps(output, default=str))
        self.conn.execute(PROGRESS.delete().where(
            PROGRESS.c.updated_at < self.clock.now() - KEEP_PROGRESS))

    def _fence(self, **values: Any) -> None:
        fence(self.conn, self.load_id, self.holder, self.clock.now(),
              f"file_load into {self.table}", "load", **values)


def _missing(ctx: StepContext, config: FileLoadConfig, roots: list[Any]) -> StepResult:
    where = ", ".join(str(r) for r in roots)
    if config.on_missing == "fail":
        raise Fatal(f"no file matches {config.path!r} in [files].roots ({where})")
    if config.on_missing == "wait":
        raise Deferred(clock_of(ctx).now() + WAIT_RETRY,
                       f"no file matches {config.path!r} yet; waiting for it")
    ctx.log.warning("no file matches %s; skipped (on_missing = skip)", config.path)
    return StepResult(0, {"rows": 0, "table": config.table, "mode": config.mode, "files": [],
                          "checksums": [], "skipped": [{"path": config.path, "reason": "missing"}]})


class _Load:
    """One load, inside the step's transaction."""

    def __init__(self, ctx: StepContext, config: FileLoadConfig, conn: sa.Connection,
                 guard: sqlutil.Guard, resume: _Resume | None = None) -> None:
        self.ctx, self.config, self.conn, self.guard = ctx, config, conn, guard
        self.resume = resume
        self.total = 0
        self.dialect = sqlutil.kind(conn)
        self.format = config.format or format_from_path(config.path) or "csv"
        self.table_columns: dict[str, str] | None = None

    def run(self, sums: list[tuple[files.FoundFile, str]]) -> StepResult:
        """Choose the files, load them, swap (overwrite), record them; the output."""
        config = self.config
        if self.resume is not None:
            self.resume.start()
            if self.resume.result is not None:
                self.ctx.log.info("loaded by an earlier attempt of this step (%s rows)",
                                  self.resume.result.get("rows"))
                return StepResult(int(self.resume.result.get("rows") or 0),
                                  self.resume.result)
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
            if self.dialect == "mysql" and dest != config.table and self.resume is None:
                # DDL is not transactional (a resumable load keeps __new for its next attempt)
                sqlutil.quietly(lambda: sqlutil.drop_table(self.conn, dest))
            raise
        if config.skip_if_loaded or (recorded is not None and config.mode == "overwrite"):
            files.record(self.conn, config.table, todo, replace=config.mode == "overwrite",
                         now=clock_of(self.ctx).now())
        output["rows"] = rows
        if self.resume is not None:
            self.resume.finish(output)
        return StepResult(rows, output)

    # -- loading ------------------------------------------------------------------------

    def _fill(self, dest: str, todo: list[tuple[files.FoundFile, str]]) -> tuple[
            int, list[str], bool]:
        """Load every file into ``dest``; returns rows, statements to run after a swap,
        and whether the swap replaces a live table."""
        conn, config = self.conn, self.config
        after: list[str] = []
        live = sqlutil.exists(conn, config.table)
        resume = self.resume
        if config.mode == "overwrite":
            if resume is not None and resume.files and sqlutil.exists(conn, dest):
                after = sqlutil.sqlite_extras(conn, config.table) if live else []
                self.ctx.log.info("resuming the load into %s", dest)
            else:
                if resume is not None:  # nothing of it committed, or its __new is gone
                    resume.files.clear()
                sqlutil.drop_table(conn, dest)
                if live:
                    after = sqlutil.copy_shape(conn, config.table, dest)
        if sqlutil.exists(conn, dest):
            self.table_columns = sqlutil.columns_of(conn, dest)
        self.total = 0
        for item, checksum in todo:
            self.guard.check(self.ctx)
            done_rows, done = (0, False) if resume is None else resume.files.get(
                checksum, (0, False))
            if done:
                self.ctx.log.info("%s: %d rows loaded by an earlier attempt", item.display,
                                  done_rows)
                self.total += done_rows
                continue
            with files.open_checked(item) as fh:
                if files.digest(fh) != checksum:
                    raise Retryable(f"{item.display} changed while the step ran; try again")
                fh.seek(0)
                if done_rows:
                    self.ctx.log.info("%s: resuming after %d rows loaded by an earlier "
                                      "attempt", item.display, done_rows)
                rows = self._load_file(dest, item, fh, live, checksum, done_rows)
            self.ctx.log.info("%s: %d rows into %s", item.display, rows, config.table)
            self.total += rows
            if resume is not None:
                resume.advance(checksum, rows, True, self.total)
                resume.commit()
        return self.total, after, live

    def _load_file(self, dest: str, item: files.FoundFile, fh: BinaryIO, live: bool,
                   checksum: str = "", skip: int = 0) -> int:
        """Load one file into ``dest``, after its first ``skip`` rows (committed by an
        earlier attempt); with a resumable load, commit every :data:`COMMIT_ROWS` rows with the
        file's progress. Returns the file's rows (``skip`` included)."""
        from cadenza.steps.builtin.lib import readers

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
        rows = skip
        batches = _skipped(chain([first], source.batches), skip)
        del first  # only the batch being written stays in memory
        resume, every = self.resume, COMMIT_ROWS
        since = 0
        try:
            with writer:
                for batch in batches:
                    self.guard.check(self.ctx)
                    for piece in ([batch] if resume is None else _pieces(batch, every, since)):
                        if not piece.size:
                            continue
                        writer.write(piece)
                        rows += piece.size
                        since += piece.size
                        if resume is not None and since >= every:
                            writer.pause()
                            resume.advance(checksum, rows, False, self.total + rows)
                            resume.commit()
                            since = 0
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

    def pause(self) -> None:
        """End the open COPY (PostgreSQL) before a commit; the next write opens another."""
        self._switch(None)

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
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.csv as pacsv  # type: ignore[import-untyped]

        arrays = list(batch.arrow.columns)
        for value in self.consts:
            arrays.append(pa.nulls(batch.size) if value is None else pa.array([value] * batch.size))
        table = pa.RecordBatch.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(include_header=False))
        self._switch("csv").write(memoryview(sink.getvalue()))


def _slice(batch: readers.Batch, start: int, stop: int) -> readers.Batch:
    """Rows ``start:stop`` of ``batch`` (Arrow slices share the buffers)."""
    from cadenza.steps.builtin.lib import readers

    if start == 0 and stop >= batch.size:
        return batch
    if batch.arrow is not None:
        return readers.Batch(stop - start, arrow=batch.arrow.slice(start, stop - start),
                             typed=batch.typed)
    return readers.Batch(stop - start, [c[start:stop] for c in batch.columns],
                         typed=batch.typed)


def _skipped(batches: Iterable[readers.Batch], skip: int) -> Iterator[readers.Batch]:
    """``batches`` without their first ``skip`` rows."""
    for batch in batches:
        if skip <= 0:
            yield batch
        elif batch.size <= skip:
            skip -= batch.size
        else:
            yield _slice(batch, skip, batch.size)
            skip = 0


def _pieces(batch: readers.Batch, every: int, since: int) -> Iterator[readers.Batch]:
    """``batch`` cut where the commits fall (every ``every`` rows, ``since`` rows after
    the last one)."""
    start = 0
    room = every - since
    while start < batch.size:
        stop = min(batch.size, start + max(room, 1))
        yield _slice(batch, start, stop)
        start, room = stop, every


def _copyable(arrow: Any) -> bool:
    """Whether Arrow writes every column of the batch as text that COPY reads back."""
    import pyarrow as pa

    t = pa.types
    checks = (t.is_string, t.is_large_string, t.is_integer, t.is_floating, t.is_boolean,
              t.is_date32, t.is_decimal, t.is_timestamp)
    return arrow is not None and all(any(c(f.type) for c in checks) for f in arrow.schema)
