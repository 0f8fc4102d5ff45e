"""One attempt of one step: plan it, run it in its isolation, classify what happened.

:meth:`StepRunner.attempt` never raises for a step's failure (only ``KeyboardInterrupt``
and the like go through): it returns a :class:`StepOutcome`, SUCCEEDED with the rows and
output, or FAILED with the error text (``"ClassName: message"``), its class (docs/retries.md), the
exception's class name and a deferral's time. :class:`~cadenza.executor.control.RunStopped`
(the run was canceled or lost its lease while the step ran) goes through to the tracker.
The lines it writes to the run log: INFO when the step starts and ends, DEBUG the rendered
config, ERROR the failure (with the traceback when the exception was not one of Cadenza's
step errors, i.e. a bug or an untranslated driver error).

:meth:`StepRunner.launch` is its first half: it plans the step and hands a thread-isolated
one to its step thread at once; :meth:`Attempt.finish` waits for it. A node launches the
first steps of a crowded minute from its dispatcher thread, one after the other, and lets
each run's worker wait: one thread wake per run on the way to the step, not three.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cadenza.clock import Clock, SystemClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.errors import Deferred, Fatal
from cadenza.domain.states import StepState
from cadenza.executor.child import ChildSpec, step_class_path
from cadenza.executor.connections import Connections
from cadenza.executor.context import ExecutionContext, LazyResources
from cadenza.executor.control import RunControl, RunStopped
from cadenza.executor.errors import (
    StepTimeout,
    class_name,
    classify,
    describe,
    is_expected,
    traceback_text,
)
from cadenza.executor.isolation import INLINE_WATCH, ThreadStep, run_in_process
from cadenza.executor.plan import ConfigCache, RunPlan, StepPlan, plan_step
from cadenza.executor.runlog import RunLog
from cadenza.resources.leased import LeasedResource
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import RunInfo, StepInfo, StepResult


@dataclass(frozen=True)
class StepOutcome:
    """How one attempt ended."""

    state: StepState
    rows: int | None = None
    output: dict[str, Any] | None = None
    error: str | None = None
    error_class: str | None = None
    seconds: float = 0.0
    error_type: str | None = None
    """The exception's class name (the child's, for a step run in a child process)."""
    until: datetime | None = None
    """A deferral's time (:class:`cadenza.Deferred`'s ``until``, HTTP 429 Retry-After)."""
    wait_reason: str | None = None
    """The run's ``wait_reason`` a deferral asks for (a call_job waiting for its child);
    such an outcome is PENDING, not FAILED: the step waits."""

    @property
    def failed(self) -> bool:
        return self.state is not StepState.SUCCEEDED


class StepRunner:
    """Runs step attempts for one executor (shares its connections and config cache).

    ``clock`` is the executor's (the node's): step timeouts, ``ctx.remaining()`` and the
    durations recorded count on its monotonic time, and ``run_deadline`` must be read on
    that same clock. Default: the system clock."""

    def __init__(
        self,
        *,
        types: Mapping[str, type[StepType]],
        connections: Connections,
        settings: Settings,
        home: Any,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.types = types
        self.connections = connections
        self.settings = settings
        self.home = home
        self.cache = ConfigCache()
        self.calls: Any = None
        """What ``call_job`` steps run through (the executor's ChildCalls; None: no store)."""
        self.resources: Callable[[str, str], Mapping[str, Sequence[LeasedResource]]] | None \
            = None
        """(run id, job id) -> what the run holds (``ctx.resources``), set by the executor
        when the home has pools."""

    def attempt(
        self,
        plan: RunPlan,
        step: StepConfig,
        *,
        attempt: int,
        outputs: Mapping[str, Mapping[str, Any]],
        records: Mapping[str, Mapping[str, Any]],
        log: RunLog,
        run_deadline: float,
        on_tick: Callable[[], None],
        control: RunControl | None = None,
    ) -> StepOutcome:
        """Run ``step`` once; ``outputs`` are earlier steps' outputs for ``${steps...}``,
        ``records`` what ``ctx.previous`` returns; ``run_deadline`` is the run's timeout on
        :attr:`clock`'s monotonic time; ``control`` the run's stop switch, whose lease
        bounds a process step's child (its own deadline, see ``isolation``)."""
        return self.launch(plan, step, attempt=attempt, outputs=outputs, records=records,
                           log=log, run_deadline=run_deadline,
                           control=control).finish(on_tick)

    def launch(
        self,
        plan: RunPlan,
        step: StepConfig,
        *,
        attempt: int,
        outputs: Mapping[str, Mapping[str, Any]],
        records: Mapping[str, Mapping[str, Any]],
        log: RunLog,
        run_deadline: float,
        control: RunControl | None = None,
    ) -> Attempt:
        """The first half of :meth:`attempt`: plan the step and, for a thread-isolated
        step, hand it to its step thread now; :meth:`Attempt.finish` waits for it (a
        process-isolated step is started there)."""
        return self.prepare(plan, step, attempt=attempt, outputs=outputs, records=records,
                            log=log, run_deadline=run_deadline, control=control).start()

    def prepare(
        self,
        plan: RunPlan,
        step: StepConfig,
        *,
        attempt: int,
        outputs: Mapping[str, Mapping[str, Any]],
        records: Mapping[str, Mapping[str, Any]],
        log: RunLog,
        run_deadline: float,
        control: RunControl | None = None,
    ) -> Attempt:
        """:meth:`launch` without the start: plan the step and build its context now (a
        node stages the first step of a run recorded ahead before its due time);
        :meth:`Attempt.start` starts it. (Its start is the STEP_STARTED event of the
        boundary that records it: no log line restates it.)"""
        now = Attempt(self, plan, step, self.clock.monotonic(), log)
        try:
            step_type = self.types.get(step.type)
            if step_type is None:
                raise Fatal(f"step type {step.type!r} is not installed")
            if not callable(getattr(step_type, "run", None)):
                raise Fatal(f"step type {step.type!r} cannot run in this version")
            planned = plan_step(plan, step, step_type, outputs, self.cache)
            if log.enabled("DEBUG"):
                log.add("DEBUG", "config: " + json.dumps(
                    planned.config.model_dump(mode="json", by_alias=True, exclude_unset=True),
                    sort_keys=True, default=str), step.name)
            budget = step.timeout.total_seconds()
            left = run_deadline - self.clock.monotonic()
            if left <= 0:
                raise Fatal(f"the run's timeout ({plan.job.timeout}) was reached before "
                            f"step {step.name!r}")
            if left < budget:
                budget, now.run_limited = left, True
            info = StepInfo(step.name, step.type, attempt, budget)
            now.running = self._run(plan, step_type, planned, info, records, log, control)
        except Exception as exc:
            now.outcome = self._failed(step, exc, now.started, log)
        return now

    def _run(
        self,
        plan: RunPlan,
        step_type: type[StepType],
        planned: StepPlan,
        info: StepInfo,
        records: Mapping[str, Mapping[str, Any]],
        log: RunLog,
        control: RunControl | None = None,
    ) -> ThreadStep | Callable[[Callable[[], None]], StepResult]:
        """A launched thread step, or (isolation = "process") the call that runs it."""
        run_info = RunInfo(plan.run.id, plan.job.id, plan.run.trigger, plan.scheduled_for,
                           plan.log_level)
        reader = self.resources
        if getattr(planned.config, "isolation", "thread") == "process":
            held = {} if reader is None else reader(plan.run.id, plan.job.id)
            spec = ChildSpec(
                home=self.home,
                step_class=step_class_path(step_type),
                config=planned.config.model_dump(mode="json", by_alias=True,
                                                 exclude_unset=True),
                params=dict(planned.params),
                run=run_info,
                step=info,
                settings=self.settings,
                scope=planned.scope,
                log_level=plan.log_level,
                timeout_seconds=info.timeout_seconds,
                outputs={k: dict(v) for k, v in records.items()},
                parent_pid=os.getpid(),
                resources=dict(held),
            )
            clock = self.clock
            return lambda on_tick: run_in_process(spec, log, info.timeout_seconds, on_tick,
                                                  clock, control)
        ctx = ExecutionContext(
            params=planned.params,
            run=run_info,
            step=info,
            log=log.logger(info.name),
            home=self.home,
            settings=self.settings,
            scope=planned.scope,
            connections=self.connections,
            events=lambda event: log.event(event, info.name),
            outputs=records,
            clock=self.clock,
            lease=None if control is None else control.lease_left,
            calls=self.calls,
            resources=None if reader is None else LazyResources(
                lambda: reader(plan.run.id, plan.job.id)),
        )
        instance = step_type()
        run = getattr(instance, "run")  # noqa: B009 - StepType declares no run; checked above
        config = planned.config
        return ThreadStep(lambda: run(ctx, config), ctx, log, info.timeout_seconds)

    def _failed(self, step: StepConfig, exc: BaseException, started: float,
                log: RunLog) -> StepOutcome:
        error = describe(exc)
        error_class = classify(exc)
        wait_reason = getattr(exc, "wait_reason", None) if isinstance(exc, Deferred) else None
        if wait_reason is not None:  # a wait, not a failure (call_job): said as such
            log.add("INFO", str(wait_reason), step.name)
        else:
            message = f"failed ({error_class}): {error}"
            if not is_expected(exc):
                message += "\n" + traceback_text(exc).rstrip()
            log.add("ERROR", message, step.name)
        until = exc.until if isinstance(exc, Deferred) else None
        # The member a ResourceFault names travels in the step's output, where the pools'
        # run end hook reads it (docs/pools.md).
        named = getattr(exc, "resource_id", None)
        output = {"resource_id": named} if isinstance(named, str) else None
        # A wait is PENDING: the tracker keeps the attempt open (or fails it past the
        # run's timeout); the class still says how to schedule the next try.
        state = StepState.PENDING if wait_reason is not None else StepState.FAILED
        return StepOutcome(state, error=error, error_class=error_class,
                           seconds=self.clock.monotonic() - started, error_type=class_name(exc),
                           until=until, wait_reason=wait_reason, output=output)


class Attempt:
    """A step attempt launched by :meth:`StepRunner.launch`; :meth:`finish` waits for its
    end and says how it went (the same as :meth:`StepRunner.attempt`)."""

    def __init__(self, runner: StepRunner, plan: RunPlan, step: StepConfig, started: float,
                 log: RunLog) -> None:
        self.runner = runner
        self.plan = plan
        self.step = step
        self.started = started
        self.log = log
        self.run_limited = False
        self.running: ThreadStep | Callable[[Callable[[], None]], StepResult] | None = None
        self.outcome: StepOutcome | None = None
        """Known at launch: the step failed before it could start."""

    @property
    def staged(self) -> bool:
        """Prepared, not started, and startable from any thread at once (a thread step)."""
        return (self.outcome is None and isinstance(self.running, ThreadStep)
                and self.running.deadline == math.inf)

    def start_here(self) -> Callable[[], None] | None:
        """Like :meth:`start`, for a thread step to be run by the calling thread (a step
        thread): returns the call that runs it (None if there is nothing to run)."""
        if self.outcome is not None or not isinstance(self.running, ThreadStep):
            return None
        self.started = self.runner.clock.monotonic()
        return self.running.start_here()

    def run_here(self, on_promote: Callable[[], None]) -> Attempt:
        """Start a prepared step and, for a thread step, run it in the calling thread (a
        node's worker) now (:meth:`ThreadStep.run_here`: should it run long, another thread
        takes the run over with this attempt, through ``on_promote``, and this thread gets
        :class:`~cadenza.executor.isolation.TakenOver`); returns itself, the step done or
        (any other step) started as by :meth:`start`."""
        if self.outcome is None and isinstance(self.running, ThreadStep):
            self.started = self.runner.clock.monotonic()
            self.running.run_here(INLINE_WATCH, on_promote)
            return self
        return self.start()

    def start(self) -> Attempt:
        """Start a prepared step (a thread step is handed to its thread; a process step
        starts in :meth:`finish`); returns itself."""
        if self.outcome is None:
            self.started = self.runner.clock.monotonic()
            if isinstance(self.running, ThreadStep):
                self.running.start()
        return self

    def finish(self, on_tick: Callable[[], None]) -> StepOutcome:
        """Wait for the step (``on_tick`` every tick) and record how it ended."""
        if self.outcome is not None:
            return self.outcome
        step, log, running = self.step, self.log, self.running
        assert running is not None
        try:
            if isinstance(running, ThreadStep):
                result = running.wait(on_tick)
            else:
                result = running(on_tick)
        except StepTimeout as exc:
            if self.run_limited:
                return self.runner._failed(step, Fatal(
                    f"the run's timeout ({self.plan.job.timeout}) was reached during step "
                    f"{step.name!r}"), self.started, log)
            return self.runner._failed(step, exc, self.started, log)
        except RunStopped:
            raise  # canceled or lease lost: the tracker ends the run, not the step's class
        except Exception as exc:
            return self.runner._failed(step, exc, self.started, log)
        seconds = self.runner.clock.monotonic() - self.started
        return StepOutcome(StepState.SUCCEEDED, result.rows, dict(result.output),
                           seconds=seconds)
