"""Step runs: one row per attempt of one step, with transitions enforced in SQL (docs/store.md).

The step machine is :data:`STEP_MACHINE` over :data:`~cadenza.domain.states.STEP_TRANSITIONS`.
Transitions are the store's compare-and-swap (:mod:`cadenza.store.transition`: conditional
UPDATE, row count, event in the same transaction); an optional ``epoch`` fences them on the
parent run's lease, so a worker that lost its run cannot record a step.

The executor records step boundaries in bulk (:mod:`cadenza.store.boundaries`) with the same
events; :meth:`StepRunsRepository._transition_step_run` is the single-row path (the reaper
ends the step runs of a lost worker with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.errors import InvalidTransition, StoreError
from cadenza.domain.events import EventType, Level
from cadenza.domain.states import STEP_TRANSITIONS, StepState
from cadenza.store.codec import dumps
from cadenza.store.records import StepRunRecord
from cadenza.store.tables import runs, step_runs
from cadenza.store.transition import Machine, Transitions

STEP_FIELDS = frozenset({"rows", "output", "error", "error_class", "started_at", "finished_at"})
"""What a step transition may set through ``fields`` (``output`` is any JSON-able value)."""

STEP_MACHINE = Machine(
    name="step_run", noun="step run", states=StepState, transitions=STEP_TRANSITIONS,
    table=step_runs, key=step_runs.c.id,
    select=sa.select(step_runs.c.state, step_runs.c.run_id, step_runs.c.step,
                     step_runs.c.step_type, step_runs.c.attempt)
    .where(step_runs.c.id == sa.bindparam("p_id")).with_for_update(),
    fields=STEP_FIELDS, stale="run lease epoch {epoch} is stale",
)
"""The step run state machine of :meth:`StepRunsRepository._transition_step_run`."""

STEP_FINAL_STATES = frozenset(
    {StepState.SUCCEEDED, StepState.FAILED, StepState.SKIPPED, StepState.CANCELED}
)
_EVENT_OF = {
    StepState.RUNNING: (EventType.STEP_STARTED, Level.INFO),
    StepState.SUCCEEDED: (EventType.STEP_SUCCEEDED, Level.INFO),
    StepState.FAILED: (EventType.STEP_FAILED, Level.ERROR),
}


def _step_event(to: StepState) -> tuple[EventType, Level]:
    return _EVENT_OF.get(to, (EventType.STEP_STATE_CHANGED, Level.INFO))


class StepRunsRepository(Transitions):
    """Step runs (table ``step_runs``)."""

    def _create_step_run(
        self,
        run_id: str,
        step: str,
        step_type: str,
        attempt: int = 1,
        *,
        state: StepState = StepState.PENDING,
        reason: str | None = None,
        actor: str = "system",
        conn: sa.Connection | None = None,
    ) -> int:
        """Record one attempt of ``step``; returns the step run id.

        ``state`` is PENDING, RUNNING (sets started_at) or SKIPPED (sets finished_at; give the
        ``reason``: disabled | earlier step failed | canceled). (run_id, step, attempt) is
        unique: a duplicate raises the driver's IntegrityError. Writes STEP_STARTED for
        RUNNING, STEP_STATE_CHANGED otherwise, in the same transaction.
        """
        state = StepState(state)
        if state not in STEP_TRANSITIONS[None]:
            raise InvalidTransition("step_run", None, state)
        now = self._now()
        with self._joined(conn) as c:
            key = c.execute(
                step_runs.insert().values(
                    run_id=run_id,
                    step=step,
                    step_type=step_type,
                    attempt=attempt,
                    state=state.value,
                    reason=self._redact_text(reason),
                    created_at=now,
                    started_at=now if state is StepState.RUNNING else None,
                    finished_at=now if state in STEP_FINAL_STATES else None,
                    updated_at=now,
                )
            ).inserted_primary_key
            if key is None:
                raise StoreError("the database returned no id for a new step run")
            step_run_id = int(key[0])
            event_type, level = _step_event(state)
            self._insert_event(
                c,
                event_type,
                f"step {step} ({step_type}, attempt {attempt}) {state}"
                + (f": {reason}" if reason else ""),
                run_id=run_id,
                level=level,
                payload={
                    "step_run_id": step_run_id,
                    "step": step,
                    "step_type": step_type,
                    "attempt": attempt,
                    "from": None,
                    "to": state,
                    "reason": reason,
                },
                actor=actor,
                now=now,
            )
        return step_run_id

    def _transition_step_run(
        self,
        step_run_id: int,
        to: StepState,
        *,
        reason: str | None = None,
        fields: Mapping[str, Any] | None = None,
        actor: str = "system",
        epoch: int | None = None,
        conn: sa.Connection | None = None,
    ) -> bool:
        """Move a step run to ``to`` if its state allows it; ``True`` iff the row changed.

        Sets state, updated_at and reason (``None`` clears it); RUNNING sets started_at; final
        states (SUCCEEDED, FAILED, SKIPPED, CANCELED) set finished_at. ``fields`` sets any of
        :data:`STEP_FIELDS` (error and output redacted). With ``epoch``, the parent run's
        lease_epoch must equal it. Writes STEP_STARTED / STEP_SUCCEEDED / STEP_FAILED, or
        STEP_STATE_CHANGED for the other targets, in the same transaction.
        """
        return self._transition_step(step_run_id, to, reason, fields, actor, epoch, conn)[0]

    def _step_values(self, fields: Mapping[str, Any] | None) -> dict[str, Any]:
        given = STEP_MACHINE.settable(fields)
        values = {k: v for k, v in given.items() if k != "output"}
        if "error" in values:
            values["error"] = self._redact_text(values["error"])
        if "output" in given:
            output = given["output"]
            values["output_json"] = (
                None if output is None else dumps(self.redactor.redact_value(output))
            )
        return values

    def _transition_step(
        self,
        step_run_id: int,
        to: StepState,
        reason: str | None,
        fields: Mapping[str, Any] | None,
        actor: str,
        epoch: int | None,
        conn: sa.Connection | None,
        *,
        at: datetime | None = None,
    ) -> tuple[bool, StepState | None]:
        """:meth:`_transition_step_run`; ``at`` (default: now on the store's clock) is the
        time written (the reaper passes the time it reaps at)."""
        to = StepState(to)
        explicit = self._step_values(fields)

        def change(before: Any, now: datetime) -> tuple[sa.Executable, dict[str, Any]]:
            values: dict[str, Any] = {
                "state": to.value,
                "updated_at": now,
                "reason": self._redact_text(reason),
            }
            if to is StepState.RUNNING:
                values["started_at"] = now
            if to in STEP_FINAL_STATES:
                values["finished_at"] = now
            values.update(explicit)
            fence = [] if epoch is None else [
                sa.exists().where(runs.c.id == step_runs.c.run_id, runs.c.lease_epoch == epoch)
            ]
            return STEP_MACHINE.update(step_run_id, to, values, *fence), {}

        def record(c: sa.Connection, before: Any, frm: StepState, now: datetime) -> None:
            event_type, level = _step_event(to)
            self._insert_event(
                c,
                event_type,
                f"step {before.step} (attempt {before.attempt}) {frm} -> {to}"
                + (f": {reason}" if reason else ""),
                run_id=before.run_id,
                level=level,
                payload={
                    "step_run_id": step_run_id,
                    "step": before.step,
                    "step_type": before.step_type,
                    "attempt": before.attempt,
                    "from": frm,
                    "to": to,
                    "reason": reason,
                    "rows": explicit.get("rows"),
                    "error_class": explicit.get("error_class"),
                    "error": explicit.get("error"),
                },
                actor=actor,
                now=now,
            )

        return self._compare_and_swap(STEP_MACHINE, step_run_id, to, conn, change, record,
                                      at=at)

    def list_step_runs(self, run_id: str, *,
                       conn: sa.Connection | None = None) -> list[StepRunRecord]:
        """Every attempt of every step of ``run_id``, in creation order (in the caller's
        transaction when given)."""
        with self._reading(conn) as c:
            rows = c.execute(
                sa.select(step_runs).where(step_runs.c.run_id == run_id).order_by(step_runs.c.id)
            ).all()
        return [StepRunRecord.from_row(row) for row in rows]
