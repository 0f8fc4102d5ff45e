"""Step boundaries and run ends: the one place a run's execution is written after its claim.

A *boundary* (:class:`~cadenza.store.boundary.Boundary`) is everything that happens between
two steps of one run: the end of the step that just finished, the audit events and run log
lines it produced, the start of the next step (or the steps recorded SKIPPED on the way), and
possibly the end of the run, which releases the run's lease. Every path that ends a step or a
run (a worker's group commit, ``cadenza run --local``, the first boundary of an ordinary
claim) goes through :meth:`BoundaryWriter.record_boundaries`, which writes any number of
boundaries, of any runs, in one transaction and a fixed number of statements:

1. one fencing read of the runs concerned (``FOR UPDATE`` on PostgreSQL; SQLite's
   ``BEGIN IMMEDIATE`` already holds the write lock): a boundary applies only when its run
   is RUNNING at the boundary's lease ``epoch``; the others are refused and change nothing;
2. step ends (:data:`END_STEP`); the step lease hook
   (:class:`~cadenza.store.hooks.StepLeaseHook`: the pools return what the step that
   ended held and take what the next step needs; a run whose step cannot have it goes back
   to QUEUED in this boundary instead of starting it); step starts as INSERTs (an attempt
   that waited goes on: PENDING -> RUNNING, :data:`RESUME_STEP`), the run's parameters
   (:data:`RUN_PARAMS`) and run ends (:data:`END_RUN`), each a guarded UPDATE of the whole
   batch, every row count checked;
3. the run end hooks (``store.hooks.run_end``, :class:`~cadenza.store.hooks.StoreHooks`),
   in order, with the runs that ended, in the same transaction;
4. run log lines and audit events, redacted, as multi-row INSERTs;
5. the run's checkpoint (:class:`~cadenza.store.boundary.Checkpoint`: the next step and the
   outputs so far, redacted like step outputs), one multi-row upsert for the batch, which
   also clears the step-local state (``step_state_json``) when the next step is another
   one (a retried step keeps its own saved progress).

A run end is terminal (finished_at set) or, for a retry, a deferral or spent attempts, QUEUED
/ NEEDS_REVIEW (not_before, wait_reason and the spent attempts set; finished_at stays empty);
both are one statement, and release the run's lease.

Redaction: log messages, reasons, errors, outputs, parameters and the steps' own events go
through the store's redactor; the payloads of the step and run events are built from those
redacted parts plus ids, counts, states and jobs.toml identifiers (see :func:`event_row`).

The events and their payloads are those the single-row methods
(:meth:`~cadenza.store.steps.StepRunsRepository._transition_step_run`,
:meth:`~cadenza.store.runs.RunsRepository.transition_run`) write.

The run end hook is the plug point of what a run end releases besides its own lease (its
resource leases, docs/pools.md) and what it announces (a notification's outbox row): it runs in the
boundary's transaction, after the guarded UPDATEs, so that a release commits or rolls back
with the end it belongs to.

The statements are plain SQL (:mod:`cadenza.store.hotsql` says why), one text per dialect,
executed on the DBAPI cursor of the transaction's connection, so commits, the SQLite write
lock and the error mapping of :meth:`~cadenza.store.core.StoreCore.write` still apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.errors import InvalidTransition, StoreError
from cadenza.domain.events import EventType, Level
from cadenza.domain.states import (
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    RunState,
    StepState,
    is_allowed,
)
from cadenza.domain.texts import cut_redacted
from cadenza.store.boundary import (
    Boundary,
    BoundaryResult,
    EndedRun,
    LogLine,
    RunEnd,
    StepChange,
)
from cadenza.store.codec import dumps
from cadenza.store.core import Redactor, StoreCore
from cadenza.store.hotsql import (
    AUDIT_COLUMNS,
    LOG_COLUMNS,
    STEP_COLUMNS,
    Dialect,
    audit_row,
    insert_rows,
    update_rows,
    update_rows_together,
)
from cadenza.store.run_states import (
    END_RUN,
    RunEvent,
    batch_update,
    end_fields,
    end_run_row,
    state_events,
)

_RUNNING = RunState.RUNNING.value


END_STEP = batch_update(
    ("id", "state", "reason", "rows", "output", "error", "error_class"), 2,
    "UPDATE step_runs SET state = v.column2, reason = v.column3, rows = v.column4,"
    " output_json = v.column5, error = v.column6, error_class = v.column7,"
    " updated_at = ?, finished_at = CASE WHEN v.column2 = 'PENDING' THEN NULL ELSE ? END"
    " FROM (VALUES {values}) AS v"
    " WHERE step_runs.id = v.column1 AND step_runs.state || '' = 'RUNNING'",
    ("bigint", "text", "text", "bigint", "text", "text", "text"), replan=True)
"""A step run's end: RUNNING -> SUCCEEDED / FAILED / CANCELED with what it recorded, or
RUNNING -> PENDING for an attempt that waits (finished_at stays empty)."""
RESUME_STEP = batch_update(
    ("id",), 1,
    "UPDATE step_runs SET state = 'RUNNING', reason = NULL, updated_at = ?"
    " FROM (VALUES {values}) AS v WHERE step_runs.id = v.column1"
    " AND step_runs.state || '' = 'PENDING'",
    ("bigint",), replan=True)
"""An attempt that waited goes on: PENDING -> RUNNING (its started_at kept)."""
RUN_PARAMS = batch_update(
    ("id", "epoch", "params"), 1,
    "UPDATE runs SET params_json = v.column3, updated_at = ? FROM (VALUES {values}) AS v"
    " WHERE runs.id = v.column1 AND runs.state || '' = 'RUNNING' AND runs.lease_epoch = v.column2",
    ("text", "bigint", "text"))
"""The run's resolved parameters (its first boundary)."""
_FENCE = ("SELECT id, state, lease_epoch, job_id, started_at, parent_run_id IS NOT NULL"
          " FROM runs WHERE id IN ({marks})")
"""The fencing read: whether each run is RUNNING at its boundary's epoch, and what its
events and run end hooks need (its job, its start, whether it is a child run)."""


_CHECKPOINT_COLUMNS = ("run_id", "next_step", "outputs_json", "step_state_json", "updated_at")
# The step-local state survives only while the same step stays next (a retry of that step
# resumes its own progress); moving on to another step clears it.
_CHECKPOINT_UPSERT = (" ON CONFLICT (run_id) DO UPDATE SET next_step = excluded.next_step,"
                      " outputs_json = excluded.outputs_json, step_state_json = CASE WHEN"
                      " checkpoints.next_step = excluded.next_step THEN"
                      " checkpoints.step_state_json ELSE NULL END,"
                      " updated_at = excluded.updated_at")
_CHECKPOINTS_PER_INSERT = 500
_STEP_EVENT = {
    StepState.RUNNING: (EventType.STEP_STARTED, Level.INFO),
    StepState.SUCCEEDED: (EventType.STEP_SUCCEEDED, Level.INFO),
    StepState.FAILED: (EventType.STEP_FAILED, Level.ERROR),
}


def event_row(event_type: EventType | str, message: str, run_id: str, level: Level | str,
              payload: Any, actor: str, created_at: Any,
              redactor: Redactor | None = None) -> dict[str, Any]:
    """One ``event_log`` row, keyed by the column names.

    With ``redactor``, the message and the payload are redacted here. Without, the caller
    built them only from values already redacted (reasons, errors, outputs) or that cannot
    hold a secret (ids, counts, states, times, and identifiers from jobs.toml, which never
    holds one): walking a payload through ``redact_value`` costs more than the rest of a
    step boundary, and the store writes several of these per run."""
    if redactor is not None:
        message = redactor.redact_text(message)
        payload = None if payload is None else redactor.redact_value(payload)
    return {
        "run_id": run_id, "event_type": str(event_type), "level": str(level),
        "message": message, "payload_json": None if payload is None else dumps(payload),
        "created_at": created_at, "actor": actor, "resource_id": None,
    }


class BoundaryWriter(StoreCore):
    """:meth:`record_boundaries` (see the module docstring)."""

    _hot: Dialect | None = None
    def _collect(self, conn: sa.Connection) -> bool:
        """Collect the event rows emitted in ``conn``'s transaction from now on, for one
        multi-row INSERT with the batch's own (:meth:`emit_events`); False when they are
        collected already (the caller then leaves the end to whoever started)."""
        collecting = self.__dict__.setdefault("_collecting", {})
        tx = conn.get_transaction()
        found = collecting.get(id(conn))
        if found is not None and found[0] is tx:
            return False
        collecting[id(conn)] = (tx, [], {}, {})
        return True

    def _claimed_here(self, conn: sa.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        """Fence rows (:data:`_FENCE`'s columns; None for whether the run is a child, not
        read by a claim) of runs this transaction has just claimed, while it collects: its
        first boundaries need not read them again. They are the rows as written: on
        PostgreSQL the claim's UPDATE holds their locks, on SQLite the transaction holds the
        write lock; each is used once (:meth:`_fences_of`)."""
        collecting = self.__dict__.get("_collecting")
        found = None if collecting is None else collecting.get(id(conn))
        if found is not None and found[0] is conn.get_transaction():
            found[2].update((row[0], row) for row in rows)

    def _claims_here(self, conn: sa.Connection, claims: Mapping[str, RunEvent],
                     stamp: Any) -> None:
        """Keep the claim events (RUN_STATE_CHANGED, QUEUED -> RUNNING) of runs this
        collecting transaction has just claimed: each one is said by its run's first step
        start, written next (:meth:`_events`: one STEP_STARTED that says both, not two
        events); a claim whose boundary starts no step, or that no boundary follows, is
        written as its own event."""
        collecting = self.__dict__.get("_collecting")
        found = None if collecting is None else collecting.get(id(conn))
        if found is not None and found[0] is conn.get_transaction():
            found[3].update((run_id, (event, stamp)) for run_id, event in claims.items())

    def _claims_of(self, conn: sa.Connection) -> dict[str, tuple[RunEvent, Any]]:
        """The claim events kept by :meth:`_claims_here` (taken as they are used)."""
        collecting = self.__dict__.get("_collecting")
        found = None if collecting is None else collecting.get(id(conn))
        if found is None or found[0] is not conn.get_transaction():
            return {}
        claims: dict[str, tuple[RunEvent, Any]] = found[3]
        return claims

    def _fences_of(self, conn: sa.Connection, ids: Sequence[str]) -> dict[str, Any] | None:
        """The fence rows of ``ids`` when this transaction claimed every one of them
        (taken: a second boundary of a run in one transaction reads its fence); None
        otherwise."""
        collecting = self.__dict__.get("_collecting")
        found = None if collecting is None else collecting.get(id(conn))
        if found is None or found[0] is not conn.get_transaction():
            return None
        known = found[2]
        if not known or any(run_id not in known for run_id in ids):
            return None
        return {run_id: known.pop(run_id) for run_id in ids}

    def _collected(self, conn: sa.Connection, *, end: bool) -> list[tuple[Any, ...]]:
        """The rows collected in ``conn``'s transaction so far (taken; ``end``: stop
        collecting)."""
        collecting = self.__dict__.get("_collecting")
        found = None if collecting is None else collecting.get(id(conn))
        if collecting is None or found is None or found[0] is not conn.get_transaction():
            return []
        rows = list(found[1])
        found[1].clear()
        if end:
            del collecting[id(conn)]
            rows.extend(audit_row(row) for row in (
                event_row(e.event_type, e.message, run_id, e.level, e.payload, "system", stamp)
                for run_id, (e, stamp) in found[3].items()))
        return rows

    def emit_events(self, conn: sa.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        """Write ``event_log`` rows (:data:`~cadenza.store.hotsql.AUDIT_COLUMNS`, values
        already redacted) in ``conn``'s transaction: with the transaction's coming
        multi-row INSERT of events (a batch of boundaries, a claim that starts its runs),
        or now. What the hooks write (the pools' leases and releases) goes this way: one
        statement for a batch's events, not one per hook."""
        if not rows:
            return
        collecting = self.__dict__.get("_collecting")
        found = None if collecting is None else collecting.get(id(conn))
        if found is not None and found[0] is conn.get_transaction():
            found[1].extend(rows)
            return
        cursor = conn.connection.cursor()
        try:
            insert_rows(cursor, self._sql(), "event_log", AUDIT_COLUMNS, list(rows))
        finally:
            cursor.close()

    def _sql(self) -> Dialect:
        if self._hot is None:
            self._hot = Dialect(self.dialect)
        return self._hot

    def record_boundaries(
        self, boundaries: Sequence[Boundary], *, conn: sa.Connection | None = None
    ) -> list[BoundaryResult]:
        """Apply each boundary whose run is RUNNING at its ``epoch``; refuse the others.

        Returns one :class:`BoundaryResult` per boundary, in order: ``applied`` and the ids of
        the step runs it created, or the run's state when refused (``None``: no such run).
        An applied boundary's state is RUNNING, or QUEUED when the step lease hook
        refused its step's resources: its RUNNING start was dropped and the run ended
        QUEUED instead (``wait_reason`` and a WARNING log line say why; no attempt spent;
        the checkpoint, if any, still names that step).
        Columns changed: a step end sets state, reason, rows, output_json (redacted), error
        (redacted), error_class, finished_at (not for PENDING: the attempt waits),
        updated_at; a step start inserts a row (RUNNING sets started_at, SKIPPED sets
        finished_at), or with ``resumes`` sets that PENDING row RUNNING again; ``params``
        replaces params_json; a run end
        sets state, reason, rows, error (redacted), updated_at and finished_at (terminal) or
        not_before, wait_reason and attempt (QUEUED, NEEDS_REVIEW), and clears the lease;
        then the run end hooks are called with the runs that ended. Events, in this order
        per boundary: the step's own events, STEP_SUCCEEDED / STEP_FAILED /
        STEP_STATE_CHANGED for the end, STEP_STARTED or STEP_STATE_CHANGED per start,
        RUN_STATE_CHANGED and RUN_FINISHED for the run end.

        Raises :class:`InvalidTransition` for a target the state tables forbid (before
        writing anything), and :class:`StoreError` (rolling everything back) if a guarded
        UPDATE changes fewer rows than the fencing read promised.
        """
        for boundary in boundaries:
            _check_targets(boundary)
        if not boundaries:
            return []
        d = self._sql()
        with self._joined(conn) as c:
            cursor = c.connection.cursor()
            mine = self._collect(c)
            try:
                return self._record(c, cursor, d, boundaries, mine)
            finally:
                cursor.close()

    def _record(self, c: sa.Connection, cursor: Any, d: Dialect,
                boundaries: Sequence[Boundary], collecting: bool) -> list[BoundaryResult]:
        ids = sorted({b.run_id for b in boundaries})
        seen = self._fences_of(c, ids)
        if seen is None:
            fence = _FENCE.format(marks=d.marks(len(ids))) + (" FOR UPDATE" if d.postgres
                                                             else "")
            cursor.execute(fence, ids)
            seen = {row[0]: row for row in cursor.fetchall()}
        now = self._now()
        stamp = d.ts(now)
        applied = list(boundaries)
        refused: dict[int, RunState | None] = {}
        for k, b in enumerate(boundaries):
            row = seen.get(b.run_id)
            if row is None or row[1] != _RUNNING or row[2] != b.epoch:
                refused[k] = RunState(row[1]) if row is not None else None
        live = [b for k, b in enumerate(applied) if k not in refused]
        new_ids: dict[int, list[int]] = {}
        events: list[dict[str, Any]] = []
        redact = self.redactor
        ends = [self._end_row(b) for b in live if b.step_end is not None]
        # A batch of run ends only (no step starts, no parameters): the step ends and the
        # run ends are sent together (PostgreSQL: one round trip for both).
        only_ends = all(b.run_end is not None and not b.starts and b.params is None
                        for b in live)
        if not only_ends:
            update_rows(cursor, d, END_STEP, ends, stamp, "step end")
        waiting: Mapping[str, str] = {}
        hooks = self.hooks
        if hooks.step_lease is not None:
            waiting = self._step_leases(c, live, seen, now)
            if waiting:
                applied = [_wait(b, waiting[b.run_id], now)
                           if k not in refused and b.run_id in waiting else b
                           for k, b in enumerate(applied)]
                live = [b for k, b in enumerate(applied) if k not in refused]
        self._start_steps(cursor, d, live, stamp, new_ids)
        if hooks.step_start:
            starting = [(b.run_id, seen[b.run_id][3]) for b in live
                        if any(s.state is StepState.RUNNING for s in b.starts)]
            if starting:
                for start_hook in hooks.step_start:
                    start_hook(c, starting, now)
        update_rows(cursor, d, RUN_PARAMS, [
            {"id": b.run_id, "epoch": b.epoch,
             "params": dumps(redact.redact_value(dict(b.params))) if b.params else "{}"}
            for b in live if b.params is not None], stamp, "run params")
        ending = [b for b in live if b.run_end is not None]
        run_ends = [self._run_end_row(b, d) for b in ending]
        if only_ends:
            update_rows_together(cursor, d, [(END_STEP, ends, "step end"),
                                             (END_RUN, run_ends, "run end")], stamp)
        else:
            update_rows(cursor, d, END_RUN, run_ends, stamp, "run end")
        if hooks.run_end and ending:
            self._run_ended(c, [EndedRun(b.run_id, seen[b.run_id][3], b.run_end.state, b.epoch,
                                         _child(seen[b.run_id][5]))
                                for b in ending if b.run_end is not None], now)
        self._checkpoint(cursor, d, [b for b in live if b.checkpoint is not None], stamp)
        logs = [(b.run_id, d.ts(line.ts), line.level, line.step,
                 cut_redacted(redact.redact_text(line.message))) for b in live for line in b.logs]
        insert_rows(cursor, d, "run_logs", LOG_COLUMNS, logs)
        claims = self._claims_of(c)
        for b in live:
            fence = seen[b.run_id]
            claim = claims.pop(b.run_id, None) if claims else None
            events.extend(self._events(b, new_ids[id(b)], fence[3], d.read_ts(fence[4]), now,
                                       d, claim))
        # The hooks' events (and a claim's, in its transaction) with the batch's own.
        insert_rows(cursor, d, "event_log", AUDIT_COLUMNS, self._collected(c, end=collecting)
                    + list(map(audit_row, events)))
        return [
            BoundaryResult(False, (), refused[k]) if k in refused
            else BoundaryResult(True, tuple(new_ids[id(b)]),
                                RunState.QUEUED if b.run_id in waiting else RunState.RUNNING)
            for k, b in enumerate(applied)
        ]

    def _step_leases(self, c: sa.Connection, live: list[Boundary], seen: Mapping[str, Any],
                     now: datetime) -> Mapping[str, str]:
        """Call the step lease hook with the boundaries of ``live`` that end or start a
        step and do not end their run; ``{run_id: why}`` for the runs that must wait."""
        hook = self.hooks.step_lease
        assert hook is not None
        changes: list[StepChange] = []
        for b in live:
            if b.run_end is not None:
                continue  # the run end hooks release everything the run holds
            starting = next((s.step for s in b.starts if s.state is StepState.RUNNING), None)
            ended = b.step_end.step if b.step_end is not None else None
            if starting is not None or ended is not None:
                changes.append(StepChange(b.run_id, seen[b.run_id][3], ended, starting))
        return hook(c, changes, now) if changes else {}

    def _start_steps(self, cursor: Any, d: Dialect, live: list[Boundary], stamp: Any,
                     new_ids: dict[int, list[int]]) -> None:
        """Insert every step start of the batch at once (see :func:`_insert`)."""
        rows: list[tuple[Any, ...]] = []
        owners: list[tuple[int, tuple[str, str, int]]] = []
        resumed: list[dict[str, Any]] = []
        for b in live:
            new_ids[id(b)] = []
            for start in b.starts:
                if start.resumes is not None:
                    resumed.append({"id": start.resumes})
                    continue
                running = start.state is StepState.RUNNING
                rows.append((b.run_id, start.step, start.step_type, start.attempt,
                             start.state.value, self._redact_text(start.reason), stamp,
                             stamp if running else None, None if running else stamp, stamp))
                owners.append((id(b), (b.run_id, start.step, start.attempt)))
        update_rows(cursor, d, RESUME_STEP, resumed, stamp, "step resume")
        created: dict[tuple[str, str, int], int] = {}
        if rows:
            returned = insert_rows(cursor, d, "step_runs", STEP_COLUMNS, rows,
                                   returning="id, run_id, step, attempt")
            # RETURNING gives no order guarantee: match the rows by their unique key.
            created = {(run_id, step, attempt): int(step_run_id)
                       for step_run_id, run_id, step, attempt in returned}
            if len(created) != len(rows):
                raise StoreError("the database returned fewer ids than step runs inserted")
        mine = iter(owners)
        for b in live:
            for start in b.starts:
                if start.resumes is not None:
                    new_ids[id(b)].append(start.resumes)
                else:
                    new_ids[id(b)].append(created[next(mine)[1]])

    def _checkpoint(self, cursor: Any, d: Dialect, marked: list[Boundary], stamp: Any) -> None:
        """Upsert the checkpoints of ``marked`` (one row per run: the last one wins)."""
        if not marked:
            return
        latest: dict[str, tuple[Any, ...]] = {}
        for b in marked:
            point = b.checkpoint
            assert point is not None
            outputs = dumps(self.redactor.redact_value(
                {name: dict(values) for name, values in point.outputs.items()}))
            latest[b.run_id] = (b.run_id, point.next_step, outputs, None, stamp)
        rows = list(latest.values())
        for first in range(0, len(rows), _CHECKPOINTS_PER_INSERT):
            chunk = rows[first:first + _CHECKPOINTS_PER_INSERT]
            sql = d.insert("checkpoints", _CHECKPOINT_COLUMNS, len(chunk)) + _CHECKPOINT_UPSERT
            cursor.execute(sql, [value for row in chunk for value in row])

    def _end_row(self, b: Boundary) -> dict[str, Any]:
        end = b.step_end
        assert end is not None
        output = None if end.output is None else dumps(self.redactor.redact_value(end.output))
        return {"id": end.step_run_id, "state": end.state.value,
                "reason": self._redact_text(end.reason), "rows": end.rows, "output": output,
                "error": self._redact_text(end.error), "error_class": end.error_class}

    def _run_end_row(self, b: Boundary, d: Dialect) -> dict[str, Any]:
        end = b.run_end
        assert end is not None
        return end_run_row(b.run_id, b.epoch, end.state, end.rows,
                           self._redact_text(end.reason), self._redact_text(end.error),
                           d.ts(end.not_before), self._redact_text(end.wait_reason),
                           end.attempt)

    def _events(self, b: Boundary, created: list[int], job_id: str,
                started: datetime | None, now: datetime, d: Dialect,
                claim: tuple[RunEvent, Any] | None = None) -> list[dict[str, Any]]:
        """The events of boundary ``b``. ``claim``: the claim event of its run, made in this
        transaction (:meth:`_claims_here`): said by the boundary's step start when it has
        one (its message and, as ``run``, its payload), else written first."""
        stamp = d.ts(now)
        if claim is not None and not any(s.state is StepState.RUNNING for s in b.starts):
            event, at = claim
            claim = None
            head = [event_row(event.event_type, event.message, b.run_id, event.level,
                              event.payload, "system", at)]
        else:
            head = []
        rows = head + [event_row(spec.event_type, spec.message, b.run_id, spec.level,
                                 spec.payload, b.actor, d.ts(spec.ts or now), self.redactor)
                       for spec in b.events]
        end = b.step_end
        if end is not None:
            kind, level = _step_event(end.state)
            reason, error = self._redact_text(end.reason), self._redact_text(end.error)
            rows.append(event_row(
                kind, f"step {end.step} (attempt {end.attempt}) RUNNING -> {end.state}"
                + _took(end.rows, end.seconds) + (f": {reason}" if reason else ""),
                b.run_id, level,
                {"step_run_id": end.step_run_id, "step": end.step, "step_type": end.step_type,
                 "attempt": end.attempt, "from": StepState.RUNNING.value,
                 "to": end.state.value, "reason": reason, "rows": end.rows,
                 "error_class": end.error_class, "error": error,
                 "duration_s": end.seconds}, b.actor, stamp))
        for start, step_run_id in zip(b.starts, created, strict=True):
            kind, level = _step_event(start.state)
            reason = self._redact_text(start.reason)
            before = None if start.resumes is None else StepState.PENDING
            payload = {"step_run_id": step_run_id, "step": start.step,
                       "step_type": start.step_type, "attempt": start.attempt,
                       "from": before.value if before else None, "to": start.state.value,
                       "reason": reason}
            said = ""
            if claim is not None and start.state is StepState.RUNNING:
                said = f"{claim[0].message}, "  # "run QUEUED -> RUNNING, step ..."
                payload["run"] = claim[0].payload
                claim = None
            rows.append(event_row(
                kind, f"{said}step {start.step} ({start.step_type}, attempt {start.attempt}) "
                + (f"{before} -> " if before else "") + f"{start.state}"
                + (f": {reason}" if reason else ""), b.run_id, level, payload, b.actor, stamp))
        if b.run_end is not None:
            rows.extend(self._run_end_events(b, b.run_end, job_id, started, now, stamp))
        return rows

    def _run_end_events(self, b: Boundary, end: RunEnd, job_id: str,
                        started: datetime | None, now: datetime,
                        stamp: Any) -> list[dict[str, Any]]:
        reason = self._redact_text(end.reason)
        fields = end_fields(end.state, end.rows, self._redact_text(end.error),
                            end.not_before, end.attempt, self._redact_text(end.wait_reason))
        return [event_row(e.event_type, e.message, b.run_id, e.level, e.payload, b.actor,
                          stamp)
                for e in state_events(job_id, RunState.RUNNING, end.state, reason, b.epoch,
                                      fields, started, now)]


def _wait(b: Boundary, why: str, now: datetime) -> Boundary:
    """``b`` whose step start the step lease hook refused: the step is not started, the run
    goes back to QUEUED with ``why`` as its wait_reason, no attempt spent (it resumes at
    that step from its checkpoint)."""
    step = next(s.step for s in b.starts if s.state is StepState.RUNNING)
    line = LogLine(now, "WARNING", step, f"run QUEUED again: {why}")
    return replace(b, starts=[s for s in b.starts if s.state is not StepState.RUNNING],
                   run_end=RunEnd(RunState.QUEUED, b.rows, None, why, wait_reason=why),
                   logs=[*b.logs, line])


def _child(value: Any) -> bool | None:
    """A fence row's ``parent_run_id IS NOT NULL`` (0 / 1 on SQLite), or None when the
    row did not read it (a run claimed in the same transaction)."""
    return None if value is None else bool(value)


def _took(rows: int | None, seconds: float | None) -> str:
    """`` (4 rows in 0.02s)``: what a step's end event says of its work."""
    parts = ([] if rows is None else [f"{rows} rows"]) + (
        [] if seconds is None else [f"in {seconds:.2f}s"])
    return f" ({' '.join(parts)})" if parts else ""


def _step_event(state: StepState) -> tuple[EventType, Level]:
    return _STEP_EVENT.get(state, (EventType.STEP_STATE_CHANGED, Level.INFO))


def _check_targets(boundary: Boundary) -> None:
    end = boundary.step_end
    if end is not None and not is_allowed(STEP_TRANSITIONS, StepState.RUNNING, end.state):
        raise InvalidTransition("step_run", StepState.RUNNING, end.state)
    for start in boundary.starts:
        if start.resumes is not None and start.state is not StepState.RUNNING:
            raise InvalidTransition("step_run", StepState.PENDING, start.state)
        if start.state not in (StepState.RUNNING, StepState.SKIPPED):
            raise InvalidTransition("step_run", None, start.state)
    run_end = boundary.run_end
    if run_end is not None and not is_allowed(RUN_TRANSITIONS, RunState.RUNNING,
                                              run_end.state):
        raise InvalidTransition("run", RunState.RUNNING, run_end.state)

