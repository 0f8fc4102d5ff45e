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
queued run and sorting them. Chosen by cost, the planner
takes the sort whenever the statistics of ``runs`` say that few runs are QUEUED: a table
never analyzed (autovacuum off) or analyzed before a burst was queued (a history of ended
runs, then 14,000 queued: 25 ms per claim instead of 0.3; W4 at 20,000 leases spent most
of its time there). ``enable_sort = off`` forbids no sort; it makes the planner take an
ordered path where there is one. The earlier value is kept in ``cadenza.sorts_were`` and
set back after the statement (:data:`SORTS_AGAIN_COLUMN`, :data:`SORTS_AGAIN`);
``set_config(..., true)`` lasts until the transaction's end at most. Sent with the statement
in one round trip (psycopg's pipeline): it answers nothing the statement waits for."""
SORTS_AGAIN = "SELECT set_config('enable_sort', current_setting('cadenza.sorts_were'), true)"
SORTS_AGAIN_COLUMN = (", set_config('enable_sort', current_setting('cadenza.sorts_were'),"
                      " true) AS sorts_again")
"""The same, as the last column of the claim's RETURNING: evaluated after the statement was
planned, so a claim that took runs sets the value back without a round trip of its own
(the statement above only runs when it took none)."""


@dataclass(frozen=True, slots=True)
class BatchUpdate:
    """One guarded UPDATE applied to many rows, encoded once per dialect.

    ``sqlite``: ``UPDATE ... FROM (VALUES {values}) AS v`` where ``v.columnN`` is the N-th
    of ``columns`` and the ``stamps`` first parameters are the write's timestamp (SQLite
    3.33+: every row of a batch in one statement). ``postgres``: the same statement over
    ``unnest`` of one typed array per column, so that a batch is one statement there too
    (it was one statement per row, pipelined: the server's work per statement made the run
    ends most of a PostgreSQL decision's time)."""

    columns: tuple[str, ...]
    stamps: int
    sqlite: str
    postgres: str


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
        self._numbered: dict[tuple[str, tuple[str, ...], int, str], str] = {}
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
    """Apply the guarded ``update`` to every row and check that each changed one.

    On SQLite one ``UPDATE ... FROM (VALUES ...)`` for all rows (see :func:`insert_rows` for
    why); on PostgreSQL one ``UPDATE ... FROM unnest(...)``."""
    if not rows:
        return
    if d.postgres:
        cursor.execute(update.postgres, _arrays(update, rows, stamp))
        changed = cursor.rowcount
    else:
        columns = update.columns
        changed = 0
        per = max(1, _PARAMS_PER_INSERT // len(columns))
        for first in range(0, len(rows), per):
            chunk = rows[first:first + per]
            values = ", ".join(["(" + d.marks(len(columns)) + ")"] * len(chunk))
            params = [stamp] * update.stamps + [row[c] for row in chunk for c in columns]
            cursor.execute(update.sqlite.format(values=values), params)
            changed += cursor.rowcount
    if changed != len(rows):
        raise StoreError(f"a {what} change was refused after its run passed the fence "
                         f"({changed} of {len(rows)} rows changed)")


def _arrays(update: BatchUpdate, rows: list[dict[str, Any]], stamp: Any) -> list[Any]:
    """The parameters of ``update.postgres``: the stamps, then one list per column."""
    return [stamp] * update.stamps + [[row[c] for row in rows] for c in update.columns]


def update_rows_together(cursor: Any, d: Dialect,
                         parts: list[tuple[BatchUpdate, list[dict[str, Any]], str]],
                         stamp: Any) -> None:
    """:func:`update_rows` for each of ``parts`` (update, rows, what), in order; on
    PostgreSQL all in one pipeline (one round trip; each one's rows changed are checked
    once it is synced)."""
    parts = [part for part in parts if part[1]]
    if not d.postgres or len(parts) < 2:
        for update, rows, what in parts:
            update_rows(cursor, d, update, rows, stamp, what)
        return
    raw = cursor.connection
    cursors = [raw.cursor() for _ in parts]
    try:
        with raw.pipeline():
            for each, (update, rows, _what) in zip(cursors, parts, strict=True):
                each.execute(update.postgres, _arrays(update, rows, stamp))
        for each, (_update, rows, what) in zip(cursors, parts, strict=True):
            if each.rowcount != len(rows):
                raise StoreError(f"a {what} change was refused after its run passed the "
                                 f"fence ({each.rowcount} of {len(rows)} rows changed)")
    finally:
        for each in cursors:
            each.close()


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
