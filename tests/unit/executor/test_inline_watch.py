"""A thread step run by its worker itself (``ThreadStep.run_here``) and the watch that has
its run taken over when it runs long: a step that returns in time is never taken over; one
still running at its time is, exactly once, and its worker gets ``TakenOver`` when it
returns; when no thread can take it over, the worker keeps its run and the watch tries again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cadenza.clock import SystemClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.params import Scope
from cadenza.executor import isolation
from cadenza.executor.connections import Connections
from cadenza.executor.context import ExecutionContext
from cadenza.executor.isolation import InlineWatch, TakenOver, ThreadStep
from cadenza.executor.runlog import RunLog
from cadenza.steps.runtime import RunInfo, StepInfo, StepResult

REAL_WAIT = 10.0


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ExecutionContext]:
    settings = Settings.model_validate({})
    connections = Connections(tmp_path, settings)
    clock = SystemClock()
    log = RunLog("INFO", clock.now)
    yield ExecutionContext(
        params={}, run=RunInfo("run-1", "job", "manual", None, "INFO"),
        step=StepInfo("s", "python", 1, 60), log=log.logger("s"), home=tmp_path,
        settings=settings, scope=Scope(run_id="run-1", job_id="job"),
        connections=connections, events=lambda event: None, timeout_seconds=60, clock=clock)
    connections.close()


def _log() -> RunLog:
    return RunLog("INFO", SystemClock().now)


def test_a_step_that_returns_in_time_stays_with_its_worker(ctx: ExecutionContext) -> None:
    watch = InlineWatch()
    promoted: list[str] = []
    step = ThreadStep(lambda: StepResult(rows=3), ctx, _log(), 60)
    step.run_here(watch, lambda: promoted.append("taken"))
    assert watch.watched == 0  # nothing left to watch once it returned
    assert step.finished and step.state == "done"
    assert step.wait(lambda: None).rows == 3
    time.sleep(isolation.PROMOTE_AFTER + 0.3)  # past its time: never taken over
    assert promoted == []


def test_a_step_still_running_at_its_time_is_taken_over_once(
        ctx: ExecutionContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "PROMOTE_AFTER", 0.05)
    watch = InlineWatch()
    release = threading.Event()
    taken: list[float] = []
    began = time.monotonic()

    def body() -> StepResult:
        release.wait(REAL_WAIT)
        return StepResult(rows=1)

    def take() -> None:
        taken.append(time.monotonic() - began)
        release.set()  # the step returns once it was taken over

    step = ThreadStep(body, ctx, _log(), 60)
    with pytest.raises(TakenOver):
        step.run_here(watch, take)
    assert len(taken) == 1 and taken[0] < 2
    assert step.promoted and step.state == "done"
    # The thread that took the run over gets the step's outcome as a worker always did.
    assert step.wait(lambda: None).rows == 1


def test_a_short_timeout_is_the_time_of_the_take_over(ctx: ExecutionContext) -> None:
    watch = InlineWatch()
    release = threading.Event()
    taken: list[float] = []
    began = time.monotonic()

    def take() -> None:
        taken.append(time.monotonic() - began)
        release.set()

    step = ThreadStep(lambda: release.wait(REAL_WAIT) and StepResult(), ctx, _log(), 0.1)
    with pytest.raises(TakenOver):
        step.run_here(watch, take)
    assert taken and taken[0] < isolation.PROMOTE_AFTER


def test_without_a_thread_to_take_over_the_worker_keeps_its_run(
        ctx: ExecutionContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "PROMOTE_AFTER", 0.05)
    watch = InlineWatch()
    release = threading.Event()
    tries: list[int] = []

    def take() -> None:
        tries.append(1)
        if len(tries) == 2:  # after the second try, the step returns before anything took it
            threading.Timer(0.2, release.set).start()
        raise RuntimeError("can't start new thread")

    step = ThreadStep(lambda: release.wait(REAL_WAIT) and StepResult(rows=2), ctx, _log(), 60)
    step.run_here(watch, take)  # no TakenOver: the worker goes on with its run
    assert len(tries) >= 2 and not step.promoted
    assert step.wait(lambda: None).rows == 2


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + REAL_WAIT
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_step_returning_while_no_thread_can_take_it_over_stays_with_its_worker(
        ctx: ExecutionContext, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The step returns while the watch is still trying to start the thread that would take
    the run over, and that try fails: the run stays with its worker, which waited for the
    answer, and nothing is left for the lease to recover."""
    monkeypatch.setattr(isolation, "PROMOTE_AFTER", 0.05)
    watch = InlineWatch()
    release = threading.Event()
    tries: list[int] = []
    steps: list[ThreadStep] = []

    def take() -> None:
        tries.append(1)
        release.set()  # the step returns while this try is still under way
        _until(lambda: steps[0].finished)
        raise RuntimeError("can't start new thread")

    step = ThreadStep(lambda: release.wait(REAL_WAIT) and StepResult(rows=4), ctx, _log(), 60)
    steps.append(step)
    step.run_here(watch, take)  # no TakenOver
    assert tries == [1] and not step.promoted
    assert step.wait(lambda: None).rows == 4
    time.sleep(0.2)
    assert tries == [1] and watch.watched == 0  # not tried again: the step is done
    said = [r.getMessage() for r in caplog.records if r.name == "cadenza.executor"]
    assert said == ["taking over a run whose step runs long failed (can't start new thread);"
                    " the step has returned meanwhile and its worker finishes the run"]


def test_a_step_returning_while_its_take_over_starts_belongs_to_the_new_thread(
        ctx: ExecutionContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same moment, but the thread that takes the run over does start: the worker waited
    for it and leaves the run to it."""
    monkeypatch.setattr(isolation, "PROMOTE_AFTER", 0.05)
    watch = InlineWatch()
    release = threading.Event()
    steps: list[ThreadStep] = []

    def take() -> None:
        release.set()
        _until(lambda: steps[0].finished)

    step = ThreadStep(lambda: release.wait(REAL_WAIT) and StepResult(rows=5), ctx, _log(), 60)
    steps.append(step)
    with pytest.raises(TakenOver):
        step.run_here(watch, take)
    assert step.promoted and step.wait(lambda: None).rows == 5
