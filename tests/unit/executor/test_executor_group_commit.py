"""Group commit of step boundaries, on a real SQLite store; what it tells of a deferred run
end: ``on_end`` when it is written (a node logs "ended" then, not when the end was only
queued), a WARNING naming the run when it was refused (lease lost) and nobody listens; the
kept problems are bounded."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreError
from cadenza.domain.states import RunState, StepState
from cadenza.executor import group_commit as group_commit_module
from cadenza.executor.group_commit import DirectRecorder, Ended, GroupCommit
from cadenza.store import Store
from cadenza.store.boundary import Boundary, Checkpoint, NewRun, RunEnd, StepEnd, StepStart


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{(tmp_path / 'c.db').as_posix()}",
                        clock=FakeClock("2027-01-01T00:00:00+00:00"))
    yield opened
    opened.close()


def _claimed(store: Store, n: int) -> list[tuple[str, int]]:
    store.create_runs([NewRun("j", "manual") for _ in range(n)])
    until = store.clock.now() + timedelta(hours=1)
    return [(r.id, r.lease_epoch) for r in store.claim_runs("me", until, limit=n)]


def test_concurrent_boundaries_share_commits(store: Store) -> None:
    runs = _claimed(store, 16)
    recorder = GroupCommit(store)
    results = {}

    def worker(run_id: str, epoch: int) -> None:
        results[run_id] = recorder.record(Boundary(run_id, epoch,
                                                   starts=[StepStart("a", "python")]))

    threads = [threading.Thread(target=worker, args=run) for run in runs]
    with store.write():  # the first leader waits for this transaction; the others queue up
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(recorder._queue) < 15 and time.monotonic() < deadline:
            time.sleep(0.01)
    for thread in threads:
        thread.join()
    assert all(r.applied and len(r.step_run_ids) == 1 for r in results.values())
    assert recorder.boundaries == 16 and recorder.batches == 2
    assert all(len(store.list_step_runs(run_id)) == 1 for run_id, _ in runs)


def test_a_run_end_waits_for_the_next_write_or_a_flush(store: Store) -> None:
    (first, e1), (second, e2) = _claimed(store, 2)
    recorder = GroupCommit(store)
    assert recorder.finish(Boundary(first, e1, run_end=RunEnd(RunState.SUCCEEDED, 0))) is None
    assert store.get_run(first).state is RunState.RUNNING  # type: ignore[union-attr]
    recorder.record(Boundary(second, e2, starts=[StepStart("a", "python")]))
    assert store.get_run(first).state is RunState.SUCCEEDED  # type: ignore[union-attr]
    recorder.finish(Boundary(second, e2, run_end=RunEnd(RunState.FAILED, 0, "x")))
    recorder.flush()
    assert store.get_run(second).state is RunState.FAILED  # type: ignore[union-attr]
    recorder.flush()  # nothing queued: nothing written
    assert recorder.problems == []


def test_a_bad_boundary_fails_alone(store: Store) -> None:
    (good, e1), (bad, e2) = _claimed(store, 2)
    recorder = GroupCommit(store)
    # The run end of ``bad`` is deferred; the batch that carries it also carries ``good``.
    recorder.finish(Boundary(bad, e2, step_end=StepEnd(999_999, "x", "python", 1,
                                                       StepState.SUCCEEDED)))
    result = recorder.record(Boundary(good, e1, starts=[StepStart("a", "python")]))
    assert result.applied
    assert len(recorder.problems) == 1 and bad in recorder.problems[0]
    with pytest.raises(StoreError):
        DirectRecorder(store).record(Boundary(bad, e2, step_end=StepEnd(
            999_999, "x", "python", 1, StepState.SUCCEEDED)))


def test_a_refused_boundary_is_reported_not_raised(store: Store) -> None:
    ((run_id, epoch),) = _claimed(store, 1)
    recorder = GroupCommit(store)
    result = recorder.record(Boundary(run_id, epoch + 1, starts=[StepStart("a", "python")]))
    assert not result.applied and result.state is RunState.RUNNING
    recorder.finish(Boundary(run_id, epoch + 1, run_end=RunEnd(RunState.SUCCEEDED)))
    recorder.flush()
    assert "refused" in recorder.problems[0]


def test_on_end_is_told_when_the_end_is_written_not_when_queued(store: Store) -> None:
    (good, e1), (lost, e2) = _claimed(store, 2)
    told: list[list[tuple[str, bool, BaseException | None]]] = []
    group = GroupCommit(store, on_end=lambda ends: told.append(
        [(b.run_id, ok, err) for b, ok, err in ends]))
    assert group.finish(Boundary(good, e1, run_end=RunEnd(RunState.SUCCEEDED, 0))) is None
    assert group.finish(Boundary(lost, e2 + 1, run_end=RunEnd(RunState.SUCCEEDED, 0))) is None
    assert told == []  # only queued
    group.flush()
    # Once for the batch (a node logs a line per batch and state), each end in order.
    assert told == [[(good, True, None), (lost, False, None)]]
    assert store.get_run(good).state is RunState.SUCCEEDED  # type: ignore[union-attr]
    assert "refused" in group.problems[0] and lost in group.problems[0]


def test_a_refused_deferred_end_is_a_warning_naming_the_run(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    ((run_id, epoch),) = _claimed(store, 1)
    group = GroupCommit(store)
    caplog.set_level(logging.INFO, logger="cadenza.executor")
    group.finish(Boundary(run_id, epoch + 1, run_end=RunEnd(RunState.SUCCEEDED, 0)))
    group.flush()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and run_id in warnings[0].getMessage()
    assert "lease was lost" in warnings[0].getMessage()


def test_a_failing_hook_does_not_fail_the_batch(store: Store) -> None:
    (first, e1), (second, e2) = _claimed(store, 2)

    def broken(ends: Sequence[Ended]) -> None:
        raise RuntimeError("hook")

    group = GroupCommit(store, on_end=broken)
    group.finish(Boundary(first, e1, run_end=RunEnd(RunState.SUCCEEDED, 0)))
    group.finish(Boundary(second, e2, run_end=RunEnd(RunState.SUCCEEDED, 0)))
    group.flush()
    assert {store.get_run(r).state for r in (first, second)} == {  # type: ignore[union-attr]
        RunState.SUCCEEDED}


def test_kept_problems_are_bounded(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_commit_module, "PROBLEMS_KEPT", 2)
    runs = _claimed(store, 3)
    group = GroupCommit(store)
    for run_id, epoch in runs:
        group.finish(Boundary(run_id, epoch + 1, run_end=RunEnd(RunState.SUCCEEDED, 0)))
    group.flush()
    assert len(group.problems) == 2 and runs[-1][0] in group.problems[-1]


def test_the_ends_of_one_commit_are_told_together_before_a_waiting_writer_goes_on(
    store: Store
) -> None:
    """One commit of a waiting worker's boundary between two run ends: ``on_end`` is told
    once, with both ends (a line per state for the commit), before that worker goes on."""
    (first, e1), (middle, e2), (last, e3) = _claimed(store, 3)
    told: list[tuple[list[str], bool]] = []
    waiting = group_commit_module._Pending(
        Boundary(middle, e2, checkpoint=Checkpoint("next", {})))
    assert waiting.wake is not None
    group = GroupCommit(store, on_end=lambda ends: told.append(
        ([b.run_id for b, _, _ in ends], waiting.wake.is_set())))  # type: ignore[union-attr]
    group._write([
        group_commit_module._Pending(
            Boundary(first, e1, run_end=RunEnd(RunState.SUCCEEDED, 0)), deferred=True),
        waiting,
        group_commit_module._Pending(
            Boundary(last, e3, run_end=RunEnd(RunState.SUCCEEDED, 0)), deferred=True)])
    assert told == [([first, last], False)]
    assert waiting.done and waiting.wake.is_set() and waiting.result.applied
