"""A run stopped through its RunControl (SPEC §7 "Timeouts and cancel"): canceled while a
step runs or before it starts, or its lease lost; on a real home and SQLite store."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

from test_retries_executor import Bench, bench, python_job

from cadenza.domain.states import RunState, StepState
from cadenza.executor.control import RunControl, StopKind
from cadenza.executor.group_commit import DirectRecorder
from cadenza.executor.isolation import TICK
from cadenza.executor.tracking import Observer, RunOutcome, RunTracker
from cadenza.store.boundary import BoundaryResult

RETRY = "attempts = 3\nbase_seconds = 10\njitter = 0"


def tracked(b: Bench, run_id: str,
            control: RunControl) -> tuple[RunTracker, BoundaryResult]:
    """Claim ``run_id`` and record its first boundary with a tracker using ``control``."""
    run = b.store.get_run(run_id)
    assert run is not None
    tracker = RunTracker(run=run, job=b.executor.config.jobs[run.job_id], store=b.store,
                         recorder=DirectRecorder(b.store), steps=b.executor.steps,
                         zone=b.executor.zone, observer=Observer(),
                         lease=timedelta(minutes=1), control=control)
    [claimed] = b.store.claim_runs("test-owner", b.clock.now() + timedelta(minutes=1),
                                   run_ids=[run_id])
    tracker.claimed(claimed)
    first = b.store.record_boundaries([tracker.first_boundary()])[0]
    return tracker, first


def _wait_for(path: Path, seconds: float = 10) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def test_a_cancel_while_a_step_runs_cancels_the_run_naming_who(tmp_path: Path) -> None:
    flag = tmp_path / "started"
    jobs = python_job("long", [("wait", "wait_here", {"flag": flag.as_posix()}),
                               ("after", "bad_input", {})], RETRY)
    with bench(tmp_path / "home", jobs) as b:
        run_id = b.enqueue("long")
        control = RunControl(run_id)
        tracker, first = tracked(b, run_id, control)
        assert tracker.control is control
        outcome: list[RunOutcome] = []
        worker = threading.Thread(target=lambda: outcome.append(tracker.go(first)))
        started = time.monotonic()
        worker.start()
        _wait_for(flag)
        assert b.clock.wait_until_idle(1)  # the worker waits for its step's next tick
        assert control.stop(StopKind.CANCELED, by="alice")
        b.clock.advance(TICK)  # the run's clock reaches the next tick
        worker.join(10)
        assert time.monotonic() - started < 5  # stopped at the next tick, not after 10 s
        assert outcome[0].state is RunState.CANCELED
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.CANCELED
        assert run.reason == "canceled by alice" and run.lease_owner is None
        steps = b.store.list_step_runs(run_id)
        assert [(s.step, s.state, s.reason) for s in steps] == [
            ("wait", StepState.CANCELED, "canceled by alice"),
            ("after", StepState.SKIPPED, "canceled"),
        ]
        assert ("WARNING", "run CANCELED: canceled by alice") in [
            (line.level, line.message) for line in b.store.list_logs(run_id)]
        finished = [e for e in b.store.list_events(run_id=run_id)
                    if e.event_type == "RUN_FINISHED"]
        assert [e.actor for e in finished] == ["alice"]


def test_a_run_stopped_before_its_step_does_not_run_it(tmp_path: Path) -> None:
    flag = tmp_path / "started"
    jobs = python_job("long", [("wait", "wait_here", {"flag": flag.as_posix()})], RETRY)
    with bench(tmp_path / "home", jobs) as b:
        run_id = b.enqueue("long")
        control = RunControl(run_id)
        tracker, first = tracked(b, run_id, control)
        control.stop(StopKind.CANCELED, by="bob")
        assert tracker.go(first).state is RunState.CANCELED
        assert not flag.exists()
        [step] = b.store.list_step_runs(run_id)
        assert (step.state, step.reason) == (StepState.CANCELED, "canceled by bob")


def test_a_lost_lease_writes_nothing_more(tmp_path: Path) -> None:
    flag = tmp_path / "started"
    jobs = python_job("long", [("wait", "wait_here", {"flag": flag.as_posix()})], RETRY)
    with bench(tmp_path / "home", jobs) as b:
        run_id = b.enqueue("long")
        control = RunControl(run_id)
        tracker, first = tracked(b, run_id, control)
        outcome: list[RunOutcome] = []
        worker = threading.Thread(target=lambda: outcome.append(tracker.go(first)))
        worker.start()
        _wait_for(flag)
        assert b.clock.wait_until_idle(1)
        control.stop(StopKind.LEASE_LOST, reason="renewal refused")
        b.clock.advance(TICK)
        worker.join(10)
        assert outcome[0].state is None  # "lost": nothing ended
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.RUNNING  # the reaper's business
        [step] = b.store.list_step_runs(run_id)
        assert step.state is StepState.RUNNING
