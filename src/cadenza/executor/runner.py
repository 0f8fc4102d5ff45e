"""Executing a run: claim it, run its steps in order, record each step boundary (docs/running.md).

:meth:`Executor.execute` claims one QUEUED run (QUEUED -> RUNNING, a conditional UPDATE that
increments the lease epoch; every later write is fenced on that epoch) and runs it to its end
in the caller's thread. :meth:`Executor.run_claimed` runs a run that a worker pool already
claimed. The rules:

* steps run in order, one step run row per attempt (start, end, state, rows, output, error,
  error class);
* a disabled step (``enabled = false``, ``--disable``, a preset's ``disabled_steps``) is
  recorded SKIPPED "disabled" and the run goes on;
* a failed step's error class decides (docs/retries.md, :mod:`cadenza.domain.retry`): a
  fatal error fails the run (its error names the step; every later step is recorded SKIPPED
  "earlier step failed"); a retryable error or a deferral puts the run back in the queue
  with ``not_before`` (it resumes at that step, from its checkpoint); retryable errors that
  spent the attempts leave the run in NEEDS_REVIEW;
* the run's rows are the sum of its steps' rows; a step's output keys are read by later
  steps as ``${steps.NAME.KEY}`` (plus ``rows``).

Leases (docs/leases.md): a claim takes the run's lease for ``[workers].lease`` (default 60 s)
and registers the run, with a :class:`~cadenza.executor.control.RunControl` of its own, with
the process's :class:`~cadenza.executor.lease_keeper.LeaseKeeper`, which renews it every third of
that, stops the run when a cancel is requested or the lease is lost, and forgets it when the
run's execution ends. A :meth:`Executor.cancel` in this process stops the run at once.

Commits: the claim, the run's resolved parameters and the first step's start share one
transaction (:meth:`execute`); then one per step boundary (the end of step N, its log lines
and events, and the start of step N+1 or the end of the run). A run of S executed steps
costs S + 1 commits (plus its creation); a worker pool's group commit shares them between
runs. For a long step, pending log lines are also written about once a second.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from cadenza.config.loader import LoadedConfig
from cadenza.domain.errors import StoreError
from cadenza.domain.states import RunState
from cadenza.executor.calls import ChildCalls
from cadenza.executor.connections import Connections
from cadenza.executor.control import RunControl, StopKind
from cadenza.executor.group_commit import DirectRecorder, Recorder
from cadenza.executor.isolation import TakenOver
from cadenza.executor.lease_keeper import LeaseKeeper
from cadenza.executor.request import RunRequest, new_run
from cadenza.executor.steprun import Attempt, StepRunner
from cadenza.executor.tracking import Observer, RunOutcome, RunTracker
from cadenza.resources.leased import LeasedResource
from cadenza.scheduler.schedules import server_zone
from cadenza.steps.registry import StepType, registry
from cadenza.store import RunRecord
from cadenza.store.boundary import BoundaryResult, LogLine
from cadenza.store.claims import StagedStart
from cadenza.store.core import if_not_committed
from cadenza.store.protocols import WorkerStore

log = logging.getLogger("cadenza.executor")


@dataclass(frozen=True)
class Started:
    """A run claimed and started by :meth:`Executor.claim_and_start`, to be run on."""

    tracker: RunTracker
    first: BoundaryResult
    keeper: LeaseKeeper | None = None
    control: RunControl | None = None

    @property
    def run_id(self) -> str:
        return self.tracker.run.id

    def launch(self) -> bool:
        """Start the run's first step now without waiting for it (see RunTracker.launch);
        the worker that calls :meth:`go` waits for it. Returns whether it was started."""
        return self.tracker.launch(self.first)

    def go(self, entering: Callable[[], None] | None = None) -> RunOutcome:
        """Run the steps to the end (in this thread); the run's lease is renewed until then.
        ``entering()`` is called just before the first step starts (see RunTracker.go).
        Raises :class:`~cadenza.executor.isolation.TakenOver` when another thread took the
        run over (the run is that thread's then, its lease included: :meth:`go_on`)."""
        return self._until_end(lambda: self.tracker.go(self.first, entering))

    def go_on(self, attempt: Attempt, step_run_id: int) -> RunOutcome:
        """Take over the run whose worker runs step run ``step_run_id`` itself
        (``attempt``, see RunTracker.takeover): wait for that step, then go on to the end."""
        self.tracker.launched = attempt
        return self._until_end(lambda: self.tracker.go(
            BoundaryResult(True, (step_run_id,), RunState.RUNNING)))

    def _until_end(self, go: Callable[[], RunOutcome]) -> RunOutcome:
        try:
            outcome = go()
        except TakenOver:
            raise  # the run is another thread's now: its lease too
        except BaseException:
            self._let_go()
            raise
        self._let_go()
        return outcome

    def _let_go(self) -> None:
        if self.keeper is not None:
            self.keeper.unregister(self.run_id, self.control)


@dataclass(frozen=True)
class Staged:
    """A QUEUED run prepared ahead of its due time (:meth:`Executor.stage`): its tracker
    with a provisional claim, its first step planned, its claim's rows encoded. At the due
    time the store claims it (:meth:`~cadenza.store.claims.RunClaims.claim_staged`) and
    :meth:`begin` starts its first step."""

    tracker: RunTracker
    control: RunControl
    start: StagedStart
    attempt: Attempt
    keeper: LeaseKeeper
    lines: tuple[LogLine, ...] = ()
    """The first boundary's run log lines: back in the run's log at the claim."""

    @property
    def run_id(self) -> str:
        return self.tracker.run.id

    def begin(self, step_run_id: int, now: datetime) -> Started:
        """The run was claimed at ``now`` with its first step run ``step_run_id``: hold its
        lease and hand its first step to a step thread; a worker then calls
        :meth:`Started.go`."""
        self._hold(now)
        try:
            self.tracker.begin_staged(self.attempt, now)
        except Exception:  # e.g. no thread could be started: go() starts it the usual way
            log.exception("starting the first step of staged run %s failed", self.run_id)
        return self._started(step_run_id)

    def begin_here(self, step_run_id: int,
                   now: datetime) -> tuple[Started, Callable[[], None] | None]:
        """:meth:`begin` on a step thread that runs the first step itself: returns the
        :class:`Started` for a worker and the call that runs the step (to be made at once
        by the caller; None when there is nothing to run)."""
        self._hold(now)
        body = None
        try:
            body = self.tracker.begin_staged_here(self.attempt, now)
        except Exception:
            self.tracker.launched = None  # go() starts it the usual way
            log.exception("starting the first step of staged run %s failed", self.run_id)
        return self._started(step_run_id), body

    def claimed_in(self, conn: sa.Connection, step_run_id: int, now: datetime) -> Started:
        """The run was claimed at ``now`` in ``conn``'s transaction by a decision (not a
        stage's chunk: it waits in the node's local queue for a worker, whose
        :meth:`Started.go` starts the first step planned ahead). Its lease is held from
        now on, and let go should the transaction not commit (as
        :meth:`Executor.claim_and_start` does)."""
        self.tracker.claimed_staged(self.attempt, now)
        self._hold(now)
        if_not_committed(conn, partial(let_go, self.keeper, self.run_id, self.control))
        return self._started(step_run_id)

    def fallback(self, step_run_id: int) -> Started:
        """The :class:`Started` of a claimed staged run whose start failed: its lease held,
        its first step started by :meth:`Started.go` the ordinary way."""
        self.tracker.launched = None
        run = self.tracker.run
        self.keeper.register(run.id, run.lease_epoch, run.lease_owner or "", self.control)
        return self._started(step_run_id)

    def _hold(self, now: datetime) -> None:
        run = self.tracker.run
        self.keeper.register(run.id, run.lease_epoch, run.lease_owner or "", self.control)
        for line in self.lines:  # written with the next boundary, at the claim's time
            self.tracker.log.add_line(LogLine(now, line.level, line.step, line.message))

    def _started(self, step_run_id: int) -> Started:
        first = BoundaryResult(True, (step_run_id,), RunState.RUNNING)
        return Started(self.tracker, first, self.keeper, self.control)


def let_go(keeper: LeaseKeeper, run_id: str, control: RunControl) -> None:
    """A claim that did not commit (or whose COMMIT's answer was lost): stop holding it."""
    keeper.unregister(run_id, control)
    control.stop(StopKind.LEASE_LOST, reason="the run's claim was not committed")


def default_owner() -> str:
    """``host:pid:thread``, the lease owner written on runs this process claims."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class Executor:
    """Runs jobs of one loaded configuration against one store (thread-safe: a worker pool
    shares one executor between its threads).

    ``step_types`` replaces the registry's (embedding and tests); ``default_zone`` is the
    zone of jobs without one (default: the server's)."""

    def __init__(
        self,
        store: WorkerStore,
        config: LoadedConfig,
        *,
        owner: str | None = None,
        connections: Connections | None = None,
        recorder: Recorder | None = None,
        default_zone: ZoneInfo | None = None,
        step_types: Mapping[str, type[StepType]] | None = None,
        keeper: LeaseKeeper | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.owner = owner or default_owner()
        self.lease = config.settings.workers.lease
        # A node shares one keeper between its executors (one heartbeat per process); an
        # executor on its own (``cadenza run --local``, tests) starts its own on first claim.
        self._own_keeper = keeper is None
        self.keeper = keeper or LeaseKeeper(store, self.lease)
        self._own_connections = connections is None
        self.connections = connections or Connections(config.home, config.settings)
        self.recorder: Recorder = recorder or DirectRecorder(store)
        self.zone = default_zone or server_zone()
        self.steps = StepRunner(types=step_types or registry(), connections=self.connections,
                                settings=config.settings, home=config.home, clock=store.clock)
        self.steps.calls = ChildCalls(store, lambda: self.config, self.keeper)
        # The pools of this configuration are applied by whoever builds the executor (a
        # node at its start and each reload, `run --local`): cadenza.resources.pools.
        if config.settings.pools:
            self.steps.resources = _held_reader(store, config)

    def enqueue(self, job_id: str, request: RunRequest, *, trigger: str,
                actor: str = "system") -> str:
        """Create a QUEUED run of ``job_id`` for ``request`` (checked first: raises
        :class:`~cadenza.executor.request.RequestError` or :class:`KeyError` for an unknown
        job); returns its id. A manual run's scheduled time is now."""
        job = self.config.jobs[job_id]
        spec = new_run(job, request, trigger, now=self.store.clock.now(), actor=actor)
        return self.store.create_runs([spec])[0]

    def execute(self, run_id: str, observer: Observer | None = None) -> RunOutcome:
        """Claim the QUEUED run ``run_id`` and run it to its end in this thread.

        Returns with ``claimed=False`` (changing nothing) when the run is not QUEUED any more.
        The claim, the resolved parameters and the first step's start are one commit."""
        run = self.store.get_run(run_id)
        if run is None:
            raise StoreError(f"no run {run_id!r}")
        if run.state is not RunState.QUEUED:
            return RunOutcome(run_id, run.state, run.rows, run.error, claimed=False)
        with self.store.write() as conn:
            started = self.claim_and_start(conn, limit=1, run_ids=[run_id], observer=observer,
                                           lease_until=self.store.clock.now() + self.lease)
        if not started:
            return RunOutcome(run_id, None, claimed=False)
        return started[0].go()

    def run_claimed(self, run: RunRecord, observer: Observer | None = None) -> RunOutcome:
        """Run ``run``, already claimed by this executor's owner (a worker pool's batch)."""
        tracker, control = self._tracker(run, observer)
        self._hold(run, control)
        tracker.claimed(run)
        first = self.recorder.record(tracker.first_boundary())
        return Started(tracker, first, self.keeper, control).go()

    def cancel(self, run_id: str, by: str) -> bool:
        """Stop ``run_id`` now if this executor's process runs it (the in-process fast path
        of ``runs cancel``; the durable request is :meth:`Store.request_cancel`)."""
        return self.keeper.cancel_local(run_id, by)

    def claim_and_start(
        self,
        conn: sa.Connection,
        *,
        limit: int,
        lease_until: datetime,
        job_ids: Sequence[str] | None = None,
        run_ids: Sequence[str] | None = None,
        observer: Observer | None = None,
    ) -> list[Started]:
        """In the caller's transaction ``conn``: claim up to ``limit`` QUEUED runs (only
        among ``run_ids`` when given: the ones admission chose) and record each one's first
        boundary (resolved parameters, first step's start). Hand each :class:`Started` to a
        worker, which calls :meth:`Started.go`."""
        runs = self.store.claim_runs(self.owner, lease_until, limit=limit, job_ids=job_ids,
                                     run_ids=run_ids, conn=conn, starting=True)
        trackers = []
        for run in runs:
            tracker, control = self._tracker(run, observer)
            # Held from the claim on: a run waiting in a node's local queue keeps its lease.
            # Should this transaction not commit, or its COMMIT be lost on the way (the
            # claim may have been applied, unknown to this process), the keeper lets the
            # run go at once: applied, its lease runs out and the reaper takes it back.
            self._hold(run, control)
            if_not_committed(conn, partial(self._let_go, run.id, control))
            tracker.claimed(run)
            trackers.append((tracker, control))
        firsts = self.store.record_boundaries([t.first_boundary() for t, _ in trackers],
                                              conn=conn)
        self.store.claim_written(conn)
        return [Started(t, first, self.keeper, control)
                for (t, control), first in zip(trackers, firsts, strict=True)]

    def stage(self, run: RunRecord, due: datetime, lease_until: datetime) -> Staged | None:
        """Prepare the claim of ``run`` (QUEUED, never claimed) at ``due`` with the lease
        ``lease_until``: a tracker claimed provisionally (epoch 1, started at ``due``), the
        first boundary encoded, the first step planned with its context. None when the run
        must be claimed the ordinary way (its first step is not a thread step, nothing
        runs, it cannot be planned, ...). Nothing is written."""
        if run.state is not RunState.QUEUED or run.lease_epoch != 0:
            return None
        tracker, control = self._tracker(run, None)
        tracker.claimed(replace(run, state=RunState.RUNNING, lease_epoch=1,
                                lease_owner=self.owner, lease_until=lease_until,
                                started_at=due))
        if tracker.log.enabled("DEBUG"):
            return None  # its DEBUG lines keep their order the ordinary way
        first = tracker.first_boundary()
        attempt = tracker.stage_first()
        if attempt is None:
            return None
        start = self.store.stage_start(replace(first, logs=()) if first.logs else first,
                                       run.job_id, self.owner, lease_until)
        if start is None:
            return None
        return Staged(tracker, control, start, attempt, self.keeper, tuple(first.logs))

    def lease_for(self, job_id: str) -> timedelta:
        """How long a claim of a run (of any job) holds its lease before a renewal:
        ``[workers].lease``."""
        return self.lease

    def close(self) -> None:
        """Dispose of the connections this executor opened (and its own lease keeper)."""
        if self._own_keeper:
            self.keeper.stop()
        if self._own_connections:
            self.connections.close()

    def _hold(self, run: RunRecord, control: RunControl) -> None:
        self.keeper.register(run.id, run.lease_epoch, run.lease_owner or self.owner, control)

    def _let_go(self, run_id: str, control: RunControl) -> None:
        let_go(self.keeper, run_id, control)

    def _tracker(self, run: RunRecord,
                 observer: Observer | None) -> tuple[RunTracker, RunControl]:
        control = RunControl(run.id)
        tracker = RunTracker(
            run=run,
            job=self.config.jobs.get(run.job_id),
            store=self.store,
            recorder=self.recorder,
            steps=self.steps,
            zone=self.zone,
            observer=observer or Observer(),
            lease=self.lease,
            control=control,
        )
        return tracker, control


def _held_reader(store: WorkerStore, config: LoadedConfig
                 ) -> Callable[[str, str], Mapping[str, Sequence[LeasedResource]]]:
    """What a run holds (``ctx.resources``): one read per step of a job that needs pools."""
    from cadenza.resources.held import held_resources
    from cadenza.resources.plan import peak_needs

    needing = {job_id for job_id, job in config.jobs.items() if peak_needs(job)}

    def read(run_id: str, job_id: str) -> Mapping[str, Sequence[LeasedResource]]:
        if job_id not in needing:
            return {}
        return held_resources(store, config.settings, run_id)

    return read
