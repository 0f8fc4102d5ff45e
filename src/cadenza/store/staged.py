"""Claims of runs whose first start was encoded ahead of their due time (a staged burst).

A node that knows a crowded due time is coming (fires the scheduler recorded ahead, SPEC §9,
docs/scheduling.md "Look-ahead") prepares each run's claim before that time: the tracker,
the plan, the first step's context, and here the rows the claim will write
(:meth:`StagedClaims.stage_start`, a :class:`StagedStart`). At the due time
:meth:`StagedClaims.claim_staged` writes them for a chunk of runs in the caller's transaction
with a few multi-row statements and almost no Python per run:

1. one conditional UPDATE of the chunk's runs, QUEUED -> RUNNING (only runs still QUEUED,
   never claimed before: ``lease_epoch = 0``, and due), ``RETURNING id``;
2. their first step runs (INSERT ... RETURNING id);
3. their events: RUN_STATE_CHANGED (the claim) then STEP_STARTED, with the step run's id
   put into the payload encoded ahead;
4. the resolved parameters, where they differ from the requested ones.

The run log lines of the first boundary ("run started ...") are not written here: the
executor gives them back to the run's log with the claim's time, and they are written with
the run's next boundary (as any line a step logs). Fewer rows at the due time; a crash
before that boundary loses those lines, not the claim's audit events.

What is written is exactly what :meth:`~cadenza.store.execution.ExecutionRepository.claim_runs`
followed by :meth:`~cadenza.store.recording.RecordingRepository.record_boundaries` of the
first boundary writes (tests compare the two). A run whose state changed since it was staged
(canceled, claimed by another node) is simply not in the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState, StepState
from cadenza.store.boundary import Boundary
from cadenza.store.codec import dumps, require_aware
from cadenza.store.hotsql import EVENT_COLUMNS, STEP_COLUMNS, insert_rows, update_rows
from cadenza.store.recording import RecordingRepository, event_row
from cadenza.store.records import RunRecord
from cadenza.store.tables import runs

_SENTINEL = "9007199254740993"
"""The step run id in a payload encoded ahead (an integer no table reaches here)."""
_CLAIM = (
    "UPDATE runs SET state = 'RUNNING', lease_epoch = 1, lease_owner = {m},"
    " lease_until = {m}, started_at = coalesce(started_at, {m}), updated_at = {m},"
    " reason = NULL, wait_reason = NULL WHERE id IN ({ids}) AND state || '' = 'QUEUED'"
    " AND lease_epoch = 0 AND (not_before IS NULL OR not_before <= {m}) RETURNING id"
)
_DUE_IDS = ("SELECT id FROM runs WHERE state = 'QUEUED'"
            " AND (not_before IS NULL OR not_before <= {m})")
_IDS_PER_CLAIM = 900


@dataclass(frozen=True, slots=True)
class StagedStart:
    """The rows of one run's claim and first step start, encoded ahead (redacted)."""

    run_id: str
    job_id: str
    step: tuple[str, str, int]
    """The first step's name, type and attempt."""
    events: tuple[tuple[str, str, str, str, str], ...]
    """(event_type, level, message, payload_json, actor); the step run id is a placeholder."""
    params_json: str | None


class StagedClaims(RecordingRepository):
    """:meth:`stage_start`, :meth:`claim_staged`, :meth:`due_queued_ids` (see the module
    docstring)."""

    def stage_start(self, boundary: Boundary, job_id: str, owner: str,
                    lease_until: datetime) -> StagedStart | None:
        """Encode the claim of a fresh run (epoch 0 -> 1) and ``boundary``, its first
        boundary, ahead of time. ``None`` when the boundary is not one step start and
        nothing else but parameters (that run is claimed the ordinary way); its log lines
        are the caller's (see the module docstring)."""
        if (boundary.epoch != 1 or boundary.logs or len(boundary.starts) != 1 or boundary.step_end
                or boundary.run_end or boundary.checkpoint or boundary.events
                or boundary.starts[0].state is not StepState.RUNNING):
            return None
        until = require_aware(lease_until, "lease_until")
        d = self._sql()
        now = self._now()
        claim = claim_event(boundary.run_id, job_id, 1, owner, until, None)
        step_rows = self._events(boundary, [int(_SENTINEL)], job_id, None, now, d)
        events = []
        for row in [claim, *step_rows]:
            payload = row["payload_json"] or ""
            if row is not claim and payload.count(_SENTINEL) != 1:
                return None  # cannot place the id safely: the ordinary way
            events.append((row["event_type"], row["level"], row["message"], payload,
                           row["actor"]))
        redact = self.redactor
        start = boundary.starts[0]
        return StagedStart(
            run_id=boundary.run_id,
            job_id=job_id,
            step=(start.step, start.step_type, start.attempt),
            events=tuple(events),
            params_json=None if boundary.params is None
            else dumps(redact.redact_value(dict(boundary.params))),
        )

    def fresh_queued_runs(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs of ``run_ids`` that are QUEUED and were never claimed (epoch 0), in
        the order given. Changes nothing."""
        found: dict[str, RunRecord] = {}
        ids = list(run_ids)
        with self._reading(None) as c:
            for first in range(0, len(ids), _IDS_PER_CLAIM):
                query = sa.select(runs).where(
                    runs.c.id.in_(ids[first:first + _IDS_PER_CLAIM]),
                    runs.c.state == RunState.QUEUED.value, runs.c.lease_epoch == 0)
                found.update((row.id, RunRecord.from_row(row)) for row in c.execute(query))
        return [found[run_id] for run_id in ids if run_id in found]

    def checkpoint_wal(self) -> None:
        """SQLite: copy the write-ahead log into the database now (PASSIVE: waits for
        nobody), so that the writes of a coming burst do not pay for it (a commit that
        finds the log past ``wal_autocheckpoint`` pages checkpoints it itself). Nothing on
        other databases; never raises (the next checkpoint will do)."""
        if self.dialect != "sqlite":
            return
        try:
            raw = self.engine.raw_connection()
            try:
                raw.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                raw.close()
        except Exception:  # busy, or a memory database: nothing to do
            return

    def events_mark(self, conn: sa.Connection) -> int | None:
        """SQLite: the last event's id, in ``conn``'s write transaction. Every change of a
        run's state writes an event, and SQLite has one writer, so an unchanged mark between
        two transactions of one node means nobody else changed a run in between (a node's
        staged burst then skips re-reading what it knows). ``None`` on PostgreSQL, where
        ids are not taken in commit order."""
        if self.dialect != "sqlite":
            return None
        cursor = conn.connection.cursor()
        try:
            cursor.execute("SELECT max(event_id) FROM event_log")
            row = cursor.fetchone()
            return int(row[0]) if row and row[0] is not None else 0
        finally:
            cursor.close()

    def due_queued_ids(self, at: datetime, *, conn: sa.Connection | None = None) -> set[str]:
        """The ids of the QUEUED runs that may start at ``at`` (``not_before`` passed or
        unset). Changes nothing."""
        d = self._sql()
        sql = _DUE_IDS.format(m="%s" if d.postgres else "?")
        with self._reading(conn) as c:
            cursor = c.connection.cursor()
            try:
                cursor.execute(sql, [d.ts(require_aware(at, "at"))])
                return {row[0] for row in cursor.fetchall()}
            finally:
                cursor.close()

    def claim_staged(self, conn: sa.Connection, staged: Sequence[StagedStart], owner: str,
                     lease_until: datetime, *, now: datetime | None = None) -> dict[str, int]:
        """Claim the runs of ``staged`` still QUEUED, fresh and due, and write their first
        start, in ``conn``'s transaction, at ``now`` (default: the store's clock); returns
        ``{run_id: first step run id}`` of the runs claimed (the others changed since they
        were staged and are left alone)."""
        if not staged:
            return {}
        d = self._sql()
        mark = "%s" if d.postgres else "?"
        now = require_aware(now, "now") if now is not None else self._now()
        stamp, until = d.ts(now), d.ts(require_aware(lease_until, "lease_until"))
        cursor = conn.connection.cursor()
        try:
            taken: set[str] = set()
            for first in range(0, len(staged), _IDS_PER_CLAIM):
                part = staged[first:first + _IDS_PER_CLAIM]
                sql = _CLAIM.format(m=mark, ids=", ".join([mark] * len(part)))
                cursor.execute(sql, [owner, until, stamp, stamp,
                                     *[s.run_id for s in part], stamp])
                taken.update(row[0] for row in cursor.fetchall())
            mine = [s for s in staged if s.run_id in taken]
            if not mine:
                return {}
            running = StepState.RUNNING.value
            returned = insert_rows(cursor, d, "step_runs", STEP_COLUMNS, [
                (s.run_id, *s.step, running, None, stamp, stamp, None, stamp) for s in mine
            ], returning="id, run_id")
            ids = {run_id: int(step_run_id) for step_run_id, run_id in returned}
            events = [(s.run_id, *s.events[0][:4], stamp, s.events[0][4]) for s in mine]
            for s in mine:
                text = str(ids[s.run_id])
                events.extend((s.run_id, kind, level, message,
                               payload.replace(_SENTINEL, text), stamp, actor)
                              for kind, level, message, payload, actor in s.events[1:])
            insert_rows(cursor, d, "event_log", EVENT_COLUMNS, events)
            update_rows(cursor, d, "params", [
                {"id": s.run_id, "epoch": 1, "now": stamp, "params": s.params_json}
                for s in mine if s.params_json is not None], stamp, "run params")
        finally:
            cursor.close()
        return ids


def claim_event(run_id: str, job_id: str, epoch: int, owner: str, until: datetime,
                stamp: Any) -> dict[str, Any]:
    """The RUN_STATE_CHANGED event of a claim (QUEUED -> RUNNING), as ``event_log`` values."""
    return event_row(
        EventType.RUN_STATE_CHANGED, "run QUEUED -> RUNNING", run_id, Level.INFO,
        {"job_id": job_id, "from": RunState.QUEUED.value, "to": RunState.RUNNING.value,
         "reason": None, "epoch": epoch,
         "fields": {"lease_owner": owner, "lease_until": until}},
        "system", stamp)
