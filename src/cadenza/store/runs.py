"""Runs: creation (one row per fire), a single run's transition, resume and abandon, and
the queries of runs (docs/store.md).

A transition is the store's compare-and-swap (:mod:`cadenza.store.transition`) on
:data:`~cadenza.store.run_states.RUN_MACHINE`, with the statement and the events of
:mod:`cadenza.store.run_states`; it happened iff exactly one row changed, and its events are
inserted in the same transaction. A lost race and a forbidden transition look the same to
SQL: both return ``False`` and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from cadenza.domain.errors import InvalidTransition, StoreError
from cadenza.domain.states import (
    RUN_TRANSITIONS,
    TERMINAL_RUN_STATES,
    RunState,
    StepState,
)
from cadenza.store.boundary import EndedRun
from cadenza.store.codec import dumps, new_run_id, require_aware, run_id_time
from cadenza.store.records import RUN_COLUMNS_SQL, CheckpointRecord, RunRecord
from cadenza.store.run_states import (
    RUN_MACHINE,
    creation_event,
    state_events,
    transition_statement,
)
from cadenza.store.steps import StepRunsRepository
from cadenza.store.tables import checkpoints, runs, step_runs

_REDACTED_TEXT = frozenset({"error", "wait_reason"})

EARLIER_STEP_FAILED = "earlier step failed"
"""The reason of a step recorded SKIPPED after a failed one (docs/retries.md)."""


_RUN_CREATED_AT = list(runs.c.keys()).index("created_at")
_RUN_ID = list(runs.c.keys()).index("id")


class RunsRepository(StepRunsRepository):
    """Runs (table ``runs``)."""

    def create_run(
        self,
        job_id: str,
        trigger: str,
        *,
        state: RunState = RunState.QUEUED,
        schedule: str | None = None,
        scheduled_for: datetime | None = None,
        params: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        reason: str | None = None,
        priority: int = 0,
        not_before: datetime | None = None,
        actor: str = "system",
        conn: sa.Connection | None = None,
    ) -> str | None:
        """Record a new run; returns its id, or ``None`` when this fire is already recorded.

        ``state`` is QUEUED or MISSED (:class:`InvalidTransition` otherwise). A scheduled fire
        (``schedule`` given: the name of the job's or a preset's schedule) needs
        ``scheduled_for`` and is unique on (job_id, schedule, scheduled_for) on both dialects;
        manual and call_job runs have ``schedule=None`` and never collide.

        Sets every column (created_at = updated_at = now; finished_at = now for MISSED).
        Writes RUN_CREATED (QUEUED) or RUN_MISSED (MISSED) in the same transaction; nothing
        when the fire already existed.
        """
        state = RunState(state)
        if state not in RUN_TRANSITIONS[None]:
            raise InvalidTransition("run", None, state)
        if schedule is not None and scheduled_for is None:
            raise ValueError("a scheduled fire needs scheduled_for")
        if trigger == "scheduled" and schedule is None:
            raise ValueError("a scheduled run needs the name of its schedule")
        if scheduled_for is not None:
            scheduled_for = require_aware(scheduled_for, "scheduled_for")
        if not_before is not None:
            not_before = require_aware(not_before, "not_before")
        now = self._creation_now()
        run_id = new_run_id(now)
        values = {
            "id": run_id,
            "job_id": job_id,
            "state": state.value,
            "trigger": trigger,
            "schedule": schedule,
            "scheduled_for": scheduled_for,
            "created_at": now,
            "finished_at": now if state in TERMINAL_RUN_STATES else None,
            "not_before": not_before,
            "priority": priority,
            "params_json": dumps(dict(params or {})),
            "overrides_json": dumps(dict(overrides or {})),
            "reason": self._redact_text(reason),
            "updated_at": now,
        }
        stmt = self._insert_ignore(runs, ["job_id", "schedule", "scheduled_for"]).values(values)
        with self._joined(conn) as c:
            if c.execute(stmt).rowcount != 1:
                return None
            event_type, message, level, payload = creation_event(
                job_id, state, trigger, schedule, scheduled_for, dict(params or {}),
                dict(overrides or {}), priority, not_before, reason,
            )
            self._insert_event(
                c, event_type, message, run_id=run_id, level=level, payload=payload,
                actor=actor, now=now,
            )
        return run_id

    def transition_run(
        self,
        run_id: str,
        to: RunState,
        *,
        actor: str = "system",
        reason: str | None = None,
        epoch: int | None = None,
        fields: Mapping[str, Any] | None = None,
        conn: sa.Connection | None = None,
    ) -> bool:
        """Move a run to ``to`` if its current state allows it (and ``epoch`` still matches):
        only the commanded transitions (:data:`~cadenza.store.run_states.COMMANDED`: cancel
        a QUEUED run, resume or abandon a NEEDS_REVIEW one). A run starts through
        :meth:`claim_runs` and a RUNNING run ends through :meth:`record_boundaries` or the
        reaper.

        Returns ``True`` iff the row changed. Always sets state, updated_at and reason (``None``
        clears it), and clears lease_owner and lease_until. Terminal states set finished_at.
        NEEDS_REVIEW -> QUEUED (a resume) increments resumes and resets attempt to 0.
        ``fields`` then sets any of :data:`RUN_FIELDS` explicitly (error and wait_reason
        redacted).

        Writes RUN_STATE_CHANGED, plus RUN_FINISHED for SUCCEEDED, FAILED and CANCELED, in the
        same transaction; nothing when refused.
        """
        return self._transition_run(run_id, to, actor, reason, epoch, fields, conn)[0]

    def _transition_run_or_raise(
        self,
        run_id: str,
        to: RunState,
        *,
        actor: str = "system",
        reason: str | None = None,
        epoch: int | None = None,
        fields: Mapping[str, Any] | None = None,
        conn: sa.Connection | None = None,
    ) -> None:
        """:meth:`transition_run`, raising when nothing changed.

        :class:`InvalidTransition` (with the state the run was in) when the tables forbid it,
        :class:`StaleEpoch` when only the epoch did not match, :class:`StoreError` when there
        is no such run.
        """
        done, frm = self._transition_run(run_id, to, actor, reason, epoch, fields, conn)
        if not done:
            RUN_MACHINE.refuse(run_id, RunState(to), epoch, frm)

    def _run_values(self, fields: Mapping[str, Any] | None) -> dict[str, Any]:
        values = RUN_MACHINE.settable(fields)
        for key in _REDACTED_TEXT & values.keys():
            values[key] = self._redact_text(values[key])
        return values

    def _transition_run(
        self,
        run_id: str,
        to: RunState,
        actor: str,
        reason: str | None,
        epoch: int | None,
        fields: Mapping[str, Any] | None,
        conn: sa.Connection | None,
    ) -> tuple[bool, RunState | None]:
        to = RunState(to)
        explicit = self._run_values(fields)
        statement = transition_statement(to, epoch is not None, frozenset(explicit))

        def change(before: Any, now: datetime) -> tuple[sa.Executable, dict[str, Any]]:
            params = {f"f_{name}": value for name, value in explicit.items()}
            params.update(p_id=run_id, p_now=now, p_reason=self._redact_text(reason),
                          p_epoch=epoch)
            return statement, params

        def record(c: sa.Connection, before: Any, frm: RunState, now: datetime) -> None:
            new_epoch = explicit.get("lease_epoch", before.lease_epoch)
            self._run_events(c, run_id, before.job_id, before.started_at, frm, to, reason,
                             new_epoch, explicit, actor, now)
            if to in TERMINAL_RUN_STATES:
                # A run that ends here is a run end like a boundary's: its resources are
                # released, its notification written (the run end hooks).
                self._run_ended(c, [EndedRun(run_id, before.job_id, to, before.lease_epoch)],
                                now)

        return self._compare_and_swap(RUN_MACHINE, run_id, to, conn, change, record)

    def _run_events(
        self,
        c: sa.Connection,
        run_id: str,
        job_id: str,
        started: datetime | None,
        frm: RunState,
        to: RunState,
        reason: str | None,
        epoch: int,
        explicit: Mapping[str, Any],
        actor: str,
        now: datetime,
    ) -> None:
        for event in state_events(job_id, frm, to, reason, epoch, explicit, started, now):
            self._insert_event(c, event.event_type, event.message, run_id=run_id,
                               level=event.level, payload=event.payload, actor=actor, now=now)

    def resume_run(self, run_id: str, *, actor: str) -> RunRecord:
        """An operator resumes a NEEDS_REVIEW run: QUEUED again, with fresh attempts
        (attempt = 0, resumes + 1), no ``not_before``, and a fresh run timeout (started_at =
        now; the first start stays in the events). Its next claim continues from its
        checkpoint. The event names ``actor``.

        Raises :class:`InvalidTransition` (``frm``: the run's state) for a run in another
        state, :class:`StoreError` for an unknown run."""
        return self._review_decision(run_id, RunState.QUEUED, actor, f"resumed by {actor}")

    def abandon_run(self, run_id: str, *, actor: str,
                    skip: Sequence[tuple[str, str]] = ()) -> RunRecord:
        """An operator abandons a NEEDS_REVIEW run: FAILED (its error stays). ``skip``: the
        (name, type) of the job's steps after the one that failed, each recorded SKIPPED
        "earlier step failed" (a failed step stops the job, the steps after it are
        recorded SKIPPED) unless it has a step run already. The events (STEP_STATE_CHANGED
        of those, then RUN_STATE_CHANGED, RUN_FINISHED) name ``actor``; all in one
        transaction. Raises like :meth:`resume_run`."""
        return self._review_decision(run_id, RunState.FAILED, actor, f"abandoned by {actor}",
                                     skip=skip)

    def _review_decision(self, run_id: str, to: RunState, actor: str, reason: str,
                         skip: Sequence[tuple[str, str]] = ()) -> RunRecord:
        with self.write() as c:
            run = self.get_run(run_id, conn=c)
            if run is None:
                raise StoreError(f"no run {run_id!r}")
            if run.state is not RunState.NEEDS_REVIEW:
                raise InvalidTransition("run", run.state, to)
            recorded = set(c.execute(sa.select(step_runs.c.step).where(
                step_runs.c.run_id == run_id)).scalars()) if skip else set()
            for step, step_type in skip:
                if step not in recorded:
                    self._create_step_run(run_id, step, step_type, 1, state=StepState.SKIPPED,
                                         reason=EARLIER_STEP_FAILED, actor=actor, conn=c)
            fields: dict[str, Any] = {}
            if to is RunState.QUEUED:
                fields = {"not_before": None, "wait_reason": None, "started_at": self._now()}
            # Fenced on the epoch read here: a run resumed and claimed meanwhile is not hit.
            self._transition_run_or_raise(run_id, to, actor=actor, reason=reason,
                                         epoch=run.lease_epoch, fields=fields, conn=c)
            after = self.get_run(run_id, conn=c)
        assert after is not None
        return after

    def get_run_checkpoint(self, run_id: str, *,
                           conn: sa.Connection | None = None) -> CheckpointRecord | None:
        """The step-level checkpoint of ``run_id`` (written with its step boundaries)."""
        with self._reading(conn) as c:
            row = c.execute(sa.select(checkpoints).where(checkpoints.c.run_id == run_id)).first()
        return None if row is None else CheckpointRecord.from_row(row)

    def get_run(self, run_id: str, *, conn: sa.Connection | None = None) -> RunRecord | None:
        """The run ``run_id``, or ``None``."""
        with self._reading(conn) as c:
            row = c.execute(sa.select(runs).where(runs.c.id == run_id)).first()
        return None if row is None else RunRecord.from_row(row)

    def list_runs(
        self,
        *,
        job: str | None = None,
        state: RunState | str | Iterable[RunState | str] | None = None,
        limit: int = 50,
        before: str | datetime | None = None,
        trigger: str | None = None,
        after: str | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first (created_at, then id), at most ``limit``.

        ``before`` is a keyset cursor: a run id (runs created before that run) or a time.
        ``after`` is the other way: a run id; the ``limit`` runs created just after that
        run (the next newer page), still returned newest first. Several states are one
        query each (an ordered range of ``ix_runs_state_created``), merged.
        """
        # Hand-written SQL on the DBAPI cursor (StoreCore._quick_read): this is the read of
        # every history page (API and web), and SQLAlchemy's layers cost more than it.
        where: list[str] = []
        params: list[Any] = []
        if job is not None:
            where.append('"job_id" = ?')
            params.append(job)
        wanted: list[str | None] = [None]
        if state is not None:
            states = [state] if isinstance(state, str) else list(state)
            wanted = [*sorted({RunState(s).value for s in states})]
            if not wanted:
                return []
        if trigger is not None:
            where.append('"trigger" = ?')
            params.append(trigger)
        with self._quick_read() as read:
            if isinstance(before, datetime):
                where.append('"created_at" < ?')
                params.append(self._raw_time(before))
            elif before is not None:
                found = read('SELECT "created_at" FROM runs WHERE "id" = ?', (before,))
                if not found:
                    # A run pruned meanwhile: its id still says when it was made, which
                    # bounds created_at (an index range, not a sort of the whole history).
                    made = run_id_time(before)
                    where.append('"id" < ?')
                    params.append(before)
                    if made is not None:
                        where.append('"created_at" < ?')
                        params.append(self._raw_time(made + timedelta(milliseconds=1)))
                else:
                    # "<= t AND (< t OR id <)": one index range on created_at (the
                    # equivalent "< t OR (= t AND id <)" makes SQLite sort every older run)
                    at = found[0][0]
                    where.append('"created_at" <= ? AND ("created_at" < ? OR "id" < ?)')
                    params.extend((at, at, before))
            if after is not None:
                found = read('SELECT "created_at" FROM runs WHERE "id" = ?', (after,))
                if not found:
                    where.append('"id" > ?')
                    params.append(after)
                else:
                    at = found[0][0]
                    where.append('"created_at" >= ? AND ("created_at" > ? OR "id" > ?)')
                    params.extend((at, at, after))
                order = '"created_at" ASC, "id" ASC'
            else:
                order = '"created_at" DESC, "id" DESC'
            # One query per state, each an ordered range of the (state, created_at, id)
            # index, merged here: "state IN (...)" would sort every run of those states.
            rows = []
            for one in wanted:
                clauses = where if one is None else ['"state" = ?', *where]
                values = params if one is None else [one, *params]
                sql = (f"SELECT {RUN_COLUMNS_SQL} FROM runs"
                       + (" WHERE " + " AND ".join(clauses) if clauses else "")
                       + f" ORDER BY {order} LIMIT ?")
                rows.extend(read(sql, (*values, limit)))
        created, ident = _RUN_CREATED_AT, _RUN_ID
        rows.sort(key=lambda row: (row[created], row[ident]), reverse=after is None)
        rows = rows[:limit]
        if after is not None:
            rows = rows[::-1]
        return [RunRecord.from_raw(row) for row in rows]
