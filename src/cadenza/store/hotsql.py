"""The plumbing of the executor's plain-SQL write path, in each driver's parameter style.

:mod:`cadenza.store.claims` (taking runs), :mod:`cadenza.store.boundaries` (step boundaries
and run ends) and :mod:`cadenza.store.members` (the pools' members) own their statements and
write them through these helpers on the DBAPI cursor of a store transaction. Why not
SQLAlchemy Core here: these statements run for every run, and Core's per-statement overhead
in Python costs more than SQLite needs to execute them. Why few statements, each for many
rows: the writer holds the store's write lock, and the sqlite3 module lets go of the GIL for
every row it steps; getting it back can take a switch interval while other threads run, so
one statement for many rows keeps the lock held briefly. Values are encoded as the tables'
types do (:mod:`cadenza.store.codec`): timestamps in UTC, naive text of a fixed width on
SQLite.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from cadenza.domain.errors import StoreError
from cadenza.store import later
from cadenza.store.codec import utc_from_raw

ORDERED = ("SELECT set_config('cadenza.sorts_were', current_setting('enable_sort'), true),"
           " set_config('enable_sort', 'off', true)")
"""PostgreSQL, before a claim from the queue (not among given run ids) and before
admission's read of the queued runs that may start: for that statement, prefer the ordered
scan of ``ix_runs_claim_order`` (it reads the first queued rows and stops) to reading every
queued run and sorting them. Chosen by cost, the planner takes the sort whenever the
statistics of ``runs`` say that few runs are QUEUED: a table never analyzed (autovacuum
off) or analyzed before a burst was queued (a history of ended runs, then 14,000 queued:
25 ms per claim instead of 0.3; W4 at 20,000 leases spent most of its time there).
``enable_sort = off`` forbids no sort; it makes the planner take an ordered path where there
is one. The earlier value is kept in ``cadenza.sorts_were`` and set back after the
statement (:data:`SORTS_AGAIN_COLUMN`, :data:`SORTS_AGAIN`); ``set_config(..., true)``
lasts until the transaction's end at most. Sent with the statement in one round trip
(psycopg's pipeline): it answers nothing the statement waits for."""
SORTS_AGAIN = "SELECT set_config('enable_sort', current_setting('cadenza.sorts_were'), true)"
SORTS_AGAIN_COLUMN = (", set_config('enable_sort', current_setting('cadenza.sorts_were'),"
                      " true) AS sorts_again")
"""The same, as the last column of the claim's RETURNING: evaluated after the statement was
planned, so a claim that took runs sets the value back without a round trip of its own
(the statement above only runs when it took none)."""


INDEX_SCAN = ("SELECT set_config('cadenza.bitmaps_were', current_setting('enable_bitmapscan'),"
              " true), set_config('enable_bitmapscan', 'off', true)")
"""PostgreSQL, before admission's count of the RUNNING runs per job: for that statement, a
plain index scan rather than a bitmap scan. Every run that ended since the last vacuum
leaves a dead entry for its RUNNING row version in the indexes on ``state``; a bitmap scan
visits them all again at every decision (0.3 ms on average over a drain of 10,000 runs,
2.2 ms at its end: it grows until autovacuum passes, with a history of 1,000,000 runs by
up to a fifth of it), where an index scan marks them dead the first time it meets them and
skips them after (0.04 ms). Set back after the statement (:data:`BITMAPS_AGAIN`), in the
same round trip."""
BITMAPS_AGAIN = ("SELECT set_config('enable_bitmapscan', current_setting('cadenza.bitmaps_were'),"
                 " true)")


@dataclass(frozen=True, slots=True)
class BatchUpdate:
    """One guarded UPDATE applied to many rows, encoded once per dialect.

    ``sqlite``: ``UPDATE ... FROM (VALUES {values}) AS v`` where ``v.columnN`` is the N-th
    of ``columns`` and the ``stamps`` first parameters are the write's timestamp (SQLite
    3.33+: every row of a batch in one statement). On PostgreSQL the same statement with
    numbered parameters, the VALUES list's columns named as SQLite names them and typed by
    ``types`` (:meth:`Dialect.batch_update`): a batch is one statement there too. It was
    one statement per row, pipelined; arrays through ``unnest`` cost more Python for the
    batches of one row that most writes are."""

    columns: tuple[str, ...]
    stamps: int
    sqlite: str
    types: tuple[str, ...]
    """The PostgreSQL type of each of ``columns``."""
    replan: bool = False
    """PostgreSQL: plan the statement at each execution, never a prepared plan. For a table
    that a new store starts empty and that grows fast (``step_runs``): the plan made once
    psycopg prepared the statement, a hash join over a scan of the whole table (right for
    a few rows), stayed in use as the table grew, until autovacuum next analyzed it. A
    plan costs about 0.15 ms of the server's time per batch."""


LOG_COLUMNS = ("run_id", "ts", "level", "step", "message")
EVENT_COLUMNS = ("run_id", "event_type", "level", "message", "payload_json", "created_at",
                  "actor")
AUDIT_COLUMNS = ("run_id", "resource_id", "event_type", "level", "message", "payload_json",
                 "created_at", "actor")
"""The columns of :meth:`~cadenza.store.boundaries.BoundaryWriter.emit_events` rows."""
audit_row = itemgetter(*AUDIT_COLUMNS)
"""An event row (a dict keyed by column) as the tuple of :data:`AUDIT_COLUMNS`."""
event_values = itemgetter(*EVENT_COLUMNS)
"""An event row as the tuple of :data:`EVENT_COLUMNS`."""
STEP_COLUMNS = ("run_id", "step", "step_type", "attempt", "state", "reason", "created_at",
                 "started_at", "finished_at", "updated_at")
_PARAMS_PER_INSERT = 3000
"""Parameters per multi-row INSERT: far below every driver's limit (SQLite 32766)."""


class Dialect:
    """The statements and the timestamp encoding of one database."""

    def __init__(self, name: str) -> None:
        self.postgres = name == "postgresql"
        self.mark = "%s" if self.postgres else "?"
        """The positional parameter mark of the driver."""
        self._inserts: dict[tuple[str, tuple[str, ...], int, str], str] = {}
        self._numbered: dict[tuple[Any, ...], str] = {}
        self._last_ts: tuple[datetime | None, Any] = (None, None)

    def marks(self, count: int) -> str:
        """``count`` positional parameter marks, comma-separated."""
        return ", ".join([self.mark] * count)

    def insert(self, table: str, columns: tuple[str, ...], count: int,
               returning: str = "") -> str:
        """``INSERT INTO table (columns) VALUES (...), ... [RETURNING ...]`` for ``count``
        rows, with positional parameters (cached)."""
        key = (table, columns, count, returning)
        sql = self._inserts.get(key)
        if sql is None:
            row = "(" + self.marks(len(columns)) + ")"
            sql = (f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                   + ", ".join([row] * count) + (f" RETURNING {returning}" if returning else ""))
            if len(self._inserts) < 4096:
                self._inserts[key] = sql
        return sql

    def batch_update(self, update: BatchUpdate, count: int) -> str:
        """PostgreSQL: ``update`` for ``count`` rows with numbered parameters (the stamps
        first, then the rows), the first row's typed (cached)."""
        key = (update, count)
        sql = self._numbered.get(key)
        if sql is None:
            parts = update.sqlite.split("?")
            if len(parts) != update.stamps + 1:
                raise ValueError("a batch update's stamps are its only '?' marks")
            text = "".join(f"{part}${k + 1}" for k, part in enumerate(parts[:-1])) + parts[-1]
            width = len(update.columns)
            rows = []
            for k in range(count):
                marks = [f"${update.stamps + k * width + c + 1}" for c in range(width)]
                if k == 0:
                    marks = [f"{mark}::{kind}" for mark, kind in zip(marks, update.types,
                                                                     strict=True)]
                rows.append("(" + ", ".join(marks) + ")")
            names = ", ".join(f"column{c + 1}" for c in range(width))
            sql = text.replace("(VALUES {values}) AS v",
                               f"(VALUES {', '.join(rows)}) AS v({names})")
            if len(self._numbered) < 4096:
                self._numbered[key] = sql
        return sql

    def numbered_insert(self, table: str, columns: tuple[str, ...], count: int,
                        returning: str = "") -> str:
        """PostgreSQL: :meth:`insert` with numbered parameters (``$1, $2, ...``), which
        psycopg's ``RawCursor`` sends as they are. A statement of many rows in ``%s`` style
        is parsed for its marks at every execution (psycopg caches that parse for short
        statements only): it was a tenth of a PostgreSQL drain's Python (cached here)."""
        key = (table, columns, count, returning)
        sql = self._numbered.get(key)
        if sql is None:
            width = len(columns)
            values = ", ".join(
                "(" + ", ".join(f"${k * width + c + 1}" for c in range(width)) + ")"
                for k in range(count))
            sql = (f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}"
                   + (f" RETURNING {returning}" if returning else ""))
            if len(self._numbered) < 4096:
                self._numbered[key] = sql
        return sql

    def ts(self, value: datetime | None) -> Any:
        """A bind value for a timestamp column (see :class:`~cadenza.store.codec.UTCDateTime`).
        The last one is kept: a write encodes its one ``now`` for many rows."""
        if value is None:
            return None
        last = self._last_ts
        if last[0] is value:
            return last[1]
        utc = value.astimezone(UTC)
        out = utc if self.postgres else utc.replace(tzinfo=None).isoformat(" ", "microseconds")
        self._last_ts = (value, out)  # one tuple: threads never see a mismatched pair
        return out

    read_ts = staticmethod(utc_from_raw)
    """A timestamp column's value as an aware UTC datetime."""


def update_rows(cursor: Any, d: Dialect, update: BatchUpdate, rows: list[dict[str, Any]],
                stamp: Any, what: str) -> None:
    """Apply the guarded ``update`` to every row and check that each changed one: one
    ``UPDATE ... FROM (VALUES ...)`` for as many rows as the parameter limit allows (see
    :func:`insert_rows` for why)."""
    update_rows_together(cursor, d, [(update, rows, what)], stamp)


def _chunks(update: BatchUpdate, rows: list[dict[str, Any]],
            stamp: Any) -> list[tuple[int, list[Any]]]:
    """(row count, parameters) of each statement of ``update`` for ``rows``."""
    columns = update.columns
    per = max(1, _PARAMS_PER_INSERT // len(columns))
    return [(len(chunk), [stamp] * update.stamps + [row[c] for row in chunk for c in columns])
            for chunk in (rows[first:first + per] for first in range(0, len(rows), per))]


def update_rows_together(cursor: Any, d: Dialect,
                         parts: list[tuple[BatchUpdate, list[dict[str, Any]], str]],
                         stamp: Any) -> None:
    """:func:`update_rows` for each of ``parts`` (update, rows, what), in order; on
    PostgreSQL all in one pipeline (one round trip; each one's rows changed are checked
    once it is synced)."""
    parts = [part for part in parts if part[1]]
    if not d.postgres:
        for update, rows, what in parts:
            changed = 0
            for count, params in _chunks(update, rows, stamp):
                values = ", ".join(["(" + d.marks(len(update.columns)) + ")"] * count)
                cursor.execute(update.sqlite.format(values=values), params)
                changed += cursor.rowcount
            _check(changed, len(rows), what)
        return
    raw = cursor.connection
    sent: list[tuple[list[Any], int, str]] = []
    try:
        with raw.pipeline() if len(parts) > 1 and later.PIPELINE else nullcontext():
            for update, rows, what in parts:
                cursors: list[Any] = []
                sent.append((cursors, len(rows), what))
                for count, params in _chunks(update, rows, stamp):
                    cursors.append(later.numbered_cursor(raw))
                    cursors[-1].execute(d.batch_update(update, count), params,
                                        prepare=False if update.replan else None)
        for cursors, count, what in sent:
            _check(sum(each.rowcount for each in cursors), count, what)
    finally:
        for cursors, _count, _what in sent:
            for each in cursors:
                each.close()


def _check(changed: int, rows: int, what: str) -> None:
    if changed != rows:
        raise StoreError(f"a {what} change was refused after its run passed the fence "
                         f"({changed} of {rows} rows changed)")


def insert_rows(cursor: Any, d: Dialect, table: str, columns: tuple[str, ...],
                rows: list[tuple[Any, ...]], returning: str = "") -> list[Any]:
    """Insert ``rows`` with as few multi-row INSERTs as the parameter limit allows.

    Not ``executemany``: the writer holds the write lock, and the sqlite3 module lets go of
    the GIL for every row it steps; getting it back can take a whole switch interval while
    other threads run, so one statement for many rows keeps the lock held briefly."""
    found: list[Any] = []
    per = max(1, _PARAMS_PER_INSERT // len(columns))
    if d.postgres:
        kept = not returning and table in later.KEPT_TABLES
        raw = cursor.connection
        for first in range(0, len(rows), per):
            chunk = rows[first:first + per]
            sql = d.numbered_insert(table, columns, len(chunk), returning)
            params = [value for row in chunk for value in row]
            if kept and later.keep(cursor, sql, params):
                continue  # sent with the transaction's COMMIT (cadenza.store.later)
            with later.numbered_cursor(raw) as numbered:
                numbered.execute(sql, params)
                if returning:
                    found.extend(numbered.fetchall())
        return found
    for first in range(0, len(rows), per):
        chunk = rows[first:first + per]
        cursor.execute(d.insert(table, columns, len(chunk), returning),
                       [value for row in chunk for value in row])
        if returning:
            found.extend(cursor.fetchall())
    return found
