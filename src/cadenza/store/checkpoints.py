"""Step-local checkpoints and operation keys (docs/exactly-once.md).

Two tables, two kinds of record:

``checkpoints.step_state_json``
    What ``ctx.checkpoint(state)`` saved for the step that is running, stored as
    ``{"step": NAME, "state": STATE}`` so that a state is only ever given back to the step
    that saved it (``ctx.last_checkpoint``). The row is the run's checkpoint: the executor
    writes ``next_step`` and ``outputs_json`` at every step boundary (and clears the step
    state there); :meth:`CheckpointsRepository.save_step_state` only upserts the step
    state, inserting the row with ``next_step`` = the running step when there is none yet.
``operation_keys``
    One row per (job, key) whose effect was applied: ``ctx.once`` and the http step's
    idempotency keys. Kept beyond retention on purpose (an effect must not be applied twice
    after its run was pruned). ``UNIQUE (job_id, key)`` decides races: the first insert
    wins, the others read the winner's result.

Fencing. Writes made for a running step carry the run's lease ``epoch``: in the same
transaction the run is read (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
already holds the write lock) and the write happens only if the run is RUNNING at that
epoch. A refused write changes nothing and returns ``False`` / raises nothing: the caller
(the step's ``ctx``) stops the step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from cadenza.domain.states import RunState
from cadenza.store.core import StoreCore
from cadenza.store.tables import checkpoints, operation_keys, runs

MAX_KEY = 512
"""Longest operation key (the column's width)."""


@dataclass(frozen=True)
class KeyRecord:
    """An operation key as recorded: the effect's result (decoded JSON), the run that
    recorded it, and whether this call inserted it (``recorded``) or found it."""

    result: Any
    run_id: str | None
    recorded: bool


class CheckpointsRepository(StoreCore):
    """Step state and operation keys (see the module docstring)."""

    def _fenced(self, conn: sa.Connection, run_id: str, epoch: int) -> bool:
        """Whether ``run_id`` is RUNNING at ``epoch`` (the row is locked on PostgreSQL)."""
        query = sa.select(runs.c.state, runs.c.lease_epoch).where(runs.c.id == run_id)
        if self.dialect == "postgresql":
            query = query.with_for_update()
        row = conn.execute(query).first()
        return row is not None and row[0] == RunState.RUNNING.value and row[1] == epoch

    def save_step_state(self, run_id: str, epoch: int, step: str, state_json: str) -> bool:
        """Upsert the step state of ``run_id`` (``state_json``: the JSON of the step's
        state, already checked by the caller) if the run is RUNNING at ``epoch``.

        Columns: step_state_json (``{"step", "state"}``) and updated_at; a missing row is
        inserted with next_step = ``step`` and outputs_json ``{}``. No event (a checkpoint
        is progress, not a state change). Returns False, changing nothing, when fenced out.
        """
        envelope = f'{{"step": {json.dumps(step)}, "state": {state_json}}}'
        with self.write() as conn:
            if not self._fenced(conn, run_id, epoch):
                return False
            now = self._now()
            changed = conn.execute(
                checkpoints.update().where(checkpoints.c.run_id == run_id).values(
                    step_state_json=envelope, updated_at=now)).rowcount
            if not changed:
                conn.execute(checkpoints.insert().values(
                    run_id=run_id, next_step=step, outputs_json="{}",
                    step_state_json=envelope, updated_at=now))
        return True

    def load_step_state(self, run_id: str, step: str) -> Any:
        """The state ``step`` of ``run_id`` saved last (decoded), or None (none saved, or
        saved by another step)."""
        with self.read() as conn:
            text = conn.execute(sa.select(checkpoints.c.step_state_json).where(
                checkpoints.c.run_id == run_id)).scalar()
        if not text:
            return None
        envelope = json.loads(text)
        if not isinstance(envelope, dict) or envelope.get("step") != step:
            return None
        return envelope.get("state")

    def find_operation_key(self, job_id: str, key: str) -> KeyRecord | None:
        """The record of ``key`` for ``job_id``, or None when the effect was not recorded."""
        with self.read() as conn:
            return self._find_key(conn, job_id, key)

    def _find_key(self, conn: sa.Connection, job_id: str, key: str) -> KeyRecord | None:
        row = conn.execute(sa.select(operation_keys.c.result_json, operation_keys.c.run_id)
                           .where(operation_keys.c.job_id == job_id,
                                  operation_keys.c.key == key)).first()
        if row is None:
            return None
        return KeyRecord(None if row[0] is None else json.loads(row[0]), row[1], False)

    def record_operation_key(self, job_id: str, key: str, result_json: str, run_id: str,
                             epoch: int | None) -> KeyRecord | None:
        """Record ``key`` for ``job_id`` with its result (``result_json``), fenced on the
        run's ``epoch`` (None: unfenced, for a key whose effect already committed elsewhere,
        e.g. the mirror of ``ctx.once(..., connection=)``).

        Inserts one operation_keys row (created_at = now); no event. Returns the record:
        ``recorded`` True when this call inserted it, else the existing one (the first
        writer wins, on both dialects: ``ON CONFLICT DO NOTHING``). Returns None, changing
        nothing, when fenced out.
        """
        if not key or len(key) > MAX_KEY:
            raise ValueError(f"an operation key has 1 to {MAX_KEY} characters")
        stmt = self._insert_ignore(operation_keys, ["job_id", "key"]).values(
            job_id=job_id, key=key, result_json=result_json, run_id=run_id,
            created_at=self._now())
        with self.write() as conn:
            if epoch is not None and not self._fenced(conn, run_id, epoch):
                return None
            if conn.execute(stmt).rowcount == 1:
                return KeyRecord(json.loads(result_json), run_id, True)
            found = self._find_key(conn, job_id, key)
        if found is None:  # cannot happen: the conflict means a row exists
            raise RuntimeError(f"operation key {key!r} conflicted but cannot be read")
        return found

    def run_is_held(self, run_id: str, epoch: int) -> bool:
        """Whether ``run_id`` is still RUNNING at ``epoch`` (a read, no lock)."""
        with self.read() as conn:
            row = conn.execute(sa.select(runs.c.state, runs.c.lease_epoch)
                               .where(runs.c.id == run_id)).first()
        return row is not None and row[0] == RunState.RUNNING.value and row[1] == epoch
