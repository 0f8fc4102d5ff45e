"""A write transaction's audit and log rows: on PostgreSQL sent with its COMMIT, in one
round trip (cadenza.store.later); on both databases in the order they were written, and
all or nothing with the rest of the transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

import pytest
import sqlalchemy as sa
from tests.support.store_helpers import append_log

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreError
from cadenza.domain.events import EventType
from cadenza.domain.states import RunState, StepState
from cadenza.store import Store
from cadenza.store.boundary import Boundary, RunEnd, StepEnd, StepStart
from cadenza.store.hotsql import AUDIT_COLUMNS, insert_rows
from cadenza.store.tables import step_runs


def _running(store: Store, clock: FakeClock) -> tuple[str, int, int]:
    """A run claimed, its step ``s`` started: (run id, epoch, step run id)."""
    run_id = store.create_run("job", "manual")
    assert run_id
    (run,) = store.claim_runs("node", clock.now() + timedelta(minutes=5), run_ids=[run_id])
    (started,) = store.record_boundaries(
        [Boundary(run_id, run.lease_epoch, starts=[StepStart("s", "python", 1)])])
    return run_id, run.lease_epoch, started.step_run_ids[0]


def _end(run_id: str, epoch: int, step_run_id: int) -> Boundary:
    return Boundary(run_id, epoch,
                    step_end=StepEnd(step_run_id, "s", "python", 1, StepState.SUCCEEDED),
                    run_end=RunEnd(RunState.SUCCEEDED))


def test_rows_kept_for_the_commit_stay_before_a_later_event_of_the_transaction(
    store: Store, clock: FakeClock
) -> None:
    """A run end's events (kept for the COMMIT on PostgreSQL), then an event appended
    through SQLAlchemy (which returns its id: sent at once) and a log line: the log shows
    them in the order they were written."""
    run_id, epoch, step_run_id = _running(store, clock)
    with store.write() as conn:
        store.record_boundaries([_end(run_id, epoch, step_run_id)], conn=conn)
        store.append_event(EventType.RUN_STATE_CHANGED, "after the end", run_id=run_id,
                           conn=conn)
        append_log(store, run_id, "INFO", "a line after the end", conn=conn)
    kinds = [(e.event_type, e.message) for e in store.list_events(run_id=run_id, limit=50)]
    finished = next(k for k, (kind, _) in enumerate(kinds) if kind == "RUN_FINISHED")
    after = kinds.index(("RUN_STATE_CHANGED", "after the end"))
    assert finished < after, kinds
    assert store.get_run(run_id).state is RunState.SUCCEEDED


def test_a_row_that_fails_at_the_commit_rolls_the_whole_transaction_back(
    store: Store, clock: FakeClock
) -> None:
    """An event row the database refuses (event_type is NOT NULL), written after a run end
    in the same transaction: on PostgreSQL the refusal comes with the COMMIT; either way
    nothing of the transaction stays (the run is still RUNNING, no RUN_FINISHED)."""
    run_id, epoch, step_run_id = _running(store, clock)
    before = len(store.list_events(run_id=run_id, limit=100))
    with pytest.raises(Exception, match="event_type"):  # the driver's not-null error
        with store.write() as conn:
            store.record_boundaries([_end(run_id, epoch, step_run_id)], conn=conn)
            cursor = conn.connection.cursor()
            insert_rows(cursor, store._sql(), "event_log", AUDIT_COLUMNS,
                        [(run_id, None, None, "INFO", "refused", None,
                          store._sql().ts(clock.now()), "system")])
    assert store.get_run(run_id).state is RunState.RUNNING
    events = store.list_events(run_id=run_id, limit=100)
    assert len(events) == before
    assert "RUN_FINISHED" not in [e.event_type for e in events]
    # The store writes again afterwards (the connection was given back clean).
    store.record_boundaries([_end(run_id, epoch, step_run_id)])
    assert store.get_run(run_id).state is RunState.SUCCEEDED


def test_postgresql_sends_a_run_ends_events_with_its_commit(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    """libpq's trace of the run end's transaction: the INSERT into event_log and the
    COMMIT are sent before one Sync (one round trip), not each before its own."""
    if store.dialect != "postgresql":
        pytest.skip("the rows are kept for the commit on PostgreSQL only")
    run_id, epoch, step_run_id = _running(store, clock)
    trace = tmp_path / "trace.txt"
    with trace.open("w") as fh, store.write() as conn:
        raw = conn.connection.driver_connection
        raw.pgconn.trace(fh.fileno())  # on until after the commit
        store.record_boundaries([_end(run_id, epoch, step_run_id)], conn=conn)
    raw.pgconn.untrace()
    sent: list[list[str]] = [[]]
    for line in trace.read_text().splitlines():
        parts = line.split("\t", 3)
        if len(parts) < 4 or parts[1] != "F":
            continue
        if parts[3].startswith("Sync"):
            sent.append([])
        else:
            sent[-1].append(parts[3])
    together = [group for group in sent
                if any("INSERT INTO event_log" in m for m in group)]
    assert together, sent
    assert any("COMMIT" in m for m in together[-1]), together
    # The step end and the run end (a batch of run ends only) share a Sync too.
    updates = [group for group in sent if any("UPDATE step_runs" in m for m in group)]
    assert updates and any("UPDATE runs" in m for m in updates[0]), sent
    assert store.get_run(run_id).state is RunState.SUCCEEDED


def test_a_run_end_whose_step_end_is_refused_changes_nothing(
    store: Store, clock: FakeClock, force: Callable[[sa.Table, object, StrEnum], None]
) -> None:
    """A batch of run ends sends its step ends and run ends together (PostgreSQL: one
    pipeline); a step end the guard refuses (its step run ended already) still fails the
    whole boundary: StoreError, and the run stays RUNNING."""
    run_id, epoch, step_run_id = _running(store, clock)
    force(step_runs, step_run_id, StepState.SUCCEEDED)
    with pytest.raises(StoreError, match="step end change was refused"):
        store.record_boundaries([_end(run_id, epoch, step_run_id)])
    assert store.get_run(run_id).state is RunState.RUNNING
    assert "RUN_FINISHED" not in [e.event_type
                                  for e in store.list_events(run_id=run_id, limit=100)]


def test_a_block_that_ends_its_transaction_itself_keeps_or_drops_its_rows(
    store: Store, clock: FakeClock
) -> None:
    """A block that commits its transaction itself keeps the rows written before (sent
    just before its COMMIT); one that rolls back drops them with the rest."""
    run_id, epoch, step_run_id = _running(store, clock)
    with store.write() as conn:
        store.record_boundaries([_end(run_id, epoch, step_run_id)], conn=conn)
        conn.get_transaction().commit()
    assert store.get_run(run_id).state is RunState.SUCCEEDED
    assert "RUN_FINISHED" in [e.event_type
                              for e in store.list_events(run_id=run_id, limit=100)]
    other, epoch, step_run_id = _running(store, clock)
    with store.write() as conn:
        store.record_boundaries([_end(other, epoch, step_run_id)], conn=conn)
        conn.get_transaction().rollback()
    assert store.get_run(other).state is RunState.RUNNING
    assert "RUN_FINISHED" not in [e.event_type
                                  for e in store.list_events(run_id=other, limit=100)]
    # The next write on the same pool of connections keeps and sends its own rows only.
    store.record_boundaries([_end(other, epoch, step_run_id)])
    finished = [e for e in store.list_events(run_id=other, limit=100)
                if e.event_type == "RUN_FINISHED"]
    assert len(finished) == 1
