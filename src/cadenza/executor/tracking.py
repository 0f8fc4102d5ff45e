"""One run from its claim to its end: which step comes next, what each boundary records.

:class:`RunTracker` is created per run by :class:`~cadenza.executor.runner.Executor`. It
resolves the run's plan, builds the first boundary (the run's parameters, the steps skipped
before the first one that runs, and that step's start), then runs the steps one by one,
handing each boundary to the executor's recorder. :class:`Observer` is told about progress
(the CLI draws it); it must be quick, it runs in the executor's thread.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.errors import StepError
from cadenza.domain.states import RunState, StepState
from cadenza.executor.plan import PlanError, RunPlan, plan_run
from cadenza.executor.recorder import Recorder
from cadenza.executor.runlog import RunLog
from cadenza.executor.steprun import StepOutcome, StepRunner
from cadenza.steps.base import StepConfig
from cadenza.store import RunRecord, Store
from cadenza.store.boundary import Boundary, BoundaryResult, RunEnd, StepEnd, StepStart

FLUSH_SECONDS = 1.0
"""While a step runs, its pending log lines are written at most this often."""
DISABLED = "disabled"
EARLIER_FAILED = "earlier step failed"
CANCELED = "canceled"


class LeaseLost(StepError):
    """The run's lease epoch moved on: this executor must stop writing about the run."""


@dataclass(frozen=True)
class RunOutcome:
    """How a run execution ended: the final state (``None`` when the run was not claimed or
    its lease was lost), its rows and its error."""

    run_id: str
    state: RunState | None
    rows: int | None = None
    error: str | None = None
    claimed: bool = True

    @property
    def succeeded(self) -> bool:
        return self.state is RunState.SUCCEEDED


class Observer:
    """Progress callbacks (no-ops here; override what you need)."""

    def run_started(self, run: RunRecord, steps: list[tuple[str, str]]) -> None:
        """The run was claimed; ``steps`` are (name, type) in order."""

    def step_started(self, name: str) -> None:
        """A step starts (its start is recorded)."""

    def step_skipped(self, name: str, reason: str) -> None:
        """A step is recorded SKIPPED with ``reason``."""

    def step_finished(self, name: str, outcome: StepOutcome) -> None:
        """A step ended."""

    def run_finished(self, outcome: RunOutcome) -> None:
        """The run ended (or was lost)."""


class RunTracker:
    """The state of one run's execution (see the module docstring)."""

    def __init__(self, *, run: RunRecord, job: JobConfig | None, store: Store,
                 recorder: Recorder, steps: StepRunner, zone: ZoneInfo, observer: Observer,
                 lease: timedelta) -> None:
        self.run = run
        self.job = job
        self.store = store
        self.recorder = recorder
        self.steps = steps
        self.observer = observer
        self.lease = lease
        self.plan: RunPlan | None = None
        self.problem: str | None = None
        if job is None:
            self.problem = f"job {run.job_id!r} is not in jobs.toml any more"
        else:
            try:
                self.plan = plan_run(job, run, zone)
            except PlanError as exc:
                self.problem = f"cannot resolve the run's parameters: {exc}"
        self.log = RunLog(self.plan.log_level if self.plan else "INFO", store.clock.now)
        self.epoch = run.lease_epoch
        self.deadline = 0.0
        self.outputs: dict[str, dict[str, Any]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.rows = 0
        self.next_index: int | None = None
        self.last_flush = time.monotonic()

    def lease_for(self) -> timedelta:
        return self.lease

    def claimed(self, run: RunRecord) -> None:
        """The claim succeeded: ``run`` as it is now (its new epoch fences every write)."""
        self.run = run
        self.epoch = run.lease_epoch
        timeout = self.job.timeout.total_seconds() if self.job else 0.0
        self.deadline = time.monotonic() + timeout
        names = [(s.name, s.type) for s in self.job.steps] if self.job else []
        self.observer.run_started(run, names)

    def first_boundary(self) -> Boundary:
        """The run's parameters, the leading skipped steps and the first start (or the
        run's end, when nothing can run)."""
        if self.plan is None:
            self.log.add("ERROR", f"run FAILED: {self.problem}")
            return self._boundary(run_end=RunEnd(RunState.FAILED, None, self.problem))
        shown = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in self.plan.params.items())
        self.log.add("INFO", f"run started ({self.run.trigger}); params: {shown or 'none'}")
        starts, self.next_index = self._starts_from(0)
        run_end = None if self.next_index is not None else self._success()
        # The resolved parameters replace the requested ones (written only when they differ).
        resolved = self.plan.params if self.plan.params != self.run.params else None
        return self._boundary(starts=starts, run_end=run_end, params=resolved)

    def go(self, first: BoundaryResult) -> RunOutcome:
        """Run the steps after the first boundary was recorded (``first``)."""
        if not first.applied:
            return self._lost()
        if self.next_index is None or self.plan is None:
            return self._finished(self.plan is not None)
        step_run_id = first.step_run_ids[-1]
        try:
            while True:
                assert self.job is not None and self.next_index is not None
                index = self.next_index
                step = self.job.steps[index]
                self.observer.step_started(step.name)
                outcome = self.steps.attempt(
                    self.plan, step, attempt=1, outputs=self.outputs, records=self.records,
                    log=self.log, run_deadline=self.deadline, on_tick=self._tick)
                self._remember(step, outcome)
                self.observer.step_finished(step.name, outcome)
                run_end: RunEnd | None
                end = StepEnd(step_run_id, step.name, step.type, 1, outcome.state,
                              outcome.rows, outcome.output, outcome.error, outcome.error_class)
                if outcome.failed:
                    error = f"step {step.name!r} failed: {outcome.error}"
                    starts = self._skip_rest(index + 1, EARLIER_FAILED)
                    self.next_index = None
                    run_end = RunEnd(RunState.FAILED, self.rows, error)
                    self.log.add("ERROR", f"run FAILED: {error}")
                else:
                    starts, self.next_index = self._starts_from(index + 1)
                    run_end = None if self.next_index is not None else self._success()
                boundary = self._boundary(step_end=end, starts=starts, run_end=run_end)
                if run_end is not None:
                    last = self.recorder.finish(boundary)
                    if last is not None and not last.applied:
                        return self._lost()
                    return self._finished(True, run_end)
                result = self.recorder.record(boundary)
                if not result.applied:
                    return self._lost()
                step_run_id = result.step_run_ids[-1]
        except KeyboardInterrupt:
            return self._interrupted()

    def _starts_from(self, index: int) -> tuple[list[StepStart], int | None]:
        assert self.job is not None and self.plan is not None
        starts: list[StepStart] = []
        for k in range(index, len(self.job.steps)):
            step = self.job.steps[k]
            if self.plan.is_disabled(step):
                starts.append(StepStart(step.name, step.type, 1, StepState.SKIPPED, DISABLED))
                self.records[step.name] = {"state": "SKIPPED", "rows": None, "output": None}
                self.log.add("INFO", "skipped: disabled", step.name)
                self.observer.step_skipped(step.name, DISABLED)
                continue
            starts.append(StepStart(step.name, step.type))
            return starts, k
        return starts, None

    def _skip_rest(self, index: int, reason: str) -> list[StepStart]:
        assert self.job is not None
        starts = []
        for step in self.job.steps[index:]:
            starts.append(StepStart(step.name, step.type, 1, StepState.SKIPPED, reason))
            self.observer.step_skipped(step.name, reason)
        return starts

    def _success(self) -> RunEnd:
        self.log.add("INFO", f"run SUCCEEDED: {self.rows} rows")
        return RunEnd(RunState.SUCCEEDED, self.rows)

    def _remember(self, step: StepConfig, outcome: StepOutcome) -> None:
        self.records[step.name] = {"state": outcome.state.value, "rows": outcome.rows,
                                   "output": outcome.output}
        if not outcome.failed:
            self.outputs[step.name] = {**(outcome.output or {}), "rows": outcome.rows}
            self.rows += outcome.rows or 0

    def _boundary(self, **parts: Any) -> Boundary:
        lines, events = self.log.take()
        return Boundary(self.run.id, self.epoch, logs=lines, events=events, **parts)

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self.last_flush < FLUSH_SECONDS or not self.log.pending():
            return
        self.last_flush = now
        boundary = self._boundary()
        try:
            result = self.recorder.record(boundary)
        except Exception:  # the store is unavailable: keep the lines for the next boundary
            self.log.restore(boundary.logs, boundary.events)
            return
        if not result.applied:
            # Another holder took the run over: stop the step now (a process is killed, a
            # thread abandoned); the step's end will be refused like this write was.
            raise LeaseLost("the run's lease was taken over while the step ran")

    def _finished(self, planned: bool, run_end: RunEnd | None = None) -> RunOutcome:
        if run_end is None:
            run_end = RunEnd(RunState.SUCCEEDED, 0) if planned else \
                RunEnd(RunState.FAILED, None, self.problem)
        outcome = RunOutcome(self.run.id, run_end.state, run_end.rows, run_end.error)
        self.observer.run_finished(outcome)
        return outcome

    def _lost(self) -> RunOutcome:
        outcome = RunOutcome(self.run.id, None, self.rows,
                             "the run's lease was lost (another holder took it over)")
        self.observer.run_finished(outcome)
        return outcome

    def _interrupted(self) -> RunOutcome:
        """Ctrl-C: the step that was running is CANCELED, the rest SKIPPED, the run CANCELED.

        What was already recorded is read back from the store, since the interrupt may have
        come while a boundary was being written."""
        reason = "interrupted (Ctrl-C)"
        recorded = self.store.list_step_runs(self.run.id)
        running = [s for s in recorded if s.state is StepState.RUNNING]
        done = {s.step for s in recorded}
        end = None
        if running:
            last = running[-1]
            end = StepEnd(last.id, last.step, last.step_type, last.attempt, StepState.CANCELED,
                          reason=reason)
        steps = self.job.steps if self.job else []
        starts = [StepStart(s.name, s.type, 1, StepState.SKIPPED, CANCELED)
                  for s in steps if s.name not in done]
        self.log.add("WARNING", f"run CANCELED: {reason}")
        run_end = RunEnd(RunState.CANCELED, self.rows, reason=reason)
        result = self.store.record_boundaries(
            [self._boundary(step_end=end, starts=starts, run_end=run_end)])[0]
        if not result.applied:
            return self._lost()
        return self._finished(True, run_end)
