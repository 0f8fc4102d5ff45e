"""The executor's store methods on SQLite and PostgreSQL: batch creation, claims in priority
order, step boundaries fenced on the lease epoch, redaction (SPEC §7, §10, §18)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from cadenza.audit import Redactor
from cadenza.clock import FakeClock
from cadenza.domain.errors import InvalidTransition
from cadenza.domain.states import RunState, StepState
from cadenza.store import Store
from cadenza.store.boundary import (
    Boundary,
    EventSpec,
    LogLine,
    NewRun,
    RunEnd,
    StepEnd,
    StepStart,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-03-01T08:00:00+00:00")


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[Store]:
    opened = Store.open(store_url, clock=clock, redactor=Redactor(["s3cr3t-value"]))
    yield opened
    opened.close()


def _lease(clock: FakeClock) -> object:
    return clock.now() + timedelta(hours=1)


def test_create_runs_records_each_with_its_event(store: Store) -> None:
    ids = store.create_runs([NewRun("a", "manual:x", params={"p": 1}), NewRun("b", "call_job")])
    assert len(ids) == 2 and ids[0] < ids[1]
    run = store.get_run(ids[0])
    assert run is not None and run.state is RunState.QUEUED and run.params == {"p": 1}
    events = store.list_events(run_id=ids[1])
    assert [e.event_type for e in events] == ["RUN_CREATED"]


def test_claims_take_the_highest_priority_then_the_oldest(store: Store,
                                                          clock: FakeClock) -> None:
    low = store.create_runs([NewRun("j", "manual")])[0]
    clock.advance(1)
    high = store.create_runs([NewRun("j", "manual", priority=5)])[0]
    clock.advance(1)
    later = store.create_runs([NewRun("j", "manual", not_before=clock.now() + timedelta(hours=1))])
    other_job = store.create_runs([NewRun("other", "manual", priority=9)])[0]
    claimed = store.claim_runs("me", clock.now() + timedelta(hours=1), limit=5, job_ids=["j"])
    assert [r.id for r in claimed] == [high, low]  # not_before in the future: not yet
    assert all(r.state is RunState.RUNNING and r.lease_epoch == 1 for r in claimed)
    assert all(r.lease_owner == "me" and r.started_at == clock.now() for r in claimed)
    assert store.claim_runs("me", clock.now(), run_ids=[high]) == []  # already taken
    assert store.get_run(later[0]).state is RunState.QUEUED  # type: ignore[union-attr]
    assert store.get_run(other_job).state is RunState.QUEUED  # type: ignore[union-attr]
    changed = store.list_events(run_id=low, event_type="RUN_STATE_CHANGED")
    assert changed[0].payload["epoch"] == 1 and changed[0].payload["to"] == "RUNNING"


def test_concurrent_claimers_never_take_the_same_run(store: Store, clock: FakeClock) -> None:
    store.create_runs([NewRun("j", "manual") for _ in range(60)])
    taken: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def claimer() -> None:
        barrier.wait()
        while True:
            got = store.claim_runs(threading.current_thread().name, clock.now(), limit=3)
            if not got:
                return
            assert len(got) <= 3  # never more than asked for, even with SKIP LOCKED
            with lock:
                taken.extend(r.id for r in got)

    threads = [threading.Thread(target=claimer, name=f"c{k}") for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(taken) == 60 and len(set(taken)) == 60
    store.create_runs([NewRun("j", "manual")] * 3)
    sizes = [len(store.claim_runs("x", clock.now(), limit=2)) for _ in range(3)]
    assert sizes == [2, 1, 0]


def _claimed(store: Store, clock: FakeClock) -> tuple[str, int]:
    run_id = store.create_runs([NewRun("j", "manual")])[0]
    run = store.claim_runs("me", clock.now() + timedelta(hours=1), run_ids=[run_id])[0]
    return run_id, run.lease_epoch


def test_a_boundary_records_step_ends_starts_logs_events_and_the_run_end(
    store: Store, clock: FakeClock
) -> None:
    run_id, epoch = _claimed(store, clock)
    first = store.record_boundaries([Boundary(
        run_id, epoch, starts=[StepStart("a", "python"), ],
        params={"period": "2027-03"},
        logs=[LogLine(clock.now(), "INFO", None, "run started")],
    )])[0]
    assert first.applied and len(first.step_run_ids) == 1
    clock.advance(2)
    last = store.record_boundaries([Boundary(
        run_id, epoch,
        step_end=StepEnd(first.step_run_ids[0], "a", "python", 1, StepState.SUCCEEDED, 4,
                         {"token": "s3cr3t-value", "n": 4}),
        starts=[StepStart("b", "python", state=StepState.SKIPPED, reason="disabled")],
        run_end=RunEnd(RunState.SUCCEEDED, 4),
        logs=[LogLine(clock.now(), "INFO", "a", "used s3cr3t-value")],
        events=[EventSpec("HTTP_REQUEST", "GET /x", payload={"status": 200})],
    )])[0]
    assert last.applied and len(last.step_run_ids) == 1
    run = store.get_run(run_id)
    assert run is not None and run.state is RunState.SUCCEEDED and run.rows == 4
    assert run.params == {"period": "2027-03"} and run.lease_owner is None
    assert run.finished_at == clock.now()
    a, b = store.list_step_runs(run_id)
    assert (a.state, a.rows, a.started_at, a.finished_at) == (
        StepState.SUCCEEDED, 4, clock.now() - timedelta(seconds=2), clock.now())
    assert a.output == {"token": "***", "n": 4}
    assert (b.state, b.reason) == (StepState.SKIPPED, "disabled")
    assert [line.message for line in store.list_logs(run_id)] == ["run started", "used ***"]
    kinds = [e.event_type for e in store.list_events(run_id=run_id)]
    assert kinds == ["RUN_CREATED", "RUN_STATE_CHANGED", "STEP_STARTED", "HTTP_REQUEST",
                     "STEP_SUCCEEDED", "STEP_STATE_CHANGED", "RUN_FINISHED"]
    finished = store.list_events(run_id=run_id, event_type="RUN_FINISHED")[0]
    assert finished.payload["duration_s"] == 2.0


def test_a_stale_epoch_is_refused_and_changes_nothing(store: Store, clock: FakeClock) -> None:
    run_id, epoch = _claimed(store, clock)
    started = store.record_boundaries([Boundary(run_id, epoch,
                                                starts=[StepStart("a", "python")])])[0]
    other_id, other_epoch = _claimed(store, clock)
    before = len(store.list_events(run_id=run_id))
    results = store.record_boundaries([
        Boundary(run_id, epoch + 1, run_end=RunEnd(RunState.FAILED, error="x"),
                 step_end=StepEnd(started.step_run_ids[0], "a", "python", 1,
                                  StepState.FAILED, error="x"),
                 logs=[LogLine(clock.now(), "ERROR", "a", "x")]),
        Boundary(other_id, other_epoch, starts=[StepStart("a", "python")]),
        Boundary("no-such-run", 1, run_end=RunEnd(RunState.FAILED)),
    ])
    assert [r.applied for r in results] == [False, True, False]
    assert results[0].state is RunState.RUNNING and results[2].state is None
    run = store.get_run(run_id)
    assert run is not None and run.state is RunState.RUNNING
    assert store.list_step_runs(run_id)[0].state is StepState.RUNNING
    assert len(store.list_events(run_id=run_id)) == before and not store.list_logs(run_id)


def test_forbidden_targets_raise_before_writing(store: Store, clock: FakeClock) -> None:
    run_id, epoch = _claimed(store, clock)
    with pytest.raises(InvalidTransition):
        store.record_boundaries([Boundary(run_id, epoch, run_end=RunEnd(RunState.MISSED))])
    with pytest.raises(InvalidTransition):
        store.record_boundaries([Boundary(run_id, epoch,
                                          starts=[StepStart("a", "p", state=StepState.FAILED)])])
    run = store.get_run(run_id)
    assert run is not None and run.state is RunState.RUNNING


def test_many_boundaries_in_one_batch(store: Store, clock: FakeClock) -> None:
    claimed = [_claimed(store, clock) for _ in range(5)]
    starts = store.record_boundaries([
        Boundary(run_id, epoch, starts=[StepStart("a", "python"), StepStart("b", "python")],
                 params={"n": k}) for k, (run_id, epoch) in enumerate(claimed)])
    assert all(r.applied and len(r.step_run_ids) == 2 for r in starts)
    ends = store.record_boundaries([
        Boundary(run_id, epoch, step_end=StepEnd(result.step_run_ids[0], "a", "python", 1,
                                                 StepState.SUCCEEDED, k, {"k": k}),
                 run_end=RunEnd(RunState.SUCCEEDED if k % 2 else RunState.FAILED, k, "e"))
        for k, ((run_id, epoch), result) in enumerate(zip(claimed, starts, strict=True))])
    assert all(r.applied for r in ends)
    for k, (run_id, _) in enumerate(claimed):
        run = store.get_run(run_id)
        assert run is not None and run.rows == k and run.params == {"n": k}
        assert run.state is (RunState.SUCCEEDED if k % 2 else RunState.FAILED)
        a = store.list_step_runs(run_id)[0]
        assert (a.state, a.rows, a.output) == (StepState.SUCCEEDED, k, {"k": k})


def test_a_batch_whose_guard_fails_changes_nothing(store: Store, clock: FakeClock) -> None:
    (one, e1), (two, e2) = _claimed(store, clock), _claimed(store, clock)
    from cadenza.domain.errors import StoreError

    with pytest.raises(StoreError, match="refused after its run passed the fence"):
        store.record_boundaries([
            Boundary(one, e1, run_end=RunEnd(RunState.SUCCEEDED, 0),
                     step_end=StepEnd(123_456, "a", "python", 1, StepState.SUCCEEDED)),
            Boundary(two, e2, run_end=RunEnd(RunState.SUCCEEDED, 0),
                     step_end=StepEnd(123_457, "a", "python", 1, StepState.SUCCEEDED)),
        ])
    assert {store.get_run(r).state for r in (one, two)} == {RunState.RUNNING}  # type: ignore[union-attr]
