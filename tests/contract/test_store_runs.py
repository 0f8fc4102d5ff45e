"""Runs in the store: every (from, to) pair, events, timestamps, fencing, unique fires, listing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from tests.support.store_helpers import append_log, end_run, start_run

from cadenza.clock import FakeClock
from cadenza.domain.errors import InvalidTransition, StoreError
from cadenza.domain.events import EventType
from cadenza.domain.states import RUN_TRANSITIONS, TERMINAL_RUN_STATES, RunState, is_allowed
from cadenza.store import StaleEpoch, Store, run_states
from cadenza.store.run_leases import RunLease
from cadenza.store.tables import runs

Force = Callable[[sa.Table, object, StrEnum], None]
R = RunState


def test_every_transition_has_a_writer_and_transition_run_only_the_commanded() -> None:
    """Each (from, to) of the state table has a writer in run_states.py, and
    ``transition_run`` makes only the commanded ones (cancel, resume, abandon): a run starts
    through the claim and ends through its boundary or the reaper."""
    edges = {(frm, to) for frm, targets in RUN_TRANSITIONS.items() for to in targets}
    assert set(run_states.WRITERS) == edges
    for writers in run_states.WRITERS.values():
        assert all(hasattr(run_states, name) for name in writers), writers
    commanded = {(frm, to) for frm, targets in run_states.COMMANDED.items() for to in targets}
    assert commanded == {e for e, w in run_states.WRITERS.items() if "RUN_MACHINE" in w}
    assert commanded == {(R.QUEUED, R.CANCELED), (R.NEEDS_REVIEW, R.QUEUED),
                         (R.NEEDS_REVIEW, R.FAILED)}


def test_every_run_state_pair_is_allowed_or_refused_by_the_table(
    store: Store, force: Force, clock: FakeClock
) -> None:
    problems: list[str] = []
    for frm in RunState:
        for to in RunState:
            run_id = store.create_run("pairs", "manual")
            assert run_id is not None
            force(runs, run_id, frm)
            before = store.get_run(run_id)
            seen = len(store.list_events(run_id=run_id))
            clock.advance(1)
            done = store.transition_run(run_id, to, reason=f"{frm}->{to}", actor="tester")
            after = store.get_run(run_id)
            new_events = store.list_events(run_id=run_id)[seen:]
            assert after is not None
            if done != is_allowed(run_states.COMMANDED, frm, to):
                problems.append(f"{frm}->{to}: returned {done}")
                continue
            if not done:
                if after != before or new_events:
                    problems.append(f"{frm}->{to}: refused but the row or the log changed")
                continue
            # One event per change: RUN_FINISHED says a change into a final state.
            final = to in TERMINAL_RUN_STATES
            expected = [EventType.RUN_FINISHED if final else EventType.RUN_STATE_CHANGED]
            if [e.event_type for e in new_events] != expected:
                problems.append(f"{frm}->{to}: events {[e.event_type for e in new_events]}")
                continue
            change = new_events[0]
            said = change.payload["state" if final else "to"]
            if (change.payload["from"], said, change.actor) != (frm, to, "tester"):
                problems.append(f"{frm}->{to}: event payload {change.payload}")
            if after.state is not to or after.updated_at != clock.now():
                problems.append(f"{frm}->{to}: row {after.state} {after.updated_at}")
            if after.reason != f"{frm}->{to}":
                problems.append(f"{frm}->{to}: reason {after.reason!r}")
    assert problems == []


def test_creation_states_and_events(store: Store, clock: FakeClock) -> None:
    queued = store.create_run("j", "manual", params={"period": "2027-02"}, priority=5)
    missed = store.create_run(
        "j",
        "scheduled",
        state=R.MISSED,
        schedule="main",
        scheduled_for=clock.now(),
        reason="server down",
    )
    assert queued and missed
    q, m = store.get_run(queued), store.get_run(missed)
    assert q is not None and m is not None
    assert (q.state, q.params, q.priority) == (R.QUEUED, {"period": "2027-02"}, 5)
    assert q.finished_at is None
    assert (m.state, m.finished_at, m.reason) == (R.MISSED, clock.now(), "server down")
    assert [e.event_type for e in store.list_events(run_id=queued)] == [EventType.RUN_CREATED]
    [event] = store.list_events(run_id=missed)
    assert (event.event_type, event.level) == (EventType.RUN_MISSED, "WARNING")
    for state in (R.RUNNING, R.SUCCEEDED, R.NEEDS_REVIEW):
        with pytest.raises(InvalidTransition):
            store.create_run("j", "manual", state=state)
    with pytest.raises(ValueError):
        store.create_run("j", "scheduled")  # a scheduled run names its schedule
    with pytest.raises(ValueError):
        store.create_run("j", "scheduled", schedule="main")  # ... and its time


def test_a_fire_is_recorded_once(store: Store, clock: FakeClock) -> None:
    at = clock.now()
    first = store.create_run("nightly", "scheduled", schedule="main", scheduled_for=at)
    # The same instant written in another zone is the same fire.
    paris = at.astimezone(ZoneInfo("Europe/Paris"))
    again = store.create_run("nightly", "scheduled", schedule="main", scheduled_for=paris)
    missed = store.create_run(
        "nightly", "scheduled", state=R.MISSED, schedule="main", scheduled_for=at
    )
    assert first is not None and again is None and missed is None
    other_schedule = store.create_run(
        "nightly", "scheduled", schedule="preset:month-end", scheduled_for=at
    )
    other_time = store.create_run(
        "nightly", "scheduled", schedule="main", scheduled_for=at + timedelta(days=1)
    )
    manual = [store.create_run("nightly", "manual", scheduled_for=at) for _ in range(3)]
    assert other_schedule and other_time and all(manual)
    assert len(store.list_runs(job="nightly")) == 6
    assert len(store.list_events(event_type=EventType.RUN_CREATED)) == 6
    assert store.list_events(event_type=EventType.RUN_MISSED) == []


def test_the_database_itself_holds_fire_uniqueness(store: Store, clock: FakeClock) -> None:
    row = {
        "job_id": "raw",
        "state": "QUEUED",
        "trigger": "scheduled",
        "schedule": "main",
        "scheduled_for": clock.now(),
        "created_at": clock.now(),
        "updated_at": clock.now(),
    }
    with store.write() as conn:
        conn.execute(runs.insert().values(id="A" * 26, **row))
    with pytest.raises(sa.exc.IntegrityError), store.write() as conn:
        conn.execute(runs.insert().values(id="B" * 26, **row))
    # A scheduled fire without its time could slip past UNIQUE (NULLs are distinct): refused.
    with pytest.raises(sa.exc.IntegrityError), store.write() as conn:
        conn.execute(runs.insert().values(id="C" * 26, **{**row, "scheduled_for": None}))


def test_running_fences_with_an_epoch_and_sets_times(store: Store, clock: FakeClock) -> None:
    run_id = store.create_run("j", "manual")
    assert run_id
    lease_until = clock.now() + timedelta(minutes=5)
    start_run(store, run_id, owner="node-a", lease_until=lease_until)
    first = store.get_run(run_id)
    assert first is not None
    assert (first.lease_epoch, first.lease_owner, first.lease_until) == (1, "node-a", lease_until)
    assert first.started_at == clock.now()
    # The lease expired; the reaper re-queued it (epoch 2) and another node claimed it
    # (epoch 3).
    clock.advance(600)
    assert [r.state for r in store.reap_expired_run_leases()] == [R.QUEUED]
    queued = store.get_run(run_id)
    assert queued is not None and queued.lease_owner is None and queued.lease_until is None
    assert start_run(store, run_id, owner="node-b").lease_epoch == 3
    # The first holder wakes up (RELIABILITY #40): its stale epoch is refused.
    seen = len(store.list_events(run_id=run_id))
    assert not end_run(store, run_id, R.SUCCEEDED, epoch=1)
    assert len(store.list_events(run_id=run_id)) == seen
    clock.advance(30)
    assert end_run(store, run_id, R.SUCCEEDED, epoch=3, rows=42)
    done = store.get_run(run_id)
    assert done is not None
    assert (done.state, done.rows, done.lease_owner, done.lease_epoch) == (R.SUCCEEDED, 42, None, 3)
    assert done.started_at == first.started_at  # the first start is kept
    assert done.finished_at == clock.now()
    finished = store.list_events(run_id=run_id, event_type=EventType.RUN_FINISHED)
    assert [e.payload["duration_s"] for e in finished] == [630.0]


@pytest.mark.reliability_case(40)
def test_a_command_with_a_stale_epoch_is_refused(store: Store) -> None:
    run_id = store.create_run("j", "manual")
    assert run_id
    start_run(store, run_id)
    assert end_run(store, run_id, R.NEEDS_REVIEW, reason="attempts spent")
    seen = len(store.list_events(run_id=run_id))
    assert not store.transition_run(run_id, R.QUEUED, epoch=0)
    with pytest.raises(StaleEpoch):
        store._transition_run_or_raise(run_id, R.FAILED, epoch=0)
    assert len(store.list_events(run_id=run_id)) == seen
    assert store.transition_run(run_id, R.FAILED, epoch=1, reason="abandoned")


def test_resume_gives_fresh_attempts(store: Store) -> None:
    run_id = store.create_run("j", "manual")
    assert run_id
    start_run(store, run_id)
    assert end_run(store, run_id, R.QUEUED, attempt=2, wait_reason="retry")
    start_run(store, run_id)
    retried = store.get_run(run_id)
    assert retried is not None and (retried.attempt, retried.wait_reason) == (2, None)
    assert end_run(store, run_id, R.NEEDS_REVIEW, attempt=3)
    store._transition_run_or_raise(run_id, R.QUEUED, actor="alice", reason="resumed")
    resumed = store.get_run(run_id)
    assert resumed is not None and (resumed.attempt, resumed.resumes) == (0, 1)


def test_or_raise_names_the_state_that_blocked_it(store: Store) -> None:
    run_id = store.create_run("j", "manual")
    assert run_id
    with pytest.raises(InvalidTransition) as info:
        store._transition_run_or_raise(run_id, R.SUCCEEDED)
    assert (info.value.frm, info.value.to) == (R.QUEUED, R.SUCCEEDED)
    # A start is the claim's, not a command.
    with pytest.raises(InvalidTransition):
        store._transition_run_or_raise(run_id, R.RUNNING)
    with pytest.raises(StoreError, match="does not exist"):
        store._transition_run_or_raise("0" * 26, R.CANCELED)
    assert not store.transition_run("0" * 26, R.CANCELED)


def test_bad_fields_are_refused_before_anything_is_written(store: Store) -> None:
    run_id = store.create_run("j", "manual")
    assert run_id
    with pytest.raises(ValueError, match="cannot set run fields"):
        store.transition_run(run_id, R.CANCELED, fields={"state": "SUCCEEDED"})
    with pytest.raises(ValueError, match="timezone-aware"):
        store.transition_run(run_id, R.CANCELED, fields={"not_before": _naive()})
    run = store.get_run(run_id)
    assert run is not None and run.state is R.QUEUED
    assert len(store.list_events(run_id=run_id)) == 1


def _naive() -> datetime:
    return datetime(2027, 1, 1, 12, 0)


def test_a_transition_is_one_commit_and_joins_a_caller_transaction(store: Store) -> None:
    run_id, other = store.create_run("j", "manual"), store.create_run("j", "manual")
    assert run_id and other
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    sa.event.listen(store.engine, "commit", count)
    try:
        assert store.transition_run(other, R.CANCELED)
        assert len(commits) == 1
        with pytest.raises(RuntimeError), store.write() as conn:
            assert store.transition_run(run_id, R.CANCELED, conn=conn)
            append_log(store, run_id, "INFO", "done", conn=conn)
            raise RuntimeError("the caller failed after the transition")
    finally:
        sa.event.remove(store.engine, "commit", count)
    run = store.get_run(run_id)
    assert run is not None and run.state is R.QUEUED
    assert store.list_logs(run_id) == []
    assert EventType.RUN_FINISHED not in {e.event_type for e in store.list_events(run_id=run_id)}


def test_list_runs_filters_and_pages_newest_first(store: Store, clock: FakeClock) -> None:
    ids = []
    for i in range(7):
        run_id = store.create_run("a" if i % 2 == 0 else "b", "manual")
        assert run_id
        ids.append(run_id)
        if i % 3 == 0:
            clock.advance(1)  # some runs share a created_at: the id breaks the tie
    assert [r.id for r in store.list_runs()] == ids[::-1]
    assert [r.id for r in store.list_runs(job="a")] == ids[::-2]
    page1 = store.list_runs(limit=3)
    page2 = store.list_runs(limit=3, before=page1[-1].id)
    page3 = store.list_runs(limit=3, before=page2[-1].id)
    assert [r.id for r in page1 + page2 + page3] == ids[::-1]
    start_run(store, ids[0])
    assert [r.id for r in store.list_runs(state=R.RUNNING)] == [ids[0]]
    assert len(store.list_runs(state=[R.RUNNING, "QUEUED"])) == 7
    newest = store.get_run(ids[-1])
    assert newest is not None
    assert ids[-1] not in {r.id for r in store.list_runs(before=newest.created_at)}


def test_history_pages_by_states_and_after_a_pruned_cursor(store: Store,
                                                          clock: FakeClock) -> None:
    """Several states are merged newest first (one ordered range each); pages by state
    follow the keyset across runs sharing a created_at; a cursor whose run is gone still
    pages by the time in its id (W6, migration 0012)."""
    ids = []
    for i in range(12):
        run_id = store.create_run(f"j{i % 3}", "manual")
        assert run_id
        ids.append(run_id)
        if i % 4 == 3:
            clock.advance(1)  # four runs per created_at: the id breaks the ties
    for k in (1, 4, 7, 10):
        start_run(store, ids[k])
    running = [ids[k] for k in (10, 7, 4, 1)]
    queued = [i for i in ids[::-1] if i not in running]
    assert [r.id for r in store.list_runs(state=[R.RUNNING, R.QUEUED])] == ids[::-1]
    assert [r.id for r in store.list_runs(state=["RUNNING", "QUEUED"], limit=5)] == \
        ids[::-1][:5]
    pages: list[str] = []
    before: str | None = None
    while True:
        page = store.list_runs(state=R.QUEUED, limit=3, before=before)
        if not page:
            break
        pages.extend(r.id for r in page)
        before = page[-1].id
    assert pages == queued
    merged = store.list_runs(state=[R.QUEUED, R.RUNNING], limit=4, before=ids[6])
    assert [r.id for r in merged] == ids[5::-1][:4]
    assert [r.id for r in store.list_runs(job="j1", state=[R.RUNNING, R.QUEUED])] == \
        ids[::-1][1::3]
    # A cursor whose run was pruned: the runs before it by id, from an index range.
    with store.write() as c:
        c.execute(sa.delete(runs).where(runs.c.id == ids[6]))
    assert [r.id for r in store.list_runs(before=ids[6])] == ids[5::-1]
    assert [r.id for r in store.list_runs(before="not-a-run-id")] == \
        [i for i in ids[::-1] if i != ids[6]]  # every id sorts below it


def test_a_heartbeat_renews_only_the_current_lease(store: Store, clock: FakeClock) -> None:
    run_id = store.create_run("j", "manual")
    assert run_id
    queued = store.renew_run_leases([RunLease(run_id, 0, "node-a")], clock.now())
    assert not queued.renewed and "QUEUED" in queued.lost[run_id]  # nothing to renew
    start_run(store, run_id, owner="node-a")
    seen = len(store.list_events(run_id=run_id))
    later = clock.now() + timedelta(minutes=3)
    assert store.renew_run_leases([RunLease(run_id, 1, "node-a")], later).renewed == {run_id}
    stale = store.renew_run_leases([RunLease(run_id, 0, "node-a")], later + timedelta(minutes=3))
    assert not stale.renewed and run_id in stale.lost  # stale epoch
    run = store.get_run(run_id)
    assert run is not None and run.lease_until == later
    assert len(store.list_events(run_id=run_id)) == seen
