"""The moving parts of ``sql_copy``: the source read with a server-side cursor
(:class:`Source`), the target's bulk writer (:class:`Writer`), the table it creates
(:func:`create_table`) and the copy's progress in the target database (:class:`Progress`).
"""

from __future__ import annotations

import json
import select
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from queue import Full, Queue
from typing import Any

import sqlalchemy as sa

from cadenza.steps.builtin.file_load import PROGRESS, fence, take_over
from cadenza.steps.builtin.lib import sqltypes, sqlutil
from cadenza.steps.runtime import StepContext, clock_of

KEEP_PROGRESS = timedelta(days=30)
"""Progress rows of copies older than this are pruned (by the next copy that ends)."""
MIN_FETCH = 1_000
PIECE = 1_000
"""PostgreSQL to PostgreSQL: COPY text is handed to the target every this many rows."""


def pipeline(items: Iterator[Any], take: Callable[[Any], None], depth: int) -> None:
    """``take(item)`` for each item, in a thread of its own, while this thread produces
    the next items (at most ``depth`` wait in between: memory stays bounded). The first
    error of either side stops both and is raised here; ``take`` ran for a prefix of
    the items only."""
    queue: Queue[Any] = Queue(maxsize=depth)
    failed: list[BaseException] = []
    done = object()

    def work() -> None:
        try:
            while (item := queue.get()) is not done:
                take(item)
        except BaseException as exc:  # handed to the producing thread
            failed.append(exc)

    def put(item: Any) -> bool:
        while worker.is_alive():
            try:
                queue.put(item, timeout=0.2)
                return True
            except Full:
                continue
        return False

    worker = threading.Thread(target=work, name="cadenza-copy-writer", daemon=True)
    worker.start()
    try:
        for item in items:
            if failed or not put(item):
                break
    finally:
        put(done)
        worker.join()
    if failed:
        raise failed[0]


class Stream:
    """An open source: its :attr:`columns`, then its rows in batches."""

    def __init__(self, source: Source, conn: sa.Connection, passthrough: bool) -> None:
        self.source, self.conn = source, conn
        self.raw = sqlutil.raw_connection(conn)
        self.pending: list[Any] | None = None
        self.copy: Any = None
        self.columns = self._open(passthrough)

    def _open(self, passthrough: bool) -> list[sqltypes.Col]:
        s, raw = self.source, self.raw
        table_cols = (sqltypes.table_columns(self.conn, s.table, s.dialect)
                      if s.table is not None else None)
        if s.dialect == "postgresql":
            if passthrough:
                self.cursor = raw.cursor()
                if table_cols is None:  # the query's columns, without running it
                    self.cursor.execute(f"SELECT * FROM ({s.sql}) AS cadenza_q LIMIT 0",
                                        s.params)
                    table_cols = sqltypes.query_columns(self.cursor, s.dialect, [])
                # a table is copied as a table: the server skips the query executor
                what = (sqlutil.qualified(self.conn, s.table).replace("%%", "%")
                        if s.table is not None else f"({s.sql})")
                self.copy = _CopyOut(raw, f"COPY {what} TO STDOUT",
                                     s.params if s.table is None else None)
                return table_cols
            self.cursor = raw.cursor(name=f"cadenza_copy_{uuid.uuid4().hex[:12]}")
            self.cursor.itersize = s.batch
        elif s.dialect == "mysql":
            import pymysql.cursors  # type: ignore[import-untyped]

            self.cursor = raw.cursor(pymysql.cursors.SSCursor)
        else:
            self.cursor = raw.cursor()
        self.cursor.execute(s.sql, s.params)
        if table_cols is not None:
            return table_cols
        if s.dialect == "sqlite":
            self.pending = self.cursor.fetchmany(s.batch)
            if s.describe is not None:
                return self._sqlite_declared(s.describe)
        return sqltypes.query_columns(self.cursor, s.dialect, self.pending or [])

    def _sqlite_declared(self, describe: str) -> list[sqltypes.Col]:
        """A SQLite query's columns: the declared type of each column taken straight from
        a table (a temporary view of the query shows them); the others (expressions)
        from the values of the first rows."""
        inferred = sqltypes.query_columns(self.cursor, "sqlite", self.pending or [])
        view = f"cadenza_describe_{uuid.uuid4().hex[:12]}"
        cur = self.raw.cursor()
        try:
            cur.execute(f'CREATE TEMP VIEW "{view}" AS {describe}')
            try:
                declared = [str(r[2] or "") for r in
                            cur.execute(f'PRAGMA temp.table_info("{view}")').fetchall()]
            finally:
                cur.execute(f'DROP VIEW temp."{view}"')
        except sqlite3.Error:
            return inferred  # a query no view can hold: the values decide
        finally:
            cur.close()
        if len(declared) != len(inferred):
            return inferred
        return [sqltypes.of_sqlite_declared(col.name, decl) if decl else col
                for col, decl in zip(inferred, declared, strict=True)]

    def _fetch(self, n: int) -> list[Any]:
        if self.pending is not None:
            rows, self.pending = self.pending, None
            if rows:
                return list(rows)
        return list(self.cursor.fetchmany(n))

    def batches(self, skip: int, convert: list[sqltypes.Convert | None]) -> Iterator[
            tuple[int, list[Any]]]:
        """``(rows, list of row tuples)`` per batch, after the first ``skip`` rows, each
        value converted."""
        if skip and self.source.dialect == "postgresql":
            self.cursor.scroll(skip)  # MOVE on the server: skipped rows are not sent
            skip = 0
        while skip:
            skip -= len(self._fetch(min(skip, max(self.source.batch, MIN_FETCH)))) or skip
        work = [(i, fn) for i, fn in enumerate(convert) if fn is not None]
        while True:
            rows = self._fetch(self.source.batch)
            if not rows:
                return
            if work:
                out = []
                for row in rows:
                    values = list(row)
                    for i, fn in work:
                        values[i] = fn(values[i])
                    out.append(values)
                rows = out
            yield len(rows), rows

    def raw_batches(self, skip: int) -> Iterator[tuple[int, Any, bool]]:
        """``(rows, COPY text, whether a batch ends there)`` (PostgreSQL to PostgreSQL),
        after ``skip`` rows, in pieces of at most :data:`PIECE` rows, so that the target
        takes a piece while the next one is read. The server sends each row of a COPY as
        one message (protocol: "always one per row"): rows are counted without looking
        into them."""
        size = self.source.batch
        rows = self.copy.rows()
        for _ in range(skip):
            if next(rows, None) is None:
                return
        left = size  # rows until the batch ends
        parts: list[Any] = []
        limit = min(PIECE, left)
        for data in rows:
            parts.append(data)  # a buffer of its own (libpq's copy, freed with it)
            if len(parts) == limit:
                left -= limit
                yield limit, b"".join(parts), left == 0
                parts = []
                if left == 0:
                    left = size
                limit = min(PIECE, left)
        if parts:
            yield len(parts), b"".join(parts), True

    def close(self, failed: bool) -> None:
        """End the read; a failed one drops the connection (an unread MariaDB result
        would be read to its end first)."""
        if failed and self.source.dialect != "sqlite":
            sqlutil.quietly(lambda: self.conn.invalidate())
        # after the invalidation, closing sends nothing; it marks the cursor closed (a
        # PostgreSQL named cursor left open warns when collected)
        sqlutil.quietly(self.cursor.close)


class _CopyOut:
    """``COPY (...) TO STDOUT`` read message by message straight from libpq (psycopg's
    ``Copy.read`` costs a generator and a wait per row: most of the time of a large copy).
    libpq is asked without blocking; when it has no row yet, the socket is waited for with
    ``select`` (so the GIL is free and the step's other threads run)."""

    def __init__(self, raw: Any, sql: str, params: Any) -> None:
        import psycopg

        self.pgconn = raw.pgconn
        self.encoding = raw.info.encoding
        query = psycopg.ClientCursor(raw).mogrify(sql, params)
        self.pgconn.send_query(query.encode(self.encoding))  # raises when it cannot send
        self._result(psycopg.pq.ExecStatus.COPY_OUT)

    def _message(self) -> str:
        return bytes(self.pgconn.error_message or b"").decode(self.encoding, "replace")

    def _wait(self) -> None:
        while not select.select([self.pgconn.socket], [], [], 1.0)[0]:
            continue
        self.pgconn.consume_input()

    def _result(self, expected: Any) -> None:
        """The statement's result, which must have status ``expected``; then, after a
        finished COPY, the end of the results."""
        import psycopg

        while self.pgconn.is_busy():
            self._wait()
        result = self.pgconn.get_result()
        if result is None or result.status != expected:
            if result is not None and result.status == psycopg.pq.ExecStatus.FATAL_ERROR:
                raise psycopg.errors.error_from_result(result, encoding=self.encoding)
            raise psycopg.OperationalError(self._message() or "COPY did not start")
        if expected != psycopg.pq.ExecStatus.COPY_OUT:
            while True:
                while self.pgconn.is_busy():
                    self._wait()
                if self.pgconn.get_result() is None:
                    break

    def rows(self) -> Iterator[Any]:
        """Each row of COPY text (with its newline), then the check of the COPY's end."""
        import psycopg

        get = self.pgconn.get_copy_data
        while True:
            nbytes, data = get(1)
            if nbytes > 0:
                yield data
            elif nbytes == 0:
                self._wait()
            else:
                break
        if nbytes == -2:
            raise psycopg.OperationalError(self._message())
        self._result(psycopg.pq.ExecStatus.COMMAND_OK)


class Source:
    """The source of a copy: its SELECT on one connection, read ``batch`` rows at a time."""

    def __init__(self, engine: sa.Engine, dialect: str, sql: str, params: Any,
                 table: str | None, batch: int, name: str,
                 describe: str | None = None) -> None:
        self.engine, self.dialect, self.sql, self.params = engine, dialect, sql, params
        self.table, self.batch, self.name = table, batch, name
        self.describe = describe

    @contextmanager
    def open(self, passthrough: bool) -> Iterator[Stream]:
        """A :class:`Stream` over the source, in a read-only transaction of its own."""
        what = f"sql_copy: reading {self.table or 'the query'} on {self.name!r}"
        try:
            conn = self.engine.connect()
        except Exception as exc:
            raise sqlutil.translate(exc, f"{what}: cannot connect") from exc
        stream: Stream | None = None
        zone = None
        try:
            try:
                if self.dialect == "postgresql":
                    # a table read twice (a resume) comes in the same order: no scan that
                    # joins another one midway
                    conn.exec_driver_sql("SET LOCAL synchronize_seqscans = off")
                elif self.dialect == "mysql":
                    zone = conn.exec_driver_sql("SELECT @@session.time_zone").scalar()
                    conn.exec_driver_sql("SET time_zone = '+00:00'")  # TIMESTAMPs in UTC
                stream = Stream(self, conn, passthrough)
            except Exception as exc:
                raise sqlutil.translate(exc, what) from exc
            yield stream
        except BaseException:
            if stream is not None:
                stream.close(failed=True)
            else:
                sqlutil.quietly(conn.invalidate)
            raise
        else:
            stream.close(failed=False)
            if zone is not None:
                sqlutil.quietly(lambda: conn.exec_driver_sql(
                    "SET time_zone = %s", (zone,)))
        finally:
            sqlutil.quietly(conn.rollback)
            conn.close()


class Writer:
    """Writes batches into one table with the target's bulk path: PostgreSQL ``COPY``
    (rows, or COPY text as it came), SQLite multi-row ``INSERT``, MariaDB ``executemany``
    (which PyMySQL sends as multi-row ``INSERT``); ``upsert`` with the dialect's
    ``ON CONFLICT`` / ``ON DUPLICATE KEY UPDATE``."""

    def __init__(self, conn: sa.Connection, table: str, names: list[str],
                 cols: list[sqltypes.Col], key: list[str] | None) -> None:
        self.conn, self.names, self.width = conn, names, len(names)
        self.dialect, self.raw = sqlutil.kind(conn), sqlutil.raw_connection(conn)
        self.upsert = key is not None
        self.adapt = [(i, fn) for i, c in enumerate(cols)
                      if (fn := sqltypes.writer(self.dialect, c)) is not None]
        quoted = [sqlutil.quote(conn, n) for n in names]
        listed = ", ".join(quoted)
        self.head = f"INSERT INTO {sqlutil.qualified(conn, table)} ({listed}) VALUES "
        self.tail = self._conflict(quoted, key) if key is not None else ""
        self.copy_sql = f"COPY {sqlutil.qualified(conn, table)} ({listed}) FROM STDIN".replace(
            "%%", "%")
        self.one = "(" + ", ".join(["?" if self.dialect == "sqlite" else "%s"] * self.width) + ")"
        limit = 32_766 if sqlite3.sqlite_version_info >= (3, 32) else 999  # SQLite variables
        self.per_statement = max(1, min(100, limit // max(self.width, 1)))
        self._open: tuple[Any, Any, Any] | None = None

    def _conflict(self, quoted: list[str], key: list[str]) -> str:
        keys = {k.lower() for k in key}
        rest = [q for q, n in zip(quoted, self.names, strict=True) if n.lower() not in keys]
        if self.dialect == "mysql":
            sets = ", ".join(f"{c} = VALUES({c})" for c in rest or quoted[:1])
            return f" ON DUPLICATE KEY UPDATE {sets}"
        conflict = ", ".join(q for q, n in zip(quoted, self.names, strict=True)
                             if n.lower() in keys)
        if not rest:
            return f" ON CONFLICT ({conflict}) DO NOTHING"
        return f" ON CONFLICT ({conflict}) DO UPDATE SET " + ", ".join(
            f"{c} = excluded.{c}" for c in rest)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close(exc)

    def pause(self) -> None:
        """End the open COPY (PostgreSQL) before a commit; the next write opens another."""
        self._close((None, None, None))

    def _close(self, exc: Any) -> None:
        if self._open is not None:
            cursor, manager, _ = self._open
            self._open = None
            try:
                manager.__exit__(*exc)
            finally:
                cursor.close()

    def _copy(self) -> Any:
        if self._open is None:
            cursor = self.raw.cursor()
            from psycopg.copy import LibpqWriter

            # each piece goes to the server at once (psycopg waits for 1 MiB by default):
            # the server parses rows while the next piece comes, instead of in bursts
            manager = cursor.copy(self.copy_sql, writer=LibpqWriter(cursor, flush_threshold=0))
            self._open = (cursor, manager, manager.__enter__())
        return self._open[2]

    def write_raw(self, data: bytes) -> None:
        """Write COPY text rows (PostgreSQL)."""
        self._copy().write(data)

    def write(self, rows: list[Any]) -> None:
        """Write one batch of rows (sequences in the order of the columns)."""
        if self.adapt:
            if rows and not isinstance(rows[0], list):
                rows = [list(r) for r in rows]
            for row in rows:
                for i, fn in self.adapt:
                    row[i] = fn(row[i])
        if self.dialect == "postgresql" and not self.upsert:
            copy = self._copy()
            for row in rows:
                copy.write_row(row)
        elif self.dialect == "sqlite":
            self._sqlite(rows)
        else:
            with self.raw.cursor() as cur:
                cur.executemany(self.head + self.one + self.tail,
                                [tuple(r) for r in rows])

    def _sqlite(self, rows: list[Any]) -> None:
        k, n = self.per_statement, len(rows)
        full = n // k * k
        cur = self.raw.cursor()
        try:
            if full:
                sql = self.head + ", ".join([self.one] * k) + self.tail
                cur.executemany(sql, [[v for row in rows[i:i + k] for v in row]
                                      for i in range(0, full, k)])
            if full < n:
                cur.executemany(self.head + self.one + self.tail, rows[full:])
        finally:
            cur.close()


def create_table(conn: sa.Connection, table: str, cols: list[sqltypes.Col],
                 key: list[str] | None) -> str:
    """CREATE TABLE with the target's type for each column (docs/sql_copy.md) and the key
    as primary key; utf8mb4 on MariaDB. Returns the statement (for the debug log)."""
    dialect = sqlutil.kind(conn)
    keys = {k.lower() for k in key or []}
    parts = [f"{sqlutil.quote(conn, c.name)} {sqltypes.ddl(dialect, c, c.name.lower() in keys)}"
             for c in cols]
    if key:
        parts.append(f"PRIMARY KEY ({', '.join(sqlutil.quote(conn, k) for k in key)})")
    suffix = " DEFAULT CHARSET=utf8mb4" if dialect == "mysql" else ""
    sql = f"CREATE TABLE {sqlutil.qualified(conn, table)} ({', '.join(parts)}){suffix}"
    conn.exec_driver_sql(sql)
    return sql


class Progress:
    """The progress of one resumable copy in the target database (``cadenza_load_progress``,
    shared with file_load: one row per copy): taken over at start, advanced and fenced at
    each commit."""

    def __init__(self, ctx: StepContext, conn: sa.Connection, guard: sqlutil.Guard,
                 copy_id: str, table: str) -> None:
        self.ctx, self.conn, self.guard = ctx, conn, guard
        self.clock = clock_of(ctx)
        self.copy_id, self.table = copy_id, table
        self.holder = uuid.uuid4().hex
        self.result: dict[str, Any] | None = None
        self.rows = 0

    def start(self) -> None:
        """Take the copy over (or create it); read what earlier attempts committed."""
        p = PROGRESS
        if take_over(self.conn, self.copy_id, self.table, self.holder, self.clock.now()):
            row = self.conn.execute(sa.select(p.c.rows_done, p.c.done, p.c.result_json).where(
                p.c.load_id == self.copy_id, p.c.checksum == "")).one()
            self.rows = int(row[0])
            if row[1] and row[2]:
                self.result = json.loads(row[2])
        self.commit()

    def advance(self, rows: int) -> None:
        """Record the rows done (in the transaction of the batch)."""
        self.rows = rows
        self._fence(rows_done=rows)

    def commit(self) -> None:
        """Commit the batch with its progress; the next transaction begins."""
        sqlutil.recommit(self.conn, self.guard, self.ctx)

    def finish(self, output: dict[str, Any]) -> None:
        """Mark the copy done with its output (committed with the swap), and prune old
        progress rows."""
        self._fence(rows_done=int(output["source_rows"]), done=True,
                    result_json=json.dumps(output, default=str))
        self.conn.execute(PROGRESS.delete().where(
            PROGRESS.c.updated_at < self.clock.now() - KEEP_PROGRESS))

    def _fence(self, **values: Any) -> None:
        fence(self.conn, self.copy_id, self.holder, self.clock.now(),
              f"sql_copy into {self.table}", "copy", **values)


def abandon(engine: sa.Engine, table: str, overwrite: bool, copy_id: str,
            ctx: StepContext) -> None:
    """Drop what a copy that failed for good left: its ``__new`` table and its progress."""
    def clean() -> None:
        with engine.begin() as conn:
            if overwrite:
                sqlutil.drop_table(conn, sqlutil.sibling(table, "__new"))
            if sqlutil.exists(conn, PROGRESS.name):
                done = conn.execute(sa.select(PROGRESS.c.rows_done).where(
                    PROGRESS.c.load_id == copy_id, PROGRESS.c.checksum == "")).scalar()
                conn.execute(PROGRESS.delete().where(PROGRESS.c.load_id == copy_id))
                if done and not overwrite:
                    ctx.log.warning("%s rows committed into %s before the failure stay",
                                    done, table)
    sqlutil.quietly(clean)
