"""The executor's side of ``call_job`` (docs/call_job.md): create the child run
once, wait for it without a worker, and turn its end into the parent step's.

One attempt of a ``call_job`` step (:meth:`ChildCalls.call`):

1. the child of this run and step is looked up (the unique (parent run, step) of
   :mod:`cadenza.store.children`); when there is none yet, the chain of runs that called
   this one is checked for a cycle (the target job already in it: :class:`Fatal` naming the
   chain), and the child is created QUEUED, fenced on this attempt's lease epoch, with the
   trigger ``call_job:<parent job>@<parent run>``, the step's ``params`` and ``preset``,
   and the parent's log level when it is DEBUG; it is admitted and leased like any run;
2. ``wait = false``: the step succeeds at once with the child's id and state;
3. the child ended: SUCCEEDED gives the step the child's rows; FAILED or NEEDS_REVIEW fail
   it (fatal); CANCELED cancels the parent run (its step CANCELED, the run CANCELED
   "canceled by child run ...");
4. the child has not ended: :class:`WaitingForChild`, a deferral until the run's deadline
   with the wait reason ``waiting for child run <id> (<job>)``: the step's attempt is left
   PENDING with that reason (a wait, not a failure), the run goes back to QUEUED and frees
   its worker, spending no attempt; the child's end makes it due at once (the run end hook
   of :mod:`cadenza.store.children`), and the same attempt goes on (PENDING -> RUNNING),
   comes back here and finds the child ended. Past the run's deadline the run fails with
   "run timeout", like any deferral.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadenza.domain.errors import Deferred, Fatal
from cadenza.domain.states import RunState
from cadenza.executor.context import FencedOut, bound_progress
from cadenza.executor.request import RequestError, RunRequest, new_run
from cadenza.steps.builtin.call_job import CallJobConfig
from cadenza.steps.runtime import StepContext, StepResult
from cadenza.store.children import (
    MAX_DEPTH,
    ChildRecord,
    ChildRuns,
    waiting_reason,
)

if TYPE_CHECKING:
    from cadenza.config.loader import LoadedConfig
    from cadenza.executor.lease_keeper import LeaseKeeper
    from cadenza.store.protocols import WorkerStore


class WaitingForChild(Deferred):
    """The parent step waits for its child: a deferral whose run ``wait_reason`` is
    ``waiting for child run <id> (<job>)`` (what wakes the parent looks for it)."""

    def __init__(self, until: datetime, wait_reason: str) -> None:
        super().__init__(until, wait_reason)
        self.wait_reason = wait_reason


def trigger_of(job_id: str, run_id: str) -> str:
    """The trigger of a child of run ``run_id`` of ``job_id`` (docs/call_job.md)."""
    return f"call_job:{job_id}@{run_id}"


def cycle_text(chain: list[tuple[str, str]], target: str) -> str:
    """``A (run X) → B (run Y) → A``: the chain of calls that would start ``target``."""
    return " → ".join([*(f"{job} (run {run})" for run, job in chain), target])


class ChildCalls:
    """``call_job`` for the runs of one executor (see the module docstring).

    ``config`` returns the executor's configuration (the jobs a child is made of);
    ``keeper`` stops a parent whose child was canceled."""

    def __init__(self, store: WorkerStore, config: Callable[[], LoadedConfig],
                 keeper: LeaseKeeper) -> None:
        self.store = store
        self.config = config
        self.keeper = keeper
        self.children: ChildRuns = store.children

    def call(self, ctx: StepContext, config: CallJobConfig) -> StepResult:
        """One attempt of a ``call_job`` step (see the module docstring)."""
        run, step = ctx.run, ctx.step.name
        child = self.children.find(run.id, step)
        if child is None:
            child = self._start(ctx, config)
        else:
            ctx.log.info("child run %s of job %s is %s", child.id, child.job_id, child.state)
        if not config.wait:
            return StepResult(None, _output(child))
        if child.state is RunState.SUCCEEDED:
            ctx.log.info("child run %s of job %s SUCCEEDED: %s rows", child.id, child.job_id,
                         child.rows if child.rows is not None else 0)
            return StepResult(child.rows, _output(child))
        if child.state in (RunState.FAILED, RunState.NEEDS_REVIEW):
            why = f": {child.error}" if child.error else ""
            raise Fatal(f"child run {child.id} of job {child.job_id} ended "
                        f"{child.state}{why}")
        if child.state is RunState.CANCELED:
            why = f" ({child.reason})" if child.reason else ""
            self.keeper.cancel_local(run.id, f"child run {child.id}")
            raise Fatal(f"child run {child.id} of job {child.job_id} was CANCELED{why}")
        raise WaitingForChild(self._deadline(run.id, run.job_id),
                              waiting_reason(child.id, child.job_id))

    def _start(self, ctx: StepContext, config: CallJobConfig) -> ChildRecord:
        run, step = ctx.run, ctx.step.name
        chain = self.children.ancestors(run.id)
        if len(chain) > MAX_DEPTH or config.job in {job for _, job in chain}:
            raise Fatal(f"call_job cycle: {cycle_text(chain, config.job)}; cycles are "
                        "refused")
        job = self.config().jobs.get(config.job)
        if job is None:
            raise Fatal(f"job {config.job!r} is not in jobs.toml")
        level = "DEBUG" if run.log_level.upper() == "DEBUG" else None
        request = RunRequest(params=dict(config.params), preset=config.preset,
                             log_level=level)
        try:
            spec = new_run(job, request, trigger_of(run.job_id, run.id),
                           now=self.store.clock.now(), actor=f"run {run.id}")
        except RequestError as exc:
            raise Fatal(f"cannot start job {config.job!r}: {exc}") from None
        progress = bound_progress(run)
        if progress is None:
            raise Fatal(f"step {step!r}: call_job needs a run executed by Cadenza's executor")
        made = self.children.create(run.id, progress.epoch, step, spec)
        if made is None:
            raise FencedOut(f"step {step!r}: the run's lease was taken over by another "
                            "holder before its child could be started; this attempt stops")
        child, created = made
        if created:
            preset = f" (preset {config.preset})" if config.preset else ""
            ctx.log.info("started child run %s of job %s%s", child.id, child.job_id, preset)
        return child

    def _deadline(self, run_id: str, job_id: str) -> datetime:
        """The end of the parent run's timeout (a wait lasts until then at most)."""
        record = self.store.get_run(run_id)
        job = self.config().jobs.get(job_id)
        now = self.store.clock.now()
        if record is None or job is None:
            return now
        return (record.started_at or now) + job.timeout


def _output(child: ChildRecord) -> dict[str, Any]:
    return {"child_run_id": child.id, "job": child.job_id, "state": child.state.value,
            "rows": child.rows}
