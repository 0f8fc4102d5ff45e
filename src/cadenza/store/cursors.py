"""Schedule cursors: how far each schedule's fires have been recorded (docs/scheduling.md).

One row per (job, schedule) in ``schedule_cursors``; ``schedule`` is ``"job"`` for the job's
own schedule and ``"preset:NAME"`` for a preset's, the same name the fire's run carries.
``last_fire`` means: *every fire of this schedule at or before this instant has been recorded*
(as a QUEUED or a MISSED run). The scheduler advances it in the transaction that writes the
runs, so a crash between the two is impossible; it only ever moves forward (a clock stepping
back cannot re-fire), and the UNIQUE (job, schedule, scheduled_for) of ``runs`` makes a
repeated attempt at a fire a no-op.

Cursor writes insert no event: the runs they stand for carry RUN_CREATED / RUN_MISSED.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.states import RunState
from cadenza.store.codec import require_aware
from cadenza.store.core import StoreCore
from cadenza.store.tables import runs, schedule_cursors

CursorKey = tuple[str, str]
"""(job_id, schedule)."""

_ACTIVE = (RunState.QUEUED.value, RunState.RUNNING.value)
_COLUMNS = (schedule_cursors.c.job_id, schedule_cursors.c.schedule, schedule_cursors.c.last_fire)


_CHUNK = 500  # job ids per IN (...) list: far below every dialect's bind parameter limit


_SQLITE_ADVANCE = (
    "UPDATE schedule_cursors SET last_fire = v.column3, updated_at = ?"
    " FROM (VALUES {values}) AS v"
    " WHERE schedule_cursors.job_id = v.column1 AND schedule_cursors.schedule = v.column2"
    " AND (schedule_cursors.last_fire IS NULL OR schedule_cursors.last_fire < v.column3)"
)
_PG_ROWS = (
    "SELECT x->>0 AS job_id, x->>1 AS schedule, (x->>2)::timestamptz AS last_fire"
    " FROM jsonb_array_elements(%s::jsonb) AS x"
)
_PG_LOCK = (
    f"SELECT 1 FROM schedule_cursors c JOIN ({_PG_ROWS}) v"
    " ON c.job_id = v.job_id AND c.schedule = v.schedule"
    " ORDER BY c.job_id, c.schedule FOR UPDATE OF c"
)
_PG_ADVANCE = (
    f"UPDATE schedule_cursors c SET last_fire = v.last_fire, updated_at = %s FROM ({_PG_ROWS}) v"
    " WHERE c.job_id = v.job_id AND c.schedule = v.schedule"
    " AND (c.last_fire IS NULL OR c.last_fire < v.last_fire)"
)
_SQLITE_READ_JOBS = (
    "SELECT job_id, schedule, last_fire FROM schedule_cursors WHERE job_id IN ({marks})"
    " ORDER BY job_id, schedule"
)
_PG_LOCK_JOBS = (
    "SELECT job_id, schedule, last_fire FROM schedule_cursors"
    " WHERE job_id IN (SELECT jsonb_array_elements_text(%s::jsonb))"
    " ORDER BY job_id, schedule FOR UPDATE"
)
_ROWS_PER_UPDATE = 1000  # SQLite: 3 parameters a row, far below its limit (32766)


def _advance_sqlite(
    cursor: Any, rows: list[tuple[str, str, datetime]], ts: Callable[[datetime], Any],
    now: datetime,
) -> None:
    stamp = ts(now)
    for first in range(0, len(rows), _ROWS_PER_UPDATE):
        chunk = rows[first : first + _ROWS_PER_UPDATE]
        values = ", ".join(["(?, ?, ?)"] * len(chunk))
        params = [stamp]
        for job, name, when in chunk:
            params.extend((job, name, ts(when)))
        cursor.execute(_SQLITE_ADVANCE.format(values=values), params)


def _advance_postgresql(cursor: Any, rows: list[tuple[str, str, datetime]],
                        now: datetime) -> None:
    text = json.dumps([(job, name, when.isoformat()) for job, name, when in rows])
    cursor.execute(_PG_LOCK, [text])
    cursor.execute(_PG_ADVANCE, [now, text])


def _job_chunks(keys: Iterable[CursorKey]) -> list[list[str]]:
    jobs = sorted({job for job, _ in keys})
    return [jobs[k : k + _CHUNK] for k in range(0, len(jobs), _CHUNK)]


class CursorsRepository(StoreCore):
    """Schedule cursors (table ``schedule_cursors``) and the scheduler's read of active runs."""

    def get_cursors(
        self,
        keys: Iterable[CursorKey] | None = None,
        *,
        conn: sa.Connection | None = None,
    ) -> dict[CursorKey, datetime | None]:
        """The ``last_fire`` of each existing cursor among ``keys`` (all cursors when None).

        Keys without a row are absent from the answer. Changes nothing.
        """
        query = sa.select(*_COLUMNS)
        with self._reading(conn) as c:
            if keys is None:
                rows = c.execute(query).all()
                return {(row.job_id, row.schedule): row.last_fire for row in rows}
            wanted = set(keys)
            found: dict[CursorKey, datetime | None] = {}
            for chunk in _job_chunks(wanted):
                for row in c.execute(query.where(schedule_cursors.c.job_id.in_(chunk))):
                    if (row.job_id, row.schedule) in wanted:
                        found[(row.job_id, row.schedule)] = row.last_fire
        return found

    def lock_cursors(
        self, keys: Iterable[CursorKey], *, conn: sa.Connection
    ) -> dict[CursorKey, datetime | None]:
        """Read the cursors ``keys`` inside the caller's write transaction, locking them.

        On PostgreSQL the cursor rows of the keys' jobs (every schedule of those jobs) are
        locked ``FOR UPDATE`` in (job, schedule) order, so two schedulers working on the same
        job take turns and the second one sees the first one's committed cursor (no
        deadlock: every caller locks in the same order). On SQLite the caller's ``BEGIN
        IMMEDIATE`` already serializes writers. Changes nothing. Plain SQL on the
        transaction's DBAPI cursor (the scheduler reads a thousand cursors per tick);
        ``last_fire`` is decoded by the column's type, as a Core read would.
        """
        wanted = set(keys)
        found: dict[CursorKey, datetime | None] = {}
        if not wanted:
            return found
        read = self._timestamp_reader()
        cursor = conn.connection.cursor()
        try:
            if self.dialect == "postgresql":
                chunks = [sorted({job for job, _ in wanted})]
            else:
                chunks = _job_chunks(wanted)
            for chunk in chunks:
                if self.dialect == "postgresql":
                    cursor.execute(_PG_LOCK_JOBS, [json.dumps(chunk)])
                else:
                    cursor.execute(_SQLITE_READ_JOBS.format(marks=", ".join("?" * len(chunk))),
                                   chunk)
                for job, name, last_fire in cursor.fetchall():
                    if (job, name) in wanted:
                        found[(job, name)] = read(last_fire)
        finally:
            cursor.close()
        return found

    def _timestamp_reader(self) -> Callable[[Any], datetime | None]:
        """A ``last_fire`` value from the DBAPI as the column type returns it (aware UTC)."""
        dialect = self.engine.dialect
        processor = schedule_cursors.c.last_fire.type.dialect_impl(dialect).result_processor(
            dialect, None)
        return processor or (lambda value: value)

    def init_cursors(
        self,
        keys: Iterable[CursorKey],
        at: datetime,
        *,
        conn: sa.Connection | None = None,
    ) -> int:
        """Create the cursors ``keys`` that do not exist yet, with ``last_fire = at``.

        A schedule seen for the first time starts from ``at`` (no backfill). Existing rows
        are left alone (``INSERT ... ON CONFLICT DO NOTHING``), so racing schedulers agree.
        Sets job_id, schedule, last_fire, updated_at; returns the number of rows created.
        Writes no event.
        """
        when = require_aware(at, "at")
        now = self._now()
        created = 0
        stmt = self._insert_ignore(schedule_cursors, ["job_id", "schedule"])
        with self._joined(conn) as c:
            for job_id, name in sorted(set(keys)):
                values = {"job_id": job_id, "schedule": name, "last_fire": when, "updated_at": now}
                created += c.execute(stmt.values(values)).rowcount
        return created

    def advance_cursors(
        self,
        targets: Mapping[CursorKey, datetime],
        *,
        create: bool = True,
        conn: sa.Connection | None = None,
    ) -> None:
        """Move each cursor of ``targets`` forward to its instant (never backwards).

        With ``create``, a missing cursor is created at its instant first (used when a
        schedule is disabled, removed or changed: nothing before that instant is owed).
        Sets last_fire and updated_at. Writes no event. The rows change in a few statements
        whatever their number (SQLite: ``UPDATE ... FROM (VALUES ...)``; PostgreSQL: the rows
        locked in (job, schedule) order first, as :meth:`lock_cursors` does, then one
        ``UPDATE ... FROM jsonb_array_elements(...)``).
        """
        if not targets:
            return
        now = self._now()
        ordered = sorted((key, require_aware(when, "target")) for key, when in targets.items())
        with self._joined(conn) as c:
            if create:
                for (job, name), when in ordered:
                    self.init_cursors([(job, name)], when, conn=c)
            rows = [(job, name, when) for (job, name), when in ordered]
            cursor = c.connection.cursor()
            try:
                if self.dialect == "postgresql":
                    _advance_postgresql(cursor, rows, now)
                else:
                    _advance_sqlite(cursor, rows, self._sqlite_ts(), now)
            finally:
                cursor.close()

    def _sqlite_ts(self) -> Callable[[datetime], Any]:
        processor = schedule_cursors.c.last_fire.type.dialect_impl(
            self.engine.dialect).bind_processor(self.engine.dialect)
        return processor or (lambda value: value)

    def count_active_runs(
        self, job_ids: Iterable[str], *, conn: sa.Connection | None = None
    ) -> dict[str, int]:
        """How many runs of each job are QUEUED or RUNNING (jobs with none are absent).

        The scheduler's overlap check (``on_overlap``, docs/scheduling.md); read in the caller's
        transaction when given. Changes nothing.
        """
        wanted = sorted(set(job_ids))
        if not wanted:
            return {}
        query = (
            sa.select(runs.c.job_id, sa.func.count())
            .where(runs.c.job_id.in_(wanted), runs.c.state.in_(_ACTIVE))
            .group_by(runs.c.job_id)
        )
        with self._reading(conn) as c:
            rows = c.execute(query).all()
        return {str(job): int(count) for job, count in rows}
