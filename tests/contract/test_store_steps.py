"""Step runs in the store: every (from, to) pair, events, attempts, fencing on the run's lease."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import pytest
import sqlalchemy as sa
from tests.support.store_helpers import end_run, start_run

from cadenza.clock import FakeClock
from cadenza.domain.errors import InvalidTransition
from cadenza.domain.events import EventType
from cadenza.domain.states import STEP_TRANSITIONS, RunState, StepState, is_allowed
from cadenza.store import StepRunRecord, Store
from cadenza.store.tables import step_runs

Force = Callable[[sa.Table, object, StrEnum], None]
S = StepState
EXPECTED_EVENT = {
    S.RUNNING: EventType.STEP_STARTED,
    S.SUCCEEDED: EventType.STEP_SUCCEEDED,
    S.FAILED: EventType.STEP_FAILED,
}
FINAL = {S.SUCCEEDED, S.FAILED, S.SKIPPED, S.CANCELED}


def _run(store: Store) -> str:
    run_id = store.create_run("steps", "manual")
    assert run_id
    return run_id


def _step(store: Store, run_id: str, step_run_id: int) -> StepRunRecord:
    (step,) = [s for s in store.list_step_runs(run_id) if s.id == step_run_id]
    return step


def test_every_step_state_pair_is_allowed_or_refused_by_the_table(
    store: Store, force: Force, clock: FakeClock
) -> None:
    run_id = _run(store)
    problems: list[str] = []
    for n, frm in enumerate(StepState):
        for to in StepState:
            sid = store._create_step_run(run_id, f"s-{n}-{to}", "python")
            force(step_runs, sid, frm)
            before = _step(store, run_id, sid)
            seen = len(store.list_events(run_id=run_id))
            clock.advance(1)
            done = store._transition_step_run(sid, to, reason="why", actor="tester")
            after = _step(store, run_id, sid)
            new_events = store.list_events(run_id=run_id)[seen:]
            assert after is not None
            if done != is_allowed(STEP_TRANSITIONS, frm, to):
                problems.append(f"{frm}->{to}: returned {done}")
            elif not done and (after != before or new_events):
                problems.append(f"{frm}->{to}: refused but the row or the log changed")
            elif done:
                kind = EXPECTED_EVENT.get(to, EventType.STEP_STATE_CHANGED)
                if [e.event_type for e in new_events] != [kind]:
                    problems.append(f"{frm}->{to}: events {[e.event_type for e in new_events]}")
                elif (new_events[0].payload["from"], new_events[0].payload["to"]) != (frm, to):
                    problems.append(f"{frm}->{to}: payload {new_events[0].payload}")
                if after.state is not to or after.updated_at != clock.now():
                    problems.append(f"{frm}->{to}: row {after.state}")
                if to in FINAL and after.finished_at != clock.now():
                    problems.append(f"{frm}->{to}: finished_at {after.finished_at}")
    assert problems == []


def test_one_row_per_attempt_with_outputs(store: Store, clock: FakeClock) -> None:
    run_id = _run(store)
    first = store._create_step_run(run_id, "load", "file_load", 1, state=S.RUNNING)
    clock.advance(5)
    assert store._transition_step_run(
        first, S.FAILED, fields={"error": "connection reset", "error_class": "retryable"}
    )
    second = store._create_step_run(run_id, "load", "file_load", 2, state=S.RUNNING)
    clock.advance(5)
    assert store._transition_step_run(
        second, S.SUCCEEDED, fields={"rows": 120, "output": {"files": ["a.csv"], "rows": 120}}
    )
    skipped = store._create_step_run(run_id, "notify", "notify", state=S.SKIPPED, reason="disabled")
    attempts = store.list_step_runs(run_id)
    assert [(s.step, s.attempt, s.state) for s in attempts] == [
        ("load", 1, S.FAILED),
        ("load", 2, S.SUCCEEDED),
        ("notify", 1, S.SKIPPED),
    ]
    failed, ok, skip = attempts
    assert (failed.error, failed.error_class) == ("connection reset", "retryable")
    assert (ok.rows, ok.output) == (120, {"files": ["a.csv"], "rows": 120})
    assert ok.finished_at is not None and ok.started_at is not None
    assert (ok.finished_at - ok.started_at).total_seconds() == 5
    assert (skip.reason, skip.finished_at, skip.id) == ("disabled", clock.now(), skipped)
    types = [e.event_type for e in store.list_events(run_id=run_id)]
    assert types.count(EventType.STEP_STARTED) == 2
    assert types.count(EventType.STEP_FAILED) == 1
    assert types.count(EventType.STEP_SUCCEEDED) == 1
    with pytest.raises(sa.exc.IntegrityError):
        store._create_step_run(run_id, "load", "file_load", 2)
    with pytest.raises(InvalidTransition):
        store._create_step_run(run_id, "x", "python", state=S.SUCCEEDED)


def test_step_writes_are_fenced_by_the_run_lease(store: Store) -> None:
    run_id = _run(store)
    start_run(store, run_id)  # epoch 1
    sid = store._create_step_run(run_id, "work", "python", state=S.RUNNING)
    assert end_run(store, run_id, RunState.QUEUED, reason="lease expired")
    start_run(store, run_id)  # epoch 2: another worker
    seen = len(store.list_events(run_id=run_id))
    assert not store._transition_step_run(sid, S.SUCCEEDED, epoch=1)
    assert _step(store, run_id, sid).state is S.RUNNING
    assert len(store.list_events(run_id=run_id)) == seen
    assert store._transition_step_run(sid, S.CANCELED, epoch=2, reason="superseded")


def test_step_errors(store: Store) -> None:
    run_id = _run(store)
    sid = store._create_step_run(run_id, "a", "python")
    assert not store._transition_step_run(sid, S.SUCCEEDED)  # PENDING -> SUCCEEDED
    assert _step(store, run_id, sid).state is S.PENDING
    assert not store._transition_step_run(10**9, S.RUNNING)  # no such step run
    with pytest.raises(ValueError, match="cannot set step run fields"):
        store._transition_step_run(sid, S.RUNNING, fields={"attempt": 7})
    with pytest.raises(sa.exc.IntegrityError):
        store._create_step_run("no-such-run", "a", "python")  # foreign key, on SQLite too
