"""Schedule cursors: how far each schedule's fires have been recorded (SPEC §6).

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

from collections.abc import Iterable, Mapping
from datetime import datetime

import sqlalchemy as sa

from cadenza.domain.states import RunState
from cadenza.store.codec import UTCDateTime, require_aware
from cadenza.store.core import StoreCore
from cadenza.store.tables import runs, schedule_cursors

CursorKey = tuple[str, str]
"""(job_id, schedule)."""

_ACTIVE = (RunState.QUEUED.value, RunState.RUNNING.value)
_COLUMNS = (schedule_cursors.c.job_id, schedule_cursors.c.schedule, schedule_cursors.c.last_fire)


_ADVANCE = (
    sa.update(schedule_cursors)
    .where(
        schedule_cursors.c.job_id == sa.bindparam("p_job"),
        schedule_cursors.c.schedule == sa.bindparam("p_schedule"),
        sa.or_(
            schedule_cursors.c.last_fire.is_(None),
            schedule_cursors.c.last_fire < sa.bindparam("p_to", type_=UTCDateTime()),
        ),
    )
    .values(
        last_fire=sa.bindparam("p_to", type_=UTCDateTime()),
        updated_at=sa.bindparam("p_now", type_=UTCDateTime()),
    )
)
"""Built once: building a Core statement costs more than SQLite needs to run it."""
_CHUNK = 500  # job ids per IN (...) list: far below every dialect's bind parameter limit


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
        IMMEDIATE`` already serializes writers. Changes nothing.
        """
        wanted = set(keys)
        found: dict[CursorKey, datetime | None] = {}
        for chunk in _job_chunks(wanted):
            query = (
                sa.select(*_COLUMNS)
                .where(schedule_cursors.c.job_id.in_(chunk))
                .order_by(schedule_cursors.c.job_id, schedule_cursors.c.schedule)
            )
            if self.dialect == "postgresql":
                query = query.with_for_update()
            for row in conn.execute(query):
                if (row.job_id, row.schedule) in wanted:
                    found[(row.job_id, row.schedule)] = row.last_fire
        return found

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

    def advance_cursor(
        self,
        job_id: str,
        schedule: str,
        to: datetime,
        *,
        conn: sa.Connection | None = None,
    ) -> bool:
        """Move one cursor forward to ``to``; never backwards.

        Sets last_fire and updated_at when the row exists and its last_fire is NULL or
        earlier than ``to``; returns whether it moved. Writes no event.
        """
        when = require_aware(to, "to")
        with self._joined(conn) as c:
            changed = c.execute(
                _ADVANCE, {"p_job": job_id, "p_schedule": schedule, "p_to": when,
                           "p_now": self._now()}
            ).rowcount
        return bool(changed == 1)

    def advance_cursors(
        self,
        targets: Mapping[CursorKey, datetime],
        *,
        create: bool = True,
        conn: sa.Connection | None = None,
    ) -> None:
        """Move each cursor of ``targets`` forward to its instant (never backwards), in one
        statement executed for every row.

        With ``create``, a missing cursor is created at its instant first (used when a
        schedule is disabled, removed or changed: nothing before that instant is owed).
        Sets last_fire and updated_at. Writes no event.
        """
        if not targets:
            return
        now = self._now()
        rows = [
            {"p_job": job, "p_schedule": name, "p_to": require_aware(when, "target"),
             "p_now": now}
            for (job, name), when in sorted(targets.items())
        ]
        with self._joined(conn) as c:
            if create:
                for (job, name), when in sorted(targets.items()):
                    self.init_cursors([(job, name)], when, conn=c)
            c.execute(_ADVANCE, rows)

    def count_active_runs(
        self, job_ids: Iterable[str], *, conn: sa.Connection | None = None
    ) -> dict[str, int]:
        """How many runs of each job are QUEUED or RUNNING (jobs with none are absent).

        The scheduler's overlap check (``on_overlap``, SPEC §4); read in the caller's
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
