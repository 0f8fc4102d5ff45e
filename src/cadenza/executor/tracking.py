"""One run from its claim to its end: which step comes next, what each boundary records.

:class:`RunTracker` is created per run by :class:`~cadenza.executor.runner.Executor`. It
resolves the run's plan, builds the first boundary (the run's parameters, the steps skipped
before the first one that runs, and that step's start), then runs the steps one by one,
handing each boundary to the executor's recorder. :class:`Observer` is told about progress
(the CLI draws it); it must be quick, it runs in the executor's thread.

Failures (docs/retries.md). A failed step's class decides, through
:func:`cadenza.domain.retry.decide` and the step's retry policy (``job.retry_for(step)``):

* fatal: the run ends FAILED, the later steps SKIPPED "earlier step failed";
* retryable (attempts left), deferred, resource: the run goes back to QUEUED with
  ``not_before`` (the backoff, or the deferral's time), its lease released, in the same
  transaction as the step's end, with a RETRY_SCHEDULED event; the worker is free at once
  (nothing sleeps here). Deferrals and resource faults spend no attempt; a next try past
  the run's timeout fails the run ("run timeout");
* retryable with the attempts spent: NEEDS_REVIEW, until ``cadenza runs resume`` or
  ``abandon``;
* a wait (a deferral with a ``wait_reason``: a call_job step whose child has not ended) is
  not a failure: the run goes back to QUEUED as for a deferral, but the step's attempt is
  left PENDING with the wait as its reason (no error, no RETRY_SCHEDULED event), and the
  next claim goes on with that same attempt (:attr:`RunTracker.waited`).

Checkpoints. Every boundary after a step records the run's checkpoint (next step, outputs so
far) with it. A claim of a run that was claimed before (``lease_epoch > 1``: retried,
deferred, resumed, or recovered after its worker died) reads the checkpoint and the step runs
back and starts at the checkpoint's step with the recorded outputs (``${steps.X.*}`` of the
earlier steps resolve), each new step run numbered after the ones recorded. A fresh run
(epoch 1) reads nothing: the claim is the executor's hot path.

Stops. ``tracker.control`` (:class:`~cadenza.executor.control.RunControl`) is checked before
each step and at every tick of a running step. CANCELED: the running step ends CANCELED, the
later ones SKIPPED "canceled", the run CANCELED "canceled by WHO" (a WARNING line names
who). LEASE_LOST: nothing more is written; the outcome is "lost".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.errors import StepError
from cadenza.domain.events import EventType
from cadenza.domain.outputs import not_kept, truncation
from cadenza.domain.retry import Action, Decision, decide
from cadenza.domain.states import RunState, StepState
from cadenza.executor.context import bind_run
from cadenza.executor.control import RunControl, RunStopped, StopKind, StopRequest
from cadenza.executor.group_commit import Recorder
from cadenza.executor.plan import PlanError, RunPlan, plan_run
from cadenza.executor.runlog import RunLog
from cadenza.executor.steprun import Attempt, StepOutcome, StepRunner
from cadenza.steps.base import StepConfig
from cadenza.store import RunRecord
from cadenza.store.boundary import (
    Boundary,
    BoundaryResult,
    Checkpoint,
    EventSpec,
    RunEnd,
    StepEnd,
    StepStart,
)
from cadenza.store.protocols import WorkerStore
from cadenza.store.runs import EARLIER_STEP_FAILED

FLUSH_SECONDS = 1.0
"""While a step runs, its pending log lines are written at most this often."""

DISABLED = "disabled"
EARLIER_FAILED = EARLIER_STEP_FAILED
CANCELED = "canceled"


class LeaseLost(StepError):
    """The run's lease epoch moved on: this executor must stop writing about the run."""


@dataclass(frozen=True)
class RunOutcome:
    """How a run execution ended: the state it was left in (``None`` when the run was not
    claimed or its lease was lost; QUEUED for a retry, NEEDS_REVIEW when the attempts are
    spent), its rows and its error. ``queued_end``: the run's end was only queued with the
    recorder (a group commit writes it with the next write); until then ``state`` is what
    it will be, and a refusal then (lease lost) is the recorder's to report."""

    run_id: str
    state: RunState | None
    rows: int | None = None
    error: str | None = None
    claimed: bool = True
    queued_end: bool = False

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
    """The state of one run's execution (see the module docstring).

    ``control`` is the run's stop switch (default: a fresh one, ``tracker.control``);
    ``rand`` the random source of the retry jitter (tests make it deterministic)."""

    def __init__(self, *, run: RunRecord, job: JobConfig | None, store: WorkerStore,
                 recorder: Recorder, steps: StepRunner, zone: ZoneInfo, observer: Observer,
                 lease: timedelta, control: RunControl | None = None,
                 rand: Callable[[], float] | None = None) -> None:
        self.run = run
        self.job = job
        self.store = store
        self.recorder = recorder
        self.steps = steps
        self.observer = observer
        self.lease = lease
        self.control = control or RunControl(run.id)
        self.rand = rand
        self.plan: RunPlan | None = None
        self.problem: str | None = None
        if job is None:
            self.problem = f"job {run.job_id!r} is not in jobs.toml any more"
        else:
            try:
                self.plan = plan_run(job, run, zone)
            except PlanError as exc:
                self.problem = f"cannot resolve the run's parameters: {exc}"
        self.log = RunLog(self.plan.log_level if self.plan else "INFO", store.clock.now,
                          steps.settings.limits.run_log_lines)
        self.epoch = run.lease_epoch
        self.deadline = 0.0
        self.deadline_at: datetime | None = None
        self.outputs: dict[str, dict[str, Any]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.rows = 0
        self.next_index: int | None = None
        self.last_flush = self.steps.clock.monotonic()
        self.attempts: dict[str, int] = {}
        """The attempt number of each step's next step run (1 unless some are recorded)."""
        self.start_index = 0
        self.spent = 0
        """Attempts already spent on the step at ``start_index`` (read back at a re-claim)."""
        self.resumed_from: str | None = None
        self.waited: dict[str, int] = {}
        """Step name -> id of its PENDING step run: an attempt that waited (a call_job
        step for its child) and goes on when the step starts again."""
        self.launched: Attempt | None = None
        """The first step, when :meth:`launch` started it before :meth:`go`."""
        self.prepared: Attempt | None = None
        """The first step planned ahead, not started (a staged run claimed by a decision:
        :meth:`claimed_staged`); :meth:`go` starts it instead of planning it again."""
        self.takeover: Callable[[Attempt, int], None] | None = None
        """Set by a node's worker: :meth:`go` runs each thread step in the calling thread
        (:meth:`Attempt.run_here`), and a step that runs long is handed with its step run
        id to ``takeover``, which has another thread go on with the run (it sets
        :attr:`launched` and calls :meth:`go` again, with that step run)."""

    def lease_for(self) -> timedelta:
        return self.lease

    def claimed(self, run: RunRecord) -> None:
        """The claim succeeded: ``run`` as it is now (its new epoch fences every write)."""
        self.run = run
        self.epoch = run.lease_epoch
        bind_run(run.id, self.store, run.lease_epoch)  # ctx.checkpoint / ctx.once fence on it
        if run.lease_epoch > 1 and self.plan is not None:
            self._restore()
        if self.job is not None:
            now = self.store.clock.now()
            self.deadline_at = (run.started_at or now) + self.job.timeout
            self.deadline = self.steps.clock.monotonic() + (self.deadline_at - now).total_seconds()
        names = [(s.name, s.type) for s in self.job.steps] if self.job else []
        self.observer.run_started(run, names)

    def _restore(self) -> None:
        """Read back what earlier executions of this run recorded (see the module docstring)."""
        assert self.job is not None
        recorded = self.store.list_step_runs(self.run.id)
        point = self.store.get_run_checkpoint(self.run.id)
        for row in recorded:
            self.attempts[row.step] = max(self.attempts.get(row.step, 1), row.attempt + 1)
        for row in recorded:  # in id order: a step's last row is the one that may wait
            if row.state is StepState.PENDING and row.attempt + 1 == self.attempts[row.step]:
                self.waited[row.step] = row.id
                self.attempts[row.step] = row.attempt  # the same attempt goes on
        if point is None or point.next_step is None:
            return  # it never passed its first step: start again from the beginning
        names = [s.name for s in self.job.steps]
        if point.next_step not in names:
            self.plan = None
            self.problem = (f"the run's checkpoint continues at step {point.next_step!r}, "
                            f"which is not in job {self.job.id!r} any more")
            return
        self.start_index = names.index(point.next_step)
        self.resumed_from = point.next_step
        before = set(names[:self.start_index])
        self.outputs = {name: dict(values) for name, values in point.outputs.items()
                        if name in before and isinstance(values, dict)}
        self.rows = sum(int(v.get("rows") or 0) for v in self.outputs.values())
        for row in recorded:  # in id order: the last row of each step wins
            if row.step in before:
                self.records[row.step] = {"state": row.state.value, "rows": row.rows,
                                          "output": row.output}
        retried = [row for row in recorded if row.error_class == "retryable"]
        if retried and retried[-1].step == point.next_step:
            self.spent = self.run.attempt

    def _attempt(self, name: str) -> int:
        return self.attempts.get(name, 1)

    def first_boundary(self) -> Boundary:
        """The run's parameters, the leading skipped steps and the first start (or the
        run's end, when nothing can run)."""
        if self.plan is None:
            self.log.add("ERROR", f"run FAILED: {self.problem}")
            return self._boundary(run_end=RunEnd(RunState.FAILED, None, self.problem))
        if self.resumed_from is not None:
            step = self.resumed_from
            self.log.add("INFO", f"run resumed at step {step!r} (attempt "
                                 f"{self._attempt(step)}) from its checkpoint "
                                 f"({self.run.trigger})")
        starts, self.next_index = self._starts_from(self.start_index)
        run_end = None if self.next_index is not None else self._success()
        # The resolved parameters replace the requested ones (written only when they differ).
        resolved = self.plan.params if self.plan.params != self.run.params else None
        return self._boundary(starts=starts, run_end=run_end, params=resolved)

    def launch(self, first: BoundaryResult) -> bool:
        """Start the first step now, in this thread, without waiting for it; the thread
        that calls :meth:`go` later waits for it. Returns whether a step was launched
        (nothing is when the first boundary was refused, nothing runs, or the run was
        stopped meanwhile: :meth:`go` then does what it always does)."""
        if (not first.applied or first.state is RunState.QUEUED or self.next_index is None
                or self.plan is None or self.job is None or self.launched is not None):
            return False
        step = self.job.steps[self.next_index]
        try:
            self.control.check()
        except RunStopped:
            return False
        self.observer.step_started(step.name)
        prepared, self.prepared = self.prepared, None
        self.launched = prepared.start() if prepared is not None else self.steps.launch(
            self.plan, step, attempt=self._attempt(step.name), outputs=self.outputs,
            records=self.records, log=self.log, run_deadline=self.deadline,
            control=self.control)
        return True

    def stage_first(self) -> Attempt | None:
        """Prepare the first step without starting it (the run is staged ahead of its due
        time with a provisional claim, see :meth:`Executor.stage`); None when it cannot be
        started from any thread at once (a process step, a step that fails to plan)."""
        if self.next_index is None or self.plan is None or self.job is None:
            return None
        step = self.job.steps[self.next_index]
        attempt = self.steps.prepare(
            self.plan, step, attempt=self._attempt(step.name), outputs=self.outputs,
            records=self.records, log=self.log, run_deadline=self.deadline,
            control=self.control)
        return attempt if attempt.staged else None

    def claimed_staged(self, attempt: Attempt, now: datetime) -> None:
        """The staged run was claimed at ``now`` by a decision, to wait for a worker: its
        timeout counts from now, and :meth:`go` starts ``attempt`` (from
        :meth:`stage_first`) when the worker takes the run."""
        self._started_now(now)
        self.prepared = attempt

    def _started_now(self, now: datetime) -> None:
        # Bound again: the binding made when it was staged may have been pushed out by the
        # thousands of runs staged after it (a call_job step looks it up as it runs).
        bind_run(self.run.id, self.store, self.epoch)
        if self.job is not None:
            self.deadline_at = now + self.job.timeout
            self.deadline = self.steps.clock.monotonic() + self.job.timeout.total_seconds()

    def begin_staged(self, attempt: Attempt, now: datetime) -> None:
        """The staged run was claimed at ``now``: its timeout counts from now, and its
        first step (``attempt``, from :meth:`stage_first`) starts now on a step thread."""
        self._started_now(now)
        assert self.job is not None and self.next_index is not None
        self.observer.step_started(self.job.steps[self.next_index].name)
        self.launched = attempt.start()

    def begin_staged_here(self, attempt: Attempt, now: datetime) -> Callable[[], None] | None:
        """:meth:`begin_staged` for a step thread that runs the first step itself: returns
        the call that runs it (None: nothing to run; :meth:`go` reports how it ended)."""
        self._started_now(now)
        assert self.job is not None and self.next_index is not None
        self.observer.step_started(self.job.steps[self.next_index].name)
        self.launched = attempt
        return attempt.start_here()

    def go(self, first: BoundaryResult,
           entering: Callable[[], None] | None = None) -> RunOutcome:
        """Run the steps after the first boundary was recorded (``first``).

        ``entering`` is called once, just before the first step is handed to its thread or
        process (a node defers its own writes while runs of a burst are about to start)."""
        if not first.applied:
            return self._lost()
        if first.state is RunState.QUEUED:
            return self._waiting()
        if self.next_index is None or self.plan is None:
            return self._finished(self.plan is not None)
        step_run_id = first.step_run_ids[-1]
        index = self.next_index
        try:
            while True:
                assert self.job is not None and self.next_index is not None
                index = self.next_index
                step = self.job.steps[index]
                attempt = self._attempt(step.name)
                if self.launched is None:
                    self.control.check()
                    self.observer.step_started(step.name)
                if entering is not None:
                    hook, entering = entering, None
                    hook()
                launched, self.launched = self.launched, None
                prepared, self.prepared = self.prepared, None
                if launched is None and self.takeover is not None:
                    # Run here (a node's worker); a step that runs long is waited for by
                    # the thread that takes the run over (TakenOver is raised here then).
                    launched = prepared or self.steps.prepare(
                        self.plan, step, attempt=attempt, outputs=self.outputs,
                        records=self.records, log=self.log, run_deadline=self.deadline,
                        control=self.control)
                    launched.run_here(partial(self.takeover, launched, step_run_id))
                elif launched is None:
                    launched = prepared.start() if prepared is not None else self.steps.launch(
                        self.plan, step, attempt=attempt, outputs=self.outputs,
                        records=self.records, log=self.log, run_deadline=self.deadline,
                        control=self.control)
                outcome = launched.finish(self._tick)
                if outcome.failed:
                    self.control.check()  # a step failing because it was stopped
                self._remember(step, outcome)
                self.observer.step_finished(step.name, outcome)
                end = StepEnd(step_run_id, step.name, step.type, attempt, outcome.state,
                              outcome.rows, outcome.output, outcome.error, outcome.error_class,
                              seconds=outcome.seconds)
                if outcome.failed:
                    boundary = self._after_failure(index, step, outcome, end)
                else:
                    starts, self.next_index = self._starts_from(index + 1)
                    if self.next_index is None:
                        boundary = self._boundary(step_end=end, starts=starts,
                                                  run_end=self._success())
                    else:
                        point = Checkpoint(self.job.steps[self.next_index].name,
                                           dict(self.outputs))
                        boundary = self._boundary(step_end=end, starts=starts,
                                                  checkpoint=point)
                if boundary.run_end is not None:
                    last = self.recorder.finish(boundary)
                    if last is not None and not last.applied:
                        return self._lost()
                    return self._finished(True, boundary.run_end, queued=last is None)
                result = self.recorder.record(boundary)
                if not result.applied:
                    return self._lost()
                if result.state is RunState.QUEUED:
                    return self._waiting()
                step_run_id = result.step_run_ids[-1]
        except RunStopped as stop:
            return self._stopped(stop.request, step_run_id, index)
        except KeyboardInterrupt:
            return self._interrupted()

    def _after_failure(self, index: int, step: StepConfig, outcome: StepOutcome,
                       end: StepEnd) -> Boundary:
        """The boundary of a failed step: the run FAILED, back to QUEUED, or NEEDS_REVIEW."""
        assert self.job is not None
        policy = self.job.retry_for(step)
        now = self.store.clock.now()
        spent = self.spent if index == self.start_index else 0
        decision = decide(outcome.error_class, policy, spent=spent, now=now,
                          deadline=self.deadline_at, until=outcome.until, rand=self.rand)
        error = f"step {step.name!r} failed: {outcome.error}"
        self.next_index = None
        if end.state is StepState.PENDING:  # a wait that cannot go on is the step's failure
            end = replace(end, state=StepState.FAILED)
        if decision.action is Action.FAIL:
            if decision.why:
                error = f"step {step.name!r}: {decision.why} (it failed: {outcome.error})"
            self.log.add("ERROR", f"run FAILED: {error}")
            return self._boundary(step_end=end, starts=self._skip_rest(index + 1,
                                                                       EARLIER_FAILED),
                                  run_end=RunEnd(RunState.FAILED, self.rows, error))
        point = Checkpoint(step.name, dict(self.outputs))
        if decision.action is Action.REVIEW:
            reason = f"retry attempts exhausted ({decision.spent}/{policy.attempts})"
            self.log.add("WARNING", f"run NEEDS_REVIEW: {error}; {reason}. `cadenza runs "
                                    f"resume {self.run.id}` tries again from step "
                                    f"{step.name!r}, `cadenza runs abandon` fails it")
            return self._boundary(step_end=end, checkpoint=point, run_end=RunEnd(
                RunState.NEEDS_REVIEW, self.rows, error, reason, attempt=decision.spent))
        wait = self._wait_text(outcome, decision, policy.attempts)
        assert decision.not_before is not None
        if outcome.wait_reason is not None:
            # A wait, not a failure: the attempt is PENDING with the wait as its reason and
            # goes on when the run is taken again (no error, no retry recorded).
            self.log.add("INFO", f"run QUEUED, step {step.name!r} waits: {wait}", step.name)
            waiting = replace(end, state=StepState.PENDING, reason=wait, error=None,
                              error_class=None, output=None)
            return self._boundary(step_end=waiting, checkpoint=point, run_end=RunEnd(
                RunState.QUEUED, self.rows, None, wait, not_before=decision.not_before,
                wait_reason=wait, attempt=decision.spent))
        self.log.add("WARNING", f"run QUEUED again: {wait}", step.name)
        self.log.event(EventSpec(
            EventType.RETRY_SCHEDULED, f"step {step.name}: {wait}", "WARNING", {
                "step": step.name, "class": outcome.error_class,
                "error_type": outcome.error_type, "attempt": end.attempt,
                "spent": decision.spent, "attempts": policy.attempts,
                "delay_s": round(decision.delay, 3),
                "next_try": decision.not_before.isoformat()}))
        return self._boundary(step_end=end, checkpoint=point, run_end=RunEnd(
            RunState.QUEUED, self.rows, error, wait, not_before=decision.not_before,
            wait_reason=wait, attempt=decision.spent))

    def _wait_text(self, outcome: StepOutcome, decision: Decision, attempts: int) -> str:
        assert decision.not_before is not None
        if outcome.wait_reason is not None:  # exact: what wakes a call_job parent matches it
            return outcome.wait_reason
        zone = ZoneInfo(self.plan.timezone) if self.plan else None
        local = decision.not_before.astimezone(zone)
        now = self.store.clock.now().astimezone(zone)
        shown = local.strftime("%H:%M:%S" if local.date() == now.date() else "%Y-%m-%d %H:%M:%S")
        if outcome.error_class == "retryable":
            return f"retry {decision.spent + 1}/{attempts} after {outcome.error} at {shown}"
        return (f"{outcome.error_class} after {outcome.error}: next try at {shown} "
                "(no attempt spent)")

    def _starts_from(self, index: int) -> tuple[list[StepStart], int | None]:
        assert self.job is not None and self.plan is not None
        starts: list[StepStart] = []
        for k in range(index, len(self.job.steps)):
            step = self.job.steps[k]
            if self.plan.is_disabled(step):
                starts.append(StepStart(step.name, step.type, self._attempt(step.name),
                                        StepState.SKIPPED, DISABLED))
                self.records[step.name] = {"state": "SKIPPED", "rows": None, "output": None}
                self.log.add("INFO", "skipped: disabled", step.name)
                self.observer.step_skipped(step.name, DISABLED)
                continue
            starts.append(StepStart(step.name, step.type, self._attempt(step.name),
                                    resumes=self.waited.pop(step.name, None)))
            return starts, k
        return starts, None

    def _skip_rest(self, index: int, reason: str) -> list[StepStart]:
        assert self.job is not None
        starts = []
        for step in self.job.steps[index:]:
            starts.append(StepStart(step.name, step.type, self._attempt(step.name),
                                    StepState.SKIPPED, reason))
            self.observer.step_skipped(step.name, reason)
        return starts

    def _success(self) -> RunEnd:
        return RunEnd(RunState.SUCCEEDED, self.rows)

    def _remember(self, step: StepConfig, outcome: StepOutcome) -> None:
        if outcome.output and (cut := truncation(outcome.output)) is not None:
            self.log.add("WARNING", not_kept(step.name, *cut), step.name)
        self.records[step.name] = {"state": outcome.state.value, "rows": outcome.rows,
                                   "output": outcome.output}
        if not outcome.failed:
            self.outputs[step.name] = {**(outcome.output or {}), "rows": outcome.rows}
            self.rows += outcome.rows or 0

    def _boundary(self, **parts: Any) -> Boundary:
        if parts.get("run_end") is not None and self.log.dropped:
            dropped = self.log.take_dropped()
            self.log.add("WARNING", f"{dropped:,} more log lines of this run were dropped: "
                                    f"a run keeps {self.log.max_lines:,} lines of its steps "
                                    "([limits].run_log_lines)")
        lines, events = self.log.take()
        return Boundary(self.run.id, self.epoch, logs=lines, events=events, rows=self.rows,
                        **parts)

    def _tick(self) -> None:
        self.control.check()
        now = self.steps.clock.monotonic()
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
            # thread abandoned); nothing more is written about the run.
            self.control.stop(StopKind.LEASE_LOST,
                              reason="the run's lease was taken over while the step ran")
            self.control.check()

    def _stopped(self, request: StopRequest, step_run_id: int, index: int) -> RunOutcome:
        """The run was stopped from outside (see the module docstring)."""
        if request.kind is not StopKind.CANCELED or self.job is None:
            return self._lost()
        who = request.by or "unknown"
        reason = f"canceled by {who}"
        step = self.job.steps[index]
        extra = f" ({request.reason})" if request.reason and request.reason != reason else ""
        self.log.add("WARNING", f"run CANCELED: {reason}{extra}")
        self.observer.step_finished(step.name, StepOutcome(StepState.CANCELED))
        end = StepEnd(step_run_id, step.name, step.type, self._attempt(step.name),
                      StepState.CANCELED, reason=reason)
        run_end = RunEnd(RunState.CANCELED, self.rows, reason=reason)
        boundary = self._boundary(step_end=end, starts=self._skip_rest(index + 1, CANCELED),
                                  run_end=run_end, actor=who)
        last = self.recorder.finish(boundary)
        if last is not None and not last.applied:
            return self._lost()
        return self._finished(True, run_end, queued=last is None)

    def _finished(self, planned: bool, run_end: RunEnd | None = None, *,
                  queued: bool = False) -> RunOutcome:
        if run_end is None:
            run_end = RunEnd(RunState.SUCCEEDED, 0) if planned else \
                RunEnd(RunState.FAILED, None, self.problem)
        outcome = RunOutcome(self.run.id, run_end.state, run_end.rows, run_end.error,
                             queued_end=queued)
        self.observer.run_finished(outcome)
        return outcome

    def _waiting(self) -> RunOutcome:
        """The next step's resources could not be had: the store put the run back in the
        queue with the boundary (its wait_reason says for what; no attempt spent)."""
        return self._finished(True, RunEnd(RunState.QUEUED, self.rows))

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
        # Rows of this execution (earlier executions' rows have lower attempt numbers).
        recorded = [s for s in recorded if s.attempt >= self._attempt(s.step)]
        running = [s for s in recorded if s.state is StepState.RUNNING]
        done = {s.step for s in recorded}
        end = None
        if running:
            last = running[-1]
            end = StepEnd(last.id, last.step, last.step_type, last.attempt, StepState.CANCELED,
                          reason=reason)
        steps = self.job.steps[self.start_index:] if self.job else []
        starts = [StepStart(s.name, s.type, self._attempt(s.name), StepState.SKIPPED, CANCELED)
                  for s in steps if s.name not in done]
        self.log.add("WARNING", f"run CANCELED: {reason}")
        run_end = RunEnd(RunState.CANCELED, self.rows, reason=reason)
        result = self.store.record_boundaries(
            [self._boundary(step_end=end, starts=starts, run_end=run_end)])[0]
        if not result.applied:
            return self._lost()
        return self._finished(True, run_end)
