"""A run's page read (``ChildRuns.family``, the DBAPI cursor, one snapshot on SQLite) gives
what the SQLAlchemy reads give: the run, its parent, its children, its step attempts; and a
quick read leaves its pooled connection as it found it (PostgreSQL: autocommit off again)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from cadenza.assembly import assemble
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.store import Store
from cadenza.store.boundary import Boundary, NewRun, RunEnd, StepEnd, StepStart
from cadenza.store.children import ChildRuns
from cadenza.store.tables import runs


def _running(store: Store, clock: FakeClock, job: str) -> tuple[str, int]:
    run_id = store.create_run(job, "manual")
    assert run_id
    (claimed,) = store.claim_runs("node:1", clock.now() + timedelta(minutes=5),
                                  run_ids=[run_id])
    return run_id, claimed.lease_epoch


def test_the_family_read_matches_the_orm_reads(store: Store, clock: FakeClock) -> None:
    family = ChildRuns(store)
    parent_id, epoch = _running(store, clock, "parent")
    first = store._create_step_run(parent_id, "prepare", "python")
    store._transition_step_run(first, StepState.RUNNING)
    clock.advance(2)
    store._transition_step_run(first, StepState.SUCCEEDED, fields={"rows": 7})
    store._create_step_run(parent_id, "call", "call_job")
    made = family.create(parent_id, epoch, "call", NewRun("child", "call_job:parent"))
    assert made is not None
    child = made[0]

    seen = family.family(parent_id)
    assert seen is not None
    assert seen.run == store.get_run(parent_id)
    assert seen.parent is None
    assert seen.children == family.children(parent_id)
    assert seen.steps == store.list_step_runs(parent_id)
    assert [s.step for s in seen.steps] == ["prepare", "call"]
    assert seen.steps[0].rows == 7 and seen.steps[0].finished_at is not None

    below = family.family(child.id)
    above = store.get_run(parent_id)
    assert below is not None and above is not None
    assert below.run == store.get_run(child.id)
    assert below.parent == (parent_id, "call", "parent", above.state)
    assert below.children == [] and below.steps == []

    # The parent pruned from history: the child still names it, without job or state.
    with store.write() as conn:
        conn.execute(sa.update(runs).where(runs.c.id == child.id)
                     .values(parent_run_id="01ZZZZZZZZZZZZZZZZZZZZZZZZ"))
    orphan = family.family(child.id)
    assert orphan is not None and orphan.parent == (
        "01ZZZZZZZZZZZZZZZZZZZZZZZZ", "call", None, None)
    assert family.family("01NOSUCHRUN0000000000000000") is None


def test_a_quick_read_gives_its_connection_back_transactional(store: Store) -> None:
    """After a quick read (PostgreSQL: in autocommit), a write on the same pooled
    connection still rolls back as a whole."""
    run_id = store.create_run("j", "manual")
    assert run_id
    for snapshot in (False, True):
        store.engine.dispose()  # one pooled connection: the write below gets the read's
        with store._quick_read(snapshot=snapshot) as read:
            assert read("SELECT id FROM runs WHERE id = ?", (run_id,)) == [(run_id,)]
        with pytest.raises(RuntimeError), store.write() as conn:
            conn.execute(sa.update(runs).where(runs.c.id == run_id).values(trigger="changed"))
            raise RuntimeError("undo")
        got = store.get_run(run_id)
        assert got is not None and got.trigger == "manual"


def test_a_batch_of_run_ends_asks_for_the_parents_of_its_child_runs_only(
        store: Store, clock: FakeClock) -> None:
    """The fencing read says which runs are children: the run end hook that wakes waiting
    parents reads nothing for runs that have no parent (every ordinary run end paid that
    read, a round trip per batch on PostgreSQL)."""
    assemble(store)
    family = ChildRuns(store)
    parent_id, parent_epoch = _running(store, clock, "parent")
    store._create_step_run(parent_id, "call", "call_job")
    made = family.create(parent_id, parent_epoch, "call", NewRun("child", "call_job:parent"))
    assert made is not None
    child_id = made[0].id
    (child,) = store.claim_runs("node:1", clock.now() + timedelta(minutes=5),
                                run_ids=[child_id])
    plain_id, plain_epoch = _running(store, clock, "plain")
    started = store.record_boundaries([
        Boundary(run_id, epoch, starts=[StepStart("s", "python", 1)])
        for run_id, epoch in ((child_id, child.lease_epoch), (plain_id, plain_epoch))])
    asked: list[list[str]] = []
    wake = store.children.wake_parents

    def spy(conn: sa.Connection, ended_ids: list[str], now: datetime) -> int:
        asked.append(sorted(ended_ids))
        return wake(conn, ended_ids, now)

    store.children.wake_parents = spy  # type: ignore[method-assign]
    ends = store.record_boundaries([
        Boundary(run_id, epoch,
                 step_end=StepEnd(result.step_run_ids[0], "s", "python", 1,
                                  StepState.SUCCEEDED),
                 run_end=RunEnd(RunState.SUCCEEDED))
        for (run_id, epoch), result in zip(((child_id, child.lease_epoch),
                                            (plain_id, plain_epoch)), started, strict=True)])
    assert all(end.applied for end in ends)
    assert asked == [[child_id]]
