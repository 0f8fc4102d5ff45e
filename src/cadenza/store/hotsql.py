"""The plain SQL of the executor's write path, in each driver's parameter style.

:mod:`cadenza.store.recording` and :mod:`cadenza.store.execution` write through these helpers
on the DBAPI cursor of a store transaction. Why not SQLAlchemy Core here: these statements
run for every run, and Core's per-statement overhead (50-80 µs of Python each) cost more than
SQLite needs to execute them. Why few statements, each for many rows: the writer holds the
store's write lock, and the sqlite3 module lets go of the GIL for every row it steps; getting
it back can take a switch interval while other threads run, so one statement for many rows
keeps the lock held briefly. Values are encoded as the tables' types do
(:mod:`cadenza.store.codec`): timestamps in UTC, naive text of a fixed width on SQLite.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from cadenza.domain.errors import StoreError

_SQL = {
    "end_step": "UPDATE step_runs SET state = :state, updated_at = :now, finished_at = :now,"
                " reason = :reason, rows = :rows, output_json = :output, error = :error,"
                " error_class = :error_class WHERE id = :id AND state = 'RUNNING'",
    "params": "UPDATE runs SET params_json = :params, updated_at = :now WHERE id = :id"
              " AND state = 'RUNNING' AND lease_epoch = :epoch",
    "end_run": "UPDATE runs SET state = :state, updated_at = :now, finished_at = :now,"
               " reason = :reason, rows = :rows, error = :error, lease_owner = NULL,"
               " lease_until = NULL, wait_reason = NULL WHERE id = :id AND state = 'RUNNING'"
               " AND lease_epoch = :epoch",
}
_UPDATE_COLUMNS = {
    "end_step": ("id", "state", "reason", "rows", "output", "error", "error_class"),
    "params": ("id", "epoch", "params"),
    "end_run": ("id", "epoch", "state", "rows", "reason", "error"),
}
# SQLite (3.33+): every row of a batch in one statement; v.columnN are the VALUES columns in
# _UPDATE_COLUMNS order, and the "?" before FROM the timestamps (_SQLITE_STAMPS).
_SQLITE_UPDATES = {
    "end_step": "UPDATE step_runs SET state = v.column2, reason = v.column3, rows = v.column4,"
                " output_json = v.column5, error = v.column6, error_class = v.column7,"
                " updated_at = ?, finished_at = ? FROM (VALUES {values}) AS v"
                " WHERE step_runs.id = v.column1 AND step_runs.state = 'RUNNING'",
    "params": "UPDATE runs SET params_json = v.column3, updated_at = ?"
              " FROM (VALUES {values}) AS v WHERE runs.id = v.column1"
              " AND runs.state = 'RUNNING' AND runs.lease_epoch = v.column2",
    "end_run": "UPDATE runs SET state = v.column3, rows = v.column4, reason = v.column5,"
               " error = v.column6, updated_at = ?, finished_at = ?, lease_owner = NULL,"
               " lease_until = NULL, wait_reason = NULL FROM (VALUES {values}) AS v"
               " WHERE runs.id = v.column1 AND runs.state = 'RUNNING'"
               " AND runs.lease_epoch = v.column2",
}
_SQLITE_STAMPS = {"end_step": 2, "params": 1, "end_run": 2}
"""How many timestamp parameters come before the VALUES of each statement above."""
LOG_COLUMNS = ("run_id", "ts", "level", "step", "message")
EVENT_COLUMNS = ("run_id", "event_type", "level", "message", "payload_json", "created_at",
                  "actor")
STEP_COLUMNS = ("run_id", "step", "step_type", "attempt", "state", "reason", "created_at",
                 "started_at", "finished_at", "updated_at")
_NAMED = re.compile(r":(\w+)")
_PARAMS_PER_INSERT = 3000
"""Parameters per multi-row INSERT: far below every driver's limit (SQLite 32766)."""


class Dialect:
    """The statements and the timestamp encoding of one database."""

    def __init__(self, name: str) -> None:
        self.postgres = name == "postgresql"
        convert = (lambda sql: _NAMED.sub(r"%(\1)s", sql)) if self.postgres else (lambda s: s)
        self.sql = {key: convert(sql) for key, sql in _SQL.items()}
        self._convert = convert
        self._inserts: dict[tuple[str, tuple[str, ...], int, str], str] = {}

    def fence(self, count: int) -> str:
        marks = ", ".join(f":r{k}" for k in range(count))
        sql = f"SELECT id, state, lease_epoch, job_id, started_at FROM runs WHERE id IN ({marks})"
        return self._convert(sql + (" FOR UPDATE" if self.postgres else ""))

    def insert(self, table: str, columns: tuple[str, ...], count: int,
               returning: str = "") -> str:
        """``INSERT INTO table (columns) VALUES (...), ... [RETURNING ...]`` for ``count``
        rows, with positional parameters (cached)."""
        key = (table, columns, count, returning)
        sql = self._inserts.get(key)
        if sql is None:
            mark = "%s" if self.postgres else "?"
            row = "(" + ", ".join([mark] * len(columns)) + ")"
            sql = (f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                   + ", ".join([row] * count) + (f" RETURNING {returning}" if returning else ""))
            if len(self._inserts) < 4096:
                self._inserts[key] = sql
        return sql

    def ts(self, value: datetime | None) -> Any:
        """A bind value for a timestamp column (see :class:`~cadenza.store.codec.UTCDateTime`)."""
        if value is None:
            return None
        utc = value.astimezone(UTC)
        return utc if self.postgres else utc.replace(tzinfo=None).isoformat(" ", "microseconds")

    @staticmethod
    def read_ts(value: Any) -> datetime | None:
        """A timestamp column's value as an aware UTC datetime."""
        if value is None:
            return None
        if isinstance(value, datetime):
            return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
        return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


def update_rows(cursor: Any, d: Dialect, kind: str, rows: list[dict[str, Any]], stamp: Any,
            what: str) -> None:
    """Apply the guarded UPDATE ``kind`` to every row and check that each changed one.

    On SQLite one ``UPDATE ... FROM (VALUES ...)`` for all rows (see :func:`insert_rows` for
    why); on PostgreSQL ``executemany``, which psycopg sends as one pipeline."""
    if not rows:
        return
    if d.postgres or len(rows) == 1:
        cursor.executemany(d.sql[kind], rows)
        changed = cursor.rowcount
    else:
        columns = _UPDATE_COLUMNS[kind]
        changed = 0
        per = max(1, _PARAMS_PER_INSERT // len(columns))
        for first in range(0, len(rows), per):
            chunk = rows[first:first + per]
            values = ", ".join(["(" + ", ".join(["?"] * len(columns)) + ")"] * len(chunk))
            sql = _SQLITE_UPDATES[kind].format(values=values)
            params = [stamp] * _SQLITE_STAMPS[kind] + [row[c] for row in chunk for c in columns]
            cursor.execute(sql, params)
            changed += cursor.rowcount
    if changed != len(rows):
        raise StoreError(f"a {what} change was refused after its run passed the fence "
                         f"({changed} of {len(rows)} rows changed)")


def insert_rows(cursor: Any, d: Dialect, table: str, columns: tuple[str, ...],
            rows: list[tuple[Any, ...]], returning: str = "") -> list[Any]:
    """Insert ``rows`` with as few multi-row INSERTs as the parameter limit allows.

    Not ``executemany``: the writer holds the write lock, and the sqlite3 module lets go of
    the GIL for every row it steps; getting it back can take a whole switch interval while
    other threads run, so one statement for many rows keeps the lock held briefly."""
    found: list[Any] = []
    per = max(1, _PARAMS_PER_INSERT // len(columns))
    for first in range(0, len(rows), per):
        chunk = rows[first:first + per]
        cursor.execute(d.insert(table, columns, len(chunk), returning),
                       [value for row in chunk for value in row])
        if returning:
            found.extend(cursor.fetchall())
    return found
