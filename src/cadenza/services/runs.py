"""Running jobs and deciding about runs: run now, follow, cancel, resume, abandon, replay.

Operations (``actor`` is the :class:`~cadenza.services.context.Actor` of the services)::

    request(job_id, params=..., step_args=..., preset=..., disabled=..., log_level=...)
        -> RunRequestInput                       InvalidRequest for a malformed k=v
    enqueue(RunRequestInput) -> str              a QUEUED run; NotFound / InvalidRequest
    server_is_running() -> bool                  a `cadenza serve` leads this store
    execute_here(run_id, progress, on_retry=None) -> RunResult
                                                 runs it in this thread, through retries
    follow(run_id, on_step) -> RunResult         until a server ended it
    cancel(run_id, wait=False, timeout=120) -> CancelOutcome
    resume(run_id) / abandon(run_id) -> ReviewOutcome
    replay(run_id) -> str                        a new QUEUED run with the same request

Runs started here have the trigger ``manual:<actor name>`` and their creation event names
``actor.id``. Cancel, resume and abandon pass the actor's name to the store, which writes
it both in the run's reason ("canceled by alice") and as the events' actor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cadenza.domain.errors import InvalidTransition, StoreError, WriteFailed
from cadenza.domain.states import TERMINAL_RUN_STATES, RunState, StepState
from cadenza.executor.tracking import Observer, RunOutcome
from cadenza.services.errors import Interrupted, InvalidRequest, NotFound, Refused
from cadenza.services.history import RunDetail, StepView
from cadenza.store.children import waited_child

if TYPE_CHECKING:
    from cadenza.config import JobConfig
    from cadenza.executor.request import RunRequest
    from cadenza.executor.runner import Executor
    from cadenza.executor.steprun import StepOutcome
    from cadenza.services.context import Services
    from cadenza.store import Store
    from cadenza.store.protocols import Transactions
    from cadenza.store.records import RunRecord

FOLLOW_POLL_SECONDS = 0.2
CANCEL_POLL_SECONDS = 0.3


@dataclass(frozen=True)
class RunRequestInput:
    """What a person asks for when running a job now: parameter values, a preset, step
    arguments, steps to skip, a log level. Values are strings from the CLI, JSON values
    from the API."""

    job_id: str
    params: Mapping[str, Any] = field(default_factory=dict)
    preset: str | None = None
    step_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    disabled_steps: tuple[str, ...] = ()
    log_level: str | None = None
    replayed: bool = False  # a recorded run's request again (its step args were accepted)


@dataclass(frozen=True)
class RunResult:
    """How a run ended (``state`` None: not claimed here, or its lease was lost)."""

    run_id: str
    state: RunState | None
    rows: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class StepResult:
    """How one step attempt ended."""

    state: StepState
    seconds: float
    rows: int | None
    error: str | None


class RunProgress(Protocol):
    """What a shell shows while a run executes in its process (one object per try)."""

    def drawing(self) -> AbstractContextManager[object]:
        """A context held while the try executes (a live display, or nothing)."""
        ...

    def run_started(self, run_id: str, job_id: str, steps: list[tuple[str, str]]) -> None: ...

    def step_started(self, name: str) -> None: ...

    def step_skipped(self, name: str, reason: str) -> None: ...

    def step_finished(self, name: str, result: StepResult) -> None: ...

    def run_finished(self, result: RunResult) -> None: ...


@dataclass(frozen=True)
class CancelOutcome:
    """What ``cancel`` did: ``canceled`` (it was QUEUED), ``requested`` (its worker was asked
    to stop it), or neither (``message`` says why); ``state`` and ``reason`` as last read."""

    run_id: str
    canceled: bool
    requested: bool
    by: str
    state: RunState | None
    reason: str | None
    message: str
    waited: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"id": self.run_id, "canceled": self.canceled, "requested": self.requested,
                "by": self.by, "state": self.state.value if self.state else None,
                "reason": self.reason, "message": self.message}

    @property
    def accepted(self) -> bool:
        return self.canceled or self.requested

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_RUN_STATES


@dataclass(frozen=True)
class ReviewOutcome:
    """A NEEDS_REVIEW run resumed (QUEUED again) or abandoned (FAILED)."""

    detail: RunDetail
    resumed: bool
    by: str
    resumes: int
    error: str | None
    next_step: str | None

    def as_json(self) -> dict[str, Any]:
        return {**self.detail.as_json(), "resumes": self.resumes, "error": self.error}


class _Observer(Observer):
    """The executor's callbacks, passed on to a :class:`RunProgress` once recorded.

    The executor tells the run's start, a step's end and the steps it skips before it
    writes the boundary that holds them; a shell must not show a step done that the store
    never recorded. So they are held here and passed on at the next callback that comes
    after a write: the next step's start, or the run's end (a lost run's step ends are
    dropped: the store refused them). When the write fails instead, ``unrecorded`` names
    the step whose end is lost."""

    def __init__(self, progress: RunProgress,
                 failing: Callable[[], object] = lambda: None) -> None:
        self.progress = progress
        self.failing = failing
        """The store's current write failure, if any (a lost run may be lost to it)."""
        self.lost_to_writes = False
        """The run was lost while the store could not write (its lease went unrenewed)."""
        self._start: Callable[[], None] | None = None
        self._ends: list[Callable[[], None]] = []
        self.unrecorded: tuple[str, StepState] | None = None
        """The step whose end was told but not yet recorded, and how it ended."""
        self.started = False
        """Whether the run's claim was recorded (a step started or the run ended)."""

    def _release(self, *, ends: bool = True) -> None:
        start, self._start = self._start, None
        held, self._ends = self._ends, []
        self.unrecorded = None
        if start is not None:
            start()
        for call in held if ends else ():
            call()

    def run_started(self, run: RunRecord, steps: list[tuple[str, str]]) -> None:
        run_id, job_id = run.id, run.job_id
        self._start = lambda: self.progress.run_started(run_id, job_id, steps)

    def step_started(self, name: str) -> None:
        self.started = True
        self._release()
        self.progress.step_started(name)

    def step_skipped(self, name: str, reason: str) -> None:
        self._ends.append(lambda: self.progress.step_skipped(name, reason))

    def step_finished(self, name: str, outcome: StepOutcome) -> None:
        result = StepResult(outcome.state, outcome.seconds, outcome.rows, outcome.error)
        self.unrecorded = (name, outcome.state)
        self._ends.append(lambda: self.progress.step_finished(name, result))

    def run_finished(self, outcome: RunOutcome) -> None:
        self.started = True
        self._release(ends=outcome.state is not None)
        if outcome.state is None and outcome.claimed and self.failing() is not None:
            self.lost_to_writes = True  # not "another holder took it over": told by the caller
            return
        self.progress.run_finished(_result(outcome))


def _result(outcome: RunOutcome) -> RunResult:
    return RunResult(outcome.run_id, outcome.state, outcome.rows, outcome.error)


class RunService:
    """The operations on runs (see the module docstring)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._executor: Executor | None = None

    @property
    def _store(self) -> Store:
        return self.services.store()

    def job(self, job_id: str) -> JobConfig:
        """The job ``job_id`` of the valid configuration; NotFound listing the known ones."""
        return self.services.jobs.get(job_id)

    @staticmethod
    def request(job_id: str, *, params: Sequence[str] = (), step_args: Sequence[str] = (),
                preset: str | None = None, disabled: Sequence[str] = (),
                log_level: str | None = None) -> RunRequestInput:
        """A request from ``NAME=VALUE`` and ``STEP.NAME=VALUE`` texts (the last of repeated
        names wins); InvalidRequest for a malformed one."""
        from cadenza.executor.request import RequestError, request_from_cli

        try:
            parsed = request_from_cli(params, step_args, preset=preset, disabled=disabled,
                                      log_level=log_level)
        except RequestError as exc:
            raise InvalidRequest(str(exc)) from None
        return RunRequestInput(job_id, parsed.params, parsed.preset, parsed.step_args,
                               tuple(parsed.disabled_steps), parsed.log_level)

    def check(self, request: RunRequestInput) -> None:
        """Raise NotFound (no such job) or InvalidRequest (the request does not fit it)."""
        from cadenza.executor.request import RequestError, check_request

        job = self.job(request.job_id)
        try:
            check_request(job, self._run_request(request))
        except RequestError as exc:
            if not request.replayed:
                self._record_refused_values(job, request)
            raise InvalidRequest(str(exc)) from None

    def _record_refused_values(self, job: JobConfig, request: RunRequestInput) -> None:
        """A RUN_VALUES_REFUSED event (level WARNING, with the actor) naming the job and each
        refused step field; never the values (one could be a secret)."""
        from cadenza.domain.events import EventType, Level
        from cadenza.executor.plan import refused_values

        refused = refused_values(job, request.step_args)
        if not refused:
            return
        fields = [f"{step}.{key}" for step, key in refused]
        self._store.append_event(
            EventType.RUN_VALUES_REFUSED,
            f"run values refused for job {job.id}: {', '.join(fields)} cannot be set by a run",
            level=Level.WARNING, actor=self.services.actor.id,
            payload={"job": job.id, "fields": [{"step": step, "field": key}
                                               for step, key in refused]})

    def enqueue(self, request: RunRequestInput) -> str:
        """Record a QUEUED run of the request's job (checked first); returns its id. A
        store that cannot write raises :class:`~cadenza.domain.errors.WriteFailed` (nothing
        was recorded)."""
        self.check(request)
        actor = self.services.actor
        try:
            return self._executor_for().enqueue(request.job_id, self._run_request(request),
                                                trigger=actor.trigger, actor=actor.id)
        except WriteFailed as exc:
            raise _again(exc, f"no run of {request.job_id!r} was recorded: {exc}") from None

    @staticmethod
    def _run_request(request: RunRequestInput) -> RunRequest:
        from cadenza.executor.request import RunRequest

        return RunRequest(params=request.params, preset=request.preset,
                          step_args=request.step_args,
                          disabled_steps=list(request.disabled_steps),
                          log_level=request.log_level, replayed=request.replayed)

    def _executor_for(self) -> Executor:
        if self._executor is None:
            from cadenza.executor.runner import Executor
            from cadenza.resources.pools import apply_pools

            config = self.services.config()
            apply_pools(self._store, config)
            self._executor = executor = Executor(self._store, config)
            self.services.on_close(executor.close)
        return self._executor

    def server_is_running(self) -> bool:
        """Whether a `cadenza serve` leads this store: its scheduler's leadership is taken
        (a lock file next to a SQLite store, an advisory lock on PostgreSQL). A node
        started with ``--no-scheduler`` alone is not seen; such runs execute here."""
        return leader_is_running(self._store)

    def execute_here(self, run_id: str, progress: Callable[[], RunProgress],
                     on_retry: Callable[[float, str | None], None] | None = None) -> RunResult:
        """Execute the QUEUED run in this thread, reporting to a new ``progress()`` per try.

        When a try ends in a retry or a deferral (the run is QUEUED again with
        ``not_before``), ``on_retry(seconds, reason)`` is told, the clock sleeps until then
        and the next try starts, as a server would. A run waiting for its call_job child
        runs the child here first (the same way, with its own ``progress()``), or, when a
        server already runs it, waits for its end. A KeyboardInterrupt while the run waits
        cancels it (it must not wait in the queue for a server that would run it later)
        and raises :class:`Interrupted`; one during a try raises it too."""
        store = self._store
        executor = self._executor_for()
        clock = self.services.clock
        while True:
            try:
                watcher = progress()
                observer = _Observer(watcher, store.failing_writes)
                try:
                    with watcher.drawing():
                        outcome = executor.execute(run_id, observer)
                except WriteFailed as exc:
                    raise _not_recorded(exc, run_id, observer) from None
                failure = store.failing_writes() if observer.lost_to_writes else None
                if failure is not None:
                    kept = _KEPT_RUNNING.format(run_id=run_id)
                    raise _again(failure.error, f"run {run_id} stopped: its lease could not be "
                                                f"renewed: {failure.error}. {kept}") from None
                record = store.get_run(run_id)
                if outcome.state is not RunState.QUEUED or record is None \
                        or record.state is not RunState.QUEUED:
                    return _result(outcome)
                child_id = waited_child(record.wait_reason)
                if child_id is not None:
                    if on_retry is not None:
                        on_retry(0.0, record.wait_reason)
                    self._run_child(child_id, progress, on_retry)
                    continue
                wait = 0.0
                if record.not_before is not None:
                    wait = max((record.not_before - clock.now()).total_seconds(), 0.0)
                if on_retry is not None:
                    on_retry(wait, record.wait_reason)
                clock.sleep(wait)
            except (KeyboardInterrupt, Interrupted):
                record = store.get_run(run_id)
                if record is not None and record.state is RunState.QUEUED:
                    store.transition_run(run_id, RunState.CANCELED,
                                         actor=self.services.actor.id,
                                         reason="interrupted (Ctrl-C) while it waited")
                    raise Interrupted(f"interrupted while run {run_id} waited; it is "
                                      "CANCELED") from None
                raise Interrupted(f"interrupted during run {run_id}") from None

    def _run_child(self, child_id: str, progress: Callable[[], RunProgress],
                   on_retry: Callable[[float, str | None], None] | None) -> None:
        """The call_job child a run executed here waits for: run it here when it is
        QUEUED, else (a server runs it) wait until it ended."""
        store = self._store
        child = store.get_run(child_id)
        if child is not None and child.state is RunState.QUEUED:
            self.execute_here(child_id, progress, on_retry)
            return
        while child is not None and child.state is RunState.RUNNING:
            self.services.clock.sleep(FOLLOW_POLL_SECONDS)
            child = store.get_run(child_id)

    def follow(self, run_id: str, on_step: Callable[[StepView], None],
               poll: float = FOLLOW_POLL_SECONDS,
               on_wait: Callable[[str], None] | None = None) -> RunResult:
        """Report each step change another process records (``on_step``) until the run
        ended or needs review; ``on_wait``: each new reason the run, still QUEUED, waits
        for (a pool's members, admission), as the server records it."""
        store = self._store
        seen: dict[int, str] = {}
        waits: str | None = None
        while True:
            record = store.get_run(run_id)
            if (on_wait is not None and record is not None
                    and record.state is RunState.QUEUED and record.wait_reason
                    and record.wait_reason != waits):
                waits = record.wait_reason
                on_wait(waits)
            for step in store.list_step_runs(run_id):
                if seen.get(step.id) != step.state.value:
                    seen[step.id] = step.state.value
                    on_step(StepView.of(step))
            if record is None:
                return RunResult(run_id, None)
            if record.state in TERMINAL_RUN_STATES or record.state is RunState.NEEDS_REVIEW:
                return RunResult(run_id, record.state, record.rows, record.error)
            self.services.clock.sleep(poll)

    def cancel(self, run_id: str, *, wait: bool = False, timeout: float = 120.0,
               poll: float = CANCEL_POLL_SECONDS) -> CancelOutcome:
        """Cancel a QUEUED run now, or ask the holder of a RUNNING run to stop it (it ends
        CANCELED with "canceled by <name>"). With ``wait``, follow the run until it ended
        or ``timeout`` seconds passed. NotFound for an unknown run."""
        store = self._store
        by = self.services.actor.name
        try:
            result = store.request_cancel(run_id, by)
        except StoreError as exc:
            raise NotFound(str(exc)) from None
        final = store.get_run(run_id)
        accepted = result.canceled or result.requested
        if wait and accepted:
            clock = self.services.clock
            deadline = clock.monotonic() + timeout
            while final is not None and final.state not in TERMINAL_RUN_STATES \
                    and clock.monotonic() < deadline:
                clock.sleep(poll)
                final = store.get_run(run_id)
        return CancelOutcome(run_id, result.canceled, result.requested, by,
                             final.state if final else None, final.reason if final else None,
                             result.message, waited=wait and accepted)

    def resume(self, run_id: str) -> ReviewOutcome:
        """A NEEDS_REVIEW run QUEUED again with fresh attempts, from its checkpoint."""
        return self._review(run_id, resume=True)

    def abandon(self, run_id: str) -> ReviewOutcome:
        """A NEEDS_REVIEW run given up: it ends FAILED (the steps after its failed one are
        recorded SKIPPED when its job is still configured)."""
        return self._review(run_id, resume=False)

    def _review(self, run_id: str, *, resume: bool) -> ReviewOutcome:
        store = self._store
        by = self.services.actor.name
        verb = "resumed" if resume else "abandoned"
        try:
            if resume:
                run = store.resume_run(run_id, actor=by)
            else:
                run = store.abandon_run(run_id, actor=by, skip=self._steps_after_failed(run_id))
        except InvalidTransition as exc:
            raise Refused(f"run {run_id} is {exc.frm}: only a NEEDS_REVIEW run can be {verb} "
                          "(see `cadenza runs show RUN`)") from None
        except StoreError as exc:
            raise NotFound(str(exc)) from None
        detail = self.services.history.get_run(run_id)
        point = store.get_run_checkpoint(run_id) if resume else None
        return ReviewOutcome(detail, resume, by, run.resumes, run.error,
                             point.next_step if point is not None else None)

    def _steps_after_failed(self, run_id: str) -> list[tuple[str, str]]:
        """The (name, type) of the steps of the run's job after its last failed step, in
        the current configuration (none if the job is gone from it: nothing is recorded
        SKIPPED then)."""
        store = self._store
        run = store.get_run(run_id)
        failed = [s.step for s in store.list_step_runs(run_id) if s.state is StepState.FAILED]
        if run is None or not failed:
            return []
        job = self.services.config().jobs.get(run.job_id)
        names = [step.name for step in job.steps] if job is not None else []
        if job is None or failed[-1] not in names:
            return []
        return [(step.name, step.type) for step in job.steps[names.index(failed[-1]) + 1:]]

    def replay(self, run_id: str) -> str:
        """A new QUEUED run of the same job with the same request (preset, parameters, step
        arguments, disabled steps, log level) as run ``run_id``; returns its id."""
        record = self._store.get_run(run_id)
        if record is None:
            raise NotFound(f"no run {run_id!r}")
        overrides = record.overrides or {}
        return self.enqueue(RunRequestInput(
            record.job_id,
            params=dict(overrides.get("params") or record.params),
            preset=None,  # the preset's values were copied into the overrides at creation
            step_args=dict(overrides.get("step_args") or {}),
            disabled_steps=tuple(overrides.get("disabled_steps") or ()),
            log_level=overrides.get("log_level"), replayed=True))


def _again(exc: WriteFailed, message: str) -> WriteFailed:
    """``exc`` told again with ``message`` (same class, kind and detail)."""
    return type(exc)(message, kind=exc.kind, detail=exc.detail)


def _not_recorded(exc: WriteFailed, run_id: str, observer: _Observer) -> WriteFailed:
    """The error of a run whose execution here stopped on a write that failed: what was
    not recorded, what the store keeps, what to do next (its recovery is the usual one)."""
    if not observer.started:
        return _again(exc, f"run {run_id} was not started: {exc}. Kept: the run, QUEUED; "
                           f"`cadenza run` or `cadenza serve` runs it once the store can "
                           f"write, `cadenza runs cancel {run_id}` drops it")
    lost = "a write about it"
    if observer.unrecorded is not None:
        name, state = observer.unrecorded
        lost = f"the end of step {name!r} ({state.value})"
    return _again(exc, f"run {run_id} stopped: {lost} was not recorded: {exc}. "
                       + _KEPT_RUNNING.format(run_id=run_id))


_KEPT_RUNNING = ("Kept: what was recorded before; the run stays RUNNING until its lease "
                 "expires, then a `cadenza serve` on this home re-queues it and it resumes "
                 "from its last checkpoint (`cadenza runs show {run_id}`)")


def leader_is_running(store: Transactions) -> bool:
    """Whether the scheduler's leadership of ``store`` is held by another process."""
    from cadenza.scheduler.leader import leadership_for

    leader = leadership_for(store.engine)
    try:
        if leader.acquire():
            leader.release()
            return False
        return True
    finally:
        leader.close()
