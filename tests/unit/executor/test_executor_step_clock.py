"""The step runtime reads time from its clock: a thread step's timeout, ``ctx.remaining()``,
``ctx.cancelled()`` and ``ctx.event``'s time follow a FakeClock, so a test decides when a
step's time is up, whatever the machine's speed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cadenza.clock import FakeClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.params import Scope
from cadenza.executor.connections import Connections
from cadenza.executor.context import ExecutionContext
from cadenza.executor.errors import StepTimeout
from cadenza.executor.isolation import ThreadStep
from cadenza.executor.runlog import RunLog
from cadenza.steps.runtime import RunInfo, StepInfo, StepResult, clock_of
from cadenza.store.boundary import EventSpec

REAL_WAIT = 10.0
"""Real seconds a test waits at most for another thread to react (never reached when green)."""


class Step:
    """An ExecutionContext on a FakeClock, and what it recorded."""

    def __init__(self, home: Path, timeout: float) -> None:
        self.clock = FakeClock()
        settings = Settings.model_validate({})
        self.connections = Connections(home, settings)
        self.log = RunLog("DEBUG", self.clock.now)
        self.events: list[EventSpec] = []
        run = RunInfo("run-1", "job", "manual", None, "DEBUG")
        self.ctx = ExecutionContext(
            params={}, run=run, step=StepInfo("s", "python", 1, timeout),
            log=self.log.logger("s"), home=home, settings=settings,
            scope=Scope(run_id="run-1", job_id="job"), connections=self.connections,
            events=self.events.append, timeout_seconds=timeout, clock=self.clock)


@pytest.fixture
def step(tmp_path: Path) -> Iterator[Step]:
    made = Step(tmp_path, timeout=60)
    yield made
    made.connections.close()


def test_remaining_cancelled_and_events_follow_the_clock(step: Step) -> None:
    ctx, clock = step.ctx, step.clock
    assert clock_of(ctx) is clock and ctx.remaining() == 60
    clock.advance(59.5)
    assert ctx.remaining() == 0.5 and not ctx.cancelled()
    ctx.event("NOTE", "half a second left")
    assert step.events[0].ts == clock.now()
    clock.advance(0.5)
    assert ctx.remaining() == 0 and ctx.cancelled()


def test_a_thread_step_times_out_when_the_clock_passes_its_deadline(step: Step) -> None:
    ctx, clock = step.ctx, step.clock
    release = threading.Event()
    seen: list[bool] = []

    def body() -> StepResult:
        release.wait(REAL_WAIT)  # busy until the test lets it go
        seen.append(ctx.cancelled())
        return StepResult()

    ticked = threading.Event()
    outcome: list[Any] = []

    def wait() -> None:
        try:
            outcome.append(running.wait(ticked.set))
        except StepTimeout as exc:
            outcome.append(exc)

    running = ThreadStep(body, ctx, step.log, 60).start()
    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        assert clock.wait_for_waiters(1, REAL_WAIT)  # the executor waits on the clock
        clock.advance(timedelta(seconds=59))
        assert ticked.wait(REAL_WAIT)  # it woke, saw a second left, and waits again
        assert clock.wait_for_waiters(1, REAL_WAIT)
        assert outcome == [] and not ctx.cancelled()

        clock.advance(1)  # the deadline
        waiter.join(REAL_WAIT)
        assert not waiter.is_alive()
        [error] = outcome
        assert isinstance(error, StepTimeout) and "timed out after 1min" in str(error)
        assert ctx.cancelled()  # the step was told to stop
    finally:
        release.set()
        waiter.join(REAL_WAIT)
    assert running.done.wait(REAL_WAIT) and seen == [True]


def test_a_thread_step_that_ends_in_time_is_not_timed_out(step: Step) -> None:
    ctx, clock = step.ctx, step.clock

    def body() -> StepResult:
        clock.advance(59)  # the step's work took 59 of its 60 seconds
        return StepResult(rows=3)

    result = ThreadStep(body, ctx, step.log, 60).start().wait(lambda: None)
    assert result.rows == 3 and ctx.remaining() == 1


def test_a_thread_step_that_returns_at_its_deadline_is_timed_out(step: Step) -> None:
    """A step that polls ``ctx.cancelled()`` returns right at its deadline, often before the
    thread waiting for it looks: it timed out all the same (before, the outcome depended on
    which of the two threads noticed first, and such a run could end SUCCEEDED)."""
    ctx, clock = step.ctx, step.clock

    def body() -> StepResult:
        clock.advance(60)  # its whole time went by
        assert ctx.cancelled()
        return StepResult(rows=3)

    running = ThreadStep(body, ctx, step.log, 60)
    running.start_here()()  # run by its worker itself: nobody else looks at the clock
    with pytest.raises(StepTimeout, match="timed out after 1min; it returned after its "
                                          "deadline"):
        running.wait(lambda: None)


def test_a_thread_steps_time_counts_from_its_start_not_its_preparation(step: Step) -> None:
    """A node prepares the first step of a run before its due time: the step's timeout,
    ``ctx.remaining()`` and ``ctx.cancelled()`` count from when it starts."""
    ctx, clock = step.ctx, step.clock
    clock.advance(75)  # prepared 75 s ahead of its start, longer than its timeout
    seen: list[tuple[float, bool]] = []

    def body() -> StepResult:
        seen.append((ctx.remaining(), ctx.cancelled()))
        return StepResult(rows=1)

    running = ThreadStep(body, ctx, step.log, 60)
    running.start_here()()
    assert running.wait(lambda: None).rows == 1
    assert seen == [(60, False)]


def test_an_abandoned_steps_connections_are_closed_not_pooled(tmp_path: Path) -> None:
    """A step abandoned at its deadline returns after its worker ended the run and disposed
    of the engines: ``finish`` closes its ``ctx.connection`` connections rather than hand
    them back to a pool nobody holds (where they would stay open until collected)."""
    settings = Settings.model_validate({"connections": {"w": {
        "type": "sql", "url": f"sqlite:///{(tmp_path / 'w.db').as_posix()}"}}})
    made = Step(tmp_path, timeout=60)
    made.connections = Connections(tmp_path, settings)
    run = RunInfo("run-1", "job", "manual", None, "DEBUG")
    ctx = ExecutionContext(
        params={}, run=run, step=StepInfo("s", "python", 1, 60), log=made.log.logger("s"),
        home=tmp_path, settings=settings, scope=Scope(run_id="run-1", job_id="job"),
        connections=made.connections, events=made.events.append, clock=made.clock)
    conn = ctx.connection("w")
    raw = conn.connection.dbapi_connection
    made.clock.advance(61)  # past its deadline: abandoned
    made.connections.close()  # the worker moved on
    ctx.finish(success=False)
    assert raw is not None
    with pytest.raises(Exception, match="closed"):
        raw.execute("SELECT 1")
