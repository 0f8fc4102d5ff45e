"""Runs created and claimed in batches: the executor's side of the queue (SPEC §7, §18).

:meth:`ExecutionRepository.create_runs` records many unscheduled runs in one transaction;
:meth:`ExecutionRepository.claim_runs` moves up to ``limit`` QUEUED runs to RUNNING in one
transaction (each a conditional UPDATE that increments its lease epoch, the fencing token of
every later write). Step boundaries are recorded by :mod:`cadenza.store.recording`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState
from cadenza.store.boundary import NewRun
from cadenza.store.codec import UTCDateTime, dumps, new_run_id, require_aware
from cadenza.store.hotsql import EVENT_COLUMNS, Dialect, insert_rows
from cadenza.store.recording import RecordingRepository, event_row
from cadenza.store.records import RunRecord
from cadenza.store.staged import claim_event
from cadenza.store.tables import QUEUED_AT, runs

_RUNNING = RunState.RUNNING.value
_QUEUED = RunState.QUEUED.value


def _b(name: str, type_: sa.types.TypeEngine[Any] | None = None) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


def _claim(postgres: bool, by_id: bool, by_job: bool) -> sa.Update:
    """One statement: choose the first QUEUED runs (priority, then scheduled time) and take
    them.

    Parameters: b_now, b_limit, b_owner, b_until, and b_run_ids / b_jobs when filtered."""
    chosen = sa.select(runs.c.id).where(
        # A literal, not a parameter: it must match the partial index's WHERE to use it.
        runs.c.state == sa.literal_column("'QUEUED'"),
        sa.or_(runs.c.not_before.is_(None), runs.c.not_before <= _b("b_now", UTCDateTime())),
    )
    if by_id:
        chosen = chosen.where(runs.c.id.in_(sa.bindparam("b_run_ids", expanding=True)))
    if by_job:
        chosen = chosen.where(runs.c.job_id.in_(sa.bindparam("b_jobs", expanding=True)))
    chosen = chosen.order_by(runs.c.priority.desc(), QUEUED_AT, runs.c.id).limit(
        _b("b_limit"))
    if postgres:  # several nodes claim at once: each skips the rows another is taking
        chosen = chosen.with_for_update(skip_locked=True)
    # A CTE, materialized: as a plain subquery PostgreSQL may evaluate it more than once,
    # and with SKIP LOCKED each evaluation can pick other rows (claiming more than limit).
    cte = chosen.cte("chosen")
    if postgres:
        cte = cte.prefix_with("MATERIALIZED")
    return (
        sa.update(runs)
        # The guard is an expression, not ``state = ?``: given a plain column, SQLite's
        # planner scans every queued run in the index instead of looking the ids up.
        .where(runs.c.id.in_(sa.select(cte.c.id)),
               runs.c.state.op("||")(sa.literal("")) == _QUEUED)
        .values(
            state=_RUNNING,
            lease_epoch=runs.c.lease_epoch + 1,
            lease_owner=_b("b_owner"),
            lease_until=_b("b_until", UTCDateTime()),
            started_at=sa.func.coalesce(runs.c.started_at, _b("b_now", UTCDateTime())),
            updated_at=_b("b_now", UTCDateTime()),
            reason=None,
            wait_reason=None,
        )
        .returning(*runs.c)
    )


# Built once: building and cache-keying Core statements costs more than running them.
_CLAIMS = {
    (pg, i, j): _claim(pg, i, j) for pg in (False, True) for i in (False, True)
    for j in (False, True)
}
_RUN_COLUMNS = ("id", "job_id", "state", "trigger", "schedule", "scheduled_for", "created_at",
                "finished_at", "not_before", "priority", "params_json", "overrides_json",
                "reason", "updated_at")


_TIMESTAMPS = frozenset(c.name for c in runs.c if isinstance(c.type, UTCDateTime))
_SQLITE_CHOSEN = (
    "UPDATE runs SET state = 'RUNNING', lease_epoch = lease_epoch + 1, lease_owner = ?,"
    " lease_until = ?, started_at = coalesce(started_at, ?), updated_at = ?, reason = NULL,"
    " wait_reason = NULL WHERE id IN (SELECT id FROM runs WHERE state = 'QUEUED'"
    " AND (not_before IS NULL OR not_before <= ?) AND id IN ({marks})"
    " ORDER BY priority DESC, coalesce(scheduled_for, created_at), id LIMIT ?)"
    " AND state || '' = 'QUEUED' RETURNING *"
)
_IDS_PER_CLAIM = 900
"""Ids per statement of :func:`_claim_chosen_sqlite` (SQLite's default limit is 32766)."""


class _Row:
    """A decoded ``runs`` row for :meth:`RunRecord.from_row` (which reads ``_mapping``)."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping


def _claim_chosen_sqlite(c: sa.Connection, d: Dialect, ids: list[str], limit: int,
                         owner: str, until: datetime, now: datetime) -> list[RunRecord]:
    """:meth:`ExecutionRepository.claim_runs` among ``run_ids`` on SQLite, as plain SQL on
    the DBAPI cursor: the same statement as ``_CLAIMS[(False, True, False)]``, without
    Core's compilation and per-column result processing (a crowded minute claims hundreds
    of runs at once). Every column of the row is returned (``RETURNING *``), timestamps
    decoded like :class:`~cadenza.store.codec.UTCDateTime`."""
    stamp, read = d.ts(now), d.read_ts
    out: list[RunRecord] = []
    cursor = c.connection.cursor()
    try:
        for first in range(0, len(ids), _IDS_PER_CLAIM):
            if len(out) >= limit:
                break
            part = ids[first:first + _IDS_PER_CLAIM]
            sql = _SQLITE_CHOSEN.format(marks=", ".join(["?"] * len(part)))
            cursor.execute(sql, [owner, d.ts(until), stamp, stamp, stamp, *part,
                                 limit - len(out)])
            names = [col[0] for col in cursor.description]
            stamps = [k for k, name in enumerate(names) if name in _TIMESTAMPS]
            for values in cursor.fetchall():
                row = list(values)
                for k in stamps:
                    row[k] = read(row[k])
                out.append(RunRecord.from_row(
                    cast("sa.Row[Any]", _Row(dict(zip(names, row, strict=True))))))
    finally:
        cursor.close()
    return out


class ExecutionRepository(RecordingRepository):
    """Batched writes for executors: :meth:`create_runs`, :meth:`claim_runs`."""

    def create_runs(
        self, new_runs: Sequence[NewRun], *, conn: sa.Connection | None = None
    ) -> list[str]:
        """Record several unscheduled (manual or call_job) QUEUED runs in one transaction.

        Returns their ids in order. Sets the same columns and writes the same RUN_CREATED
        events as :meth:`~cadenza.store.runs.RunsRepository.create_run` with
        ``schedule=None`` (scheduled fires, which need deduplication, go through that one).
        """
        if not new_runs:
            return []
        now = self._now()
        d = self._sql()
        stamp = d.ts(now)
        rows: list[tuple[Any, ...]] = []
        events: list[dict[str, Any]] = []
        ids: list[str] = []
        for new in new_runs:
            run_id = new_run_id(now)
            scheduled = require_aware(new.scheduled_for) if new.scheduled_for else None
            not_before = require_aware(new.not_before) if new.not_before else None
            ids.append(run_id)
            rows.append((run_id, new.job_id, _QUEUED, new.trigger, None, d.ts(scheduled), stamp,
                         None, d.ts(not_before), new.priority, dumps(dict(new.params)),
                         dumps(dict(new.overrides)), None, stamp))
            when = f" for {scheduled.isoformat()}" if scheduled else ""
            trigger = self.redactor.redact_text(new.trigger)
            events.append(event_row(
                EventType.RUN_CREATED, f"run of {new.job_id} queued{when} ({trigger})",
                run_id, Level.INFO, {
                    "job_id": new.job_id, "state": RunState.QUEUED.value, "trigger": trigger,
                    "schedule": None, "scheduled_for": scheduled,
                    "params": self._redacted(new.params),
                    "overrides": self._redacted(new.overrides),
                    "priority": new.priority, "not_before": not_before, "reason": None,
                }, self.redactor.redact_text(new.actor), stamp))
        with self._joined(conn) as c:
            cursor = c.connection.cursor()
            try:
                insert_rows(cursor, d, "runs", _RUN_COLUMNS, rows)
                insert_rows(cursor, d, "event_log", EVENT_COLUMNS,
                            [tuple(e[k] for k in EVENT_COLUMNS) for e in events])
            finally:
                cursor.close()
        return ids

    def _redacted(self, values: Mapping[str, Any]) -> Any:
        return self.redactor.redact_value(dict(values)) if values else {}

    def claim_runs(
        self,
        owner: str,
        lease_until: datetime,
        *,
        limit: int = 1,
        run_ids: Iterable[str] | None = None,
        job_ids: Iterable[str] | None = None,
        conn: sa.Connection | None = None,
    ) -> list[RunRecord]:
        """Take up to ``limit`` QUEUED runs whose ``not_before`` has passed (highest priority,
        then earliest scheduled time: admission's order), optionally only among ``run_ids``
        and runs of ``job_ids``.

        Each is moved QUEUED -> RUNNING with a conditional UPDATE: lease_epoch + 1 (the new
        holder's fencing token), lease_owner, lease_until, started_at on its first start,
        updated_at; reason and wait_reason cleared. On PostgreSQL the candidates are read
        ``FOR UPDATE SKIP LOCKED``, so concurrent claimers never take the same run. Writes
        one RUN_STATE_CHANGED per claimed run. Admission rules (concurrency caps, windows,
        budgets, resources) are not applied here: the caller decides which runs may start.
        Returns the claimed runs as they are after the change.
        """
        if limit < 1:
            return []
        until = require_aware(lease_until, "lease_until")
        ids = list(run_ids) if run_ids is not None else None
        jobs = list(job_ids) if job_ids is not None else None
        if (ids is not None and not ids) or (jobs is not None and not jobs):
            return []
        params: dict[str, Any] = {"b_limit": limit}
        if ids is not None:
            params["b_run_ids"] = ids
        if jobs is not None:
            params["b_jobs"] = jobs
        key = (self.dialect == "postgresql", ids is not None, jobs is not None)
        d = self._sql()
        with self._joined(conn) as c:
            now = self._now()
            if key == (False, True, False):  # the node's claim of the runs admission chose
                claimed = _claim_chosen_sqlite(c, d, ids or [], limit, owner, until, now)
            else:
                params.update(b_now=now, b_owner=owner, b_until=until)
                claimed = [RunRecord.from_row(row) for row in c.execute(_CLAIMS[key], params)]
            if not claimed:
                return []
            stamp = d.ts(now)
            events = [claim_event(run.id, run.job_id, run.lease_epoch, owner, until, stamp)
                      for run in claimed]
            cursor = c.connection.cursor()
            try:
                insert_rows(cursor, d, "event_log", EVENT_COLUMNS,
                            [tuple(e[k] for k in EVENT_COLUMNS) for e in events])
            finally:
                cursor.close()
        # RETURNING has no order: give them back in the order they were chosen.
        return sorted(claimed, key=lambda run: (-run.priority, run.created_at, run.id))
