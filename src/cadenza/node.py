"""One ``cadenza serve`` process: the scheduler, the dispatcher, the workers, reloads.

::

    scheduler thread ──creates runs──▶ store ◀──claims── dispatcher thread ──RunRecord──▶ workers
         (leader only)                                    (admission: one decision per
                                                           write transaction)

* The **scheduler** (:class:`~cadenza.scheduler.service.Scheduler`) records every fire as a
  run or a MISSED row; only the leader ticks (the store's unique fire is the real guard).
* The **dispatcher** decides, in one write transaction, which QUEUED runs may start
  (:func:`~cadenza.domain.admission.admit`: caps, budgets, windows, ``not_before``, free
  workers on this node), claims them (QUEUED → RUNNING, a new lease epoch each) and writes
  the ``wait_reason`` of the others. It wakes when the scheduler created runs, when a worker
  finished (at once if no claimed run waits in the local queue, else once half the slots
  are free), when a waiting run's time comes (precisely at the ``not_before`` of fires the
  scheduler recorded ahead: then one decision claims as many as there are free slots), and
  at least every ``POLL_SECONDS`` (runs enqueued by other processes: ``cadenza run``, other
  nodes). A fire recorded ahead gets no ``wait_reason`` before its time.
* **Staged due times** (:mod:`cadenza.executor.staging`, docs/scheduling.md): fires the
  scheduler recorded ahead are prepared before their time (admission, trackers, first
  steps, the claim's rows) and claimed in chunks at it; the step threads start each
  chunk's runs (lease, log, first step: jobs chained on a few threads, see
  :class:`~cadenza.executor.isolation.StepThreads`) while this thread writes the next
  chunk; the workers are handed those runs once the whole stage is started. Cyclic GC is
  frozen out of what was staged. A node with many workers on a SQLite file has the chunks
  after the first written by its **claimer process** (:mod:`cadenza.executor.claimer`),
  which has an interpreter lock of its own.
* **Workers** run claimed runs with the :class:`~cadenza.executor.runner.Executor` of the
  configuration that was current when the run was claimed. For as many claimed runs as
  workers wait, the dispatcher starts the first step itself (``Started.launch``), one run
  after the other, before any worker wakes; each worker then only waits for its run's step
  (at a crowded minute this is one thread wake per run on the way to the step, not three).
  While claimed runs have not entered their first step yet, a worker whose run ended
  neither writes the queued run ends nor wakes the dispatcher; the last run to enter wakes
  it, and its decision writes them. A run's "ended" line is logged when its end is written.
  Cyclic garbage collection is paused during a decision and its launches.
* **Leases** (docs/leases.md): one :class:`~cadenza.executor.lease.LeaseKeeper` renews the
  leases of every run this process executes (one UPDATE per round, every lease/3) and stops
  a run whose cancel was requested or whose lease was lost; a **reaper** thread re-queues
  expired leases of any node every lease/3. At start, before anything is claimed, the node
  reclaims what a crash of this host left and settles the fires a stopped server recorded
  ahead (by ``on_missed``).
* **Retention** (docs/backup.md): the daily prune runs on the scheduler's leader.
* **Reload**: on a change of ``cadenza.toml`` / ``jobs.toml`` (checked every
  ``WATCH_SECONDS``) or :meth:`Node.request_reload` (SIGHUP). A file with errors is refused:
  its problems are logged and written as a CONFIG_CHANGED event at ERROR level, and the
  running configuration stays.
* **Stop** (:meth:`Node.stop`): no new claims; running runs finish (or, when the process is
  killed, are left RUNNING with a lease that a later start reclaims).

Windows: threads only; the CLI installs SIGINT/SIGTERM (and SIGHUP where it exists).
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import sqlalchemy as sa

from cadenza.clock import Clock
from cadenza.config.admission_limits import limits_from_loaded
from cadenza.config.loader import LoadedConfig
from cadenza.domain.admission import Limits, WaitRule, admit
from cadenza.domain.errors import ConfigError
from cadenza.domain.events import EventType, Level
from cadenza.executor.claimer import MIN_WORKERS as CLAIMER_MIN_WORKERS
from cadenza.executor.claimer import Chunk, Claimer, Stopped
from cadenza.executor.group_commit import GroupCommit
from cadenza.executor.isolation import STEP_THREADS
from cadenza.executor.lease import LeaseKeeper
from cadenza.executor.runner import Executor, Staged, Started, default_owner
from cadenza.executor.staging import CHUNKS, LATE, Stage
from cadenza.home import Home
from cadenza.scheduler.leader import leadership_for
from cadenza.scheduler.service import LOOKAHEAD, Scheduler
from cadenza.store import Store
from cadenza.store.boundary import Boundary
from cadenza.store.engine import sqlite_path
from cadenza.store.run_leases import REAP_BATCH, owner_parts

log = logging.getLogger("cadenza.node")

POLL_SECONDS = 1.0
STAGE_MIN_AHEAD = 0.1
"""Seconds before a due time under which its runs are not staged any more."""
CHAIN_THREADS = 2
"""Step threads woken per chunk of a staged burst to take its chained run starts."""
STAGE_START_WAIT = 10.0
"""Seconds the dispatcher waits for the step threads to start the runs of a stage."""
CHAIN_WAIT = 0.005
"""A chained run start not taken after this many seconds gets a thread of its own."""
STAGE_CANDIDATES = 5000
"""At most this many runs due at one time are staged (more: the ordinary path)."""
WATCH_SECONDS = 2.0
CANDIDATES_PER_DECISION = 200
PREFETCH = 1


@dataclass
class _Current:
    config: LoadedConfig
    executor: Executor
    limits: Limits
    retired: list[Executor] = field(default_factory=list)


class Node:
    """Everything of one server process but the HTTP server (see the module doc)."""

    def __init__(self, home: Home, config: LoadedConfig, store: Store, *, clock: Clock,
                 workers: int | None = None, scheduler: bool = True,
                 owner: str | None = None, claimer: bool | None = None) -> None:
        self.home = home
        self.store = store
        self.clock = clock
        self.owner = owner or default_owner()
        self.workers = workers or config.settings.workers.count
        self.stop_event = threading.Event()
        self._wake = threading.Event()
        self._reload = threading.Event()
        self._lock = threading.Lock()
        # Runs claimed ahead of a free worker (PREFETCH per worker) keep every worker busy
        # between two decisions; they hold their lease while they wait in the local queue.
        self._idle = self.workers * (1 + PREFETCH)
        self._refill_at = max(1, self._idle // 2)
        self._queue: queue.SimpleQueue[Started | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        # One group commit for the node: concurrent workers' step boundaries share commits,
        # and a run's end is written with the next write (a claim, a step start) or at idle.
        self.recorder = GroupCommit(store, on_end=self._run_ended)
        # Claimed runs (in the local queue or taken) whose first step is not entered yet.
        # While there
        # are some (a burst: a crowded minute claimed at once), a worker whose run ended
        # neither writes the queued run ends nor wakes the dispatcher: the Python of those
        # writes would delay the other runs' starts. The last run to enter its step wakes
        # the dispatcher, whose decision writes them (and the dispatcher polls anyway).
        self._starting = 0
        self._waiting = 0  # workers blocked on the local queue
        self._held_back = False
        self._jobs: dict[str, str] = {}
        """run id -> job id of runs whose end a worker queued, for the "ended" log line."""
        self._stage: Stage | None = None
        """The runs of the next crowded due time, staged (executor/staging.py)."""
        self.claimer = _claimer_for(store, config, self.workers, claimer)
        """The process that writes a stage's chunks (executor/claimer.py), or None."""
        # -- leases (executor/lease.py, docs/leases.md): one heartbeat for the node's runs.
        self.keeper = LeaseKeeper(store, lambda: self.config.settings.workers.lease,
                                  clock=clock)
        self.reaped = 0
        self._current = _Current(config, self._executor(config), limits_from_loaded(config))
        self._mtimes = self._stat()
        self.scheduler: Scheduler | None = None
        if scheduler:
            self.leader = leadership_for(store.engine)
            self.scheduler = Scheduler(store, config, clock=clock, leader=self.leader,
                                       lookahead=LOOKAHEAD)

    @property
    def config(self) -> LoadedConfig:
        return self._current.config

    def _executor(self, config: LoadedConfig) -> Executor:
        return Executor(self.store, config, owner=self.owner, recorder=self.recorder,
                        keeper=self.keeper)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the threads; returns at once."""
        def spawn(target: Callable[[], None], name: str) -> None:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

        # -- leases: take back what a crash of this host left, then reap every lease/3.
        try:
            self.reclaim_at_start()
        except Exception:  # the store may be down at start: the reaper loop retries
            log.exception("reclaiming runs left by a previous process failed")
        self.keeper.start()
        if self.claimer is not None:
            self.claimer.start()
        spawn(self._reap_loop, "cadenza-reaper")
        if self.scheduler is not None:
            # Fires recorded ahead by a server that stopped before their time follow the
            # missed-run policy; settled before the dispatcher may claim them.
            try:
                self.scheduler.settle_stale(self.clock.now())
            except Exception:
                log.exception("settling the fires recorded ahead by a previous process failed")
        if self.scheduler is not None:
            scheduler = self.scheduler
            spawn(lambda: scheduler.run_forever(self.stop_event, self.clock,
                                                on_tick=self._after_tick),
                  "cadenza-scheduler")
        spawn(self._dispatch_loop, "cadenza-dispatcher")
        for k in range(self.workers):
            spawn(self._work_loop, f"cadenza-worker-{k}")
        spawn(self._watch_loop, "cadenza-config-watch")
        # -- retention (cadenza.retention): the daily prune, on the scheduler's leader only.
        if self.scheduler is not None:
            from cadenza.retention import RetentionSweeper

            self.retention = RetentionSweeper(self.store, lambda: self.config.settings.retention,
                                              self.clock, leader=self.leader)
            spawn(lambda: self.retention.run_forever(self.stop_event), "cadenza-retention")

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming, let running runs finish (up to ``timeout``), then close."""
        self.stop_event.set()
        self._wake.set()
        self._stage = None
        gc.unfreeze()
        # The dispatcher first: a decision it is making hands its runs to the workers before
        # they are told to stop (a run whose step it launched must have a worker waiting).
        for thread in self._threads:
            if thread.name == "cadenza-dispatcher":
                thread.join(timeout)
        for _ in range(self.workers):
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout)
        self.recorder.flush()
        self.recorder.close()  # the group commit's own connection (PostgreSQL)
        self.keeper.stop()  # runs still going lose their lease and are re-queued elsewhere
        if self.claimer is not None:
            self.claimer.close()
        current = self._current
        for executor in [current.executor, *current.retired]:
            executor.close()
        if self.scheduler is not None and hasattr(self.leader, "close"):
            self.leader.close()

    # -- leases: reaping and reclaiming (store/leases.py) -------------------------------------

    def reap_once(self) -> int:
        """Re-queue the runs whose lease expired (any node's); returns how many were taken.
        Loops over batches of :data:`~cadenza.store.leases.REAP_BATCH` runs."""
        total = 0
        while True:
            batch = self.store.reap_expired_run_leases()
            total += len(batch)
            for got in batch:
                log.warning("run %s of %s recovered from %s (epoch %d): now %s", got.run_id,
                            got.job_id, got.old_owner, got.old_epoch, got.state.value)
            if len(batch) < REAP_BATCH:
                break
        if total:
            self.reaped += total
            self._wake.set()
        return total

    def reclaim_at_start(self) -> int:
        """What a previous ``cadenza serve`` on this host left RUNNING: runs whose lease
        expired, and runs held by a process of this host that no longer exists (or by this
        very host:pid, a previous incarnation: this process has claimed nothing yet), even
        before their lease expires. A live process of this host keeps its runs."""
        host, me = owner_parts(self.owner)

        def dead(owner: str) -> bool:
            their_host, pid = owner_parts(owner)
            if their_host != host or pid is None:
                return False
            return pid == me or not psutil.pid_exists(pid)

        total = 0
        while True:
            batch = self.store.reap_expired_run_leases(owner_like=_like_prefix(host) + ":%",
                                                   dead_owner=dead)
            total += len(batch)
            for got in batch:
                log.warning("run %s of %s reclaimed at start from %s: now %s", got.run_id,
                            got.job_id, got.old_owner, got.state.value)
            if len(batch) < REAP_BATCH:
                break
        self.reaped += total
        return total

    def _reap_loop(self) -> None:
        while not self.stop_event.wait(
                self.config.settings.workers.lease.total_seconds() / 3):
            try:
                self.reap_once()
            except Exception:  # the store may be down: try again next time
                log.exception("reaping expired leases failed")

    def request_reload(self) -> None:
        """Reload both files at the next occasion (SIGHUP)."""
        self._reload.set()
        self._wake.set()

    # -- dispatcher -----------------------------------------------------------------------

    def _after_tick(self, result: object) -> None:
        if getattr(result, "queued", None):
            self._wake.set()

    def dispatch_once(self, now: datetime) -> datetime | None:
        """One admission decision: claim what may start, note why the rest waits.

        Returns when a waiting run's time rule clears (None: it depends on runs ending).
        Runs staged for a due time that has come are claimed first (:meth:`_claim_stage`);
        fires recorded ahead are staged after the decision (:meth:`_stage_ahead`)."""
        stage = self._stage
        if stage is not None and now >= stage.due:
            self._stage = None
            self._claim_stage(stage, now)
        with self._lock:
            free = self._idle
        current = self._current

        coming = 0
        early_due: list[datetime] = []

        def decide(conn: sa.Connection) -> tuple[list[Started], datetime | None]:
            self.store.lock_admission(conn)
            # At a crowded due time every free worker gets a run from this one decision.
            candidates = self.store.queued_candidates(
                now, max(CANDIDATES_PER_DECISION, free), conn=conn)
            if not candidates:
                return [], None
            load = self.store.admission_load(now, budget_jobs=current.limits.budgeted_jobs(),
                                             conn=conn)
            decision = admit(candidates, current.limits, load, now, free)
            claimed: list[Started] = []
            if decision.admitted:
                ids = [c.run_id for c in decision.admitted]
                until = now + max(current.executor.lease_for(c.job_id)
                                  for c in decision.admitted)
                # Claim and record each run's first step start in this same transaction.
                claimed = current.executor.claim_and_start(conn, limit=len(ids),
                                                           lease_until=until, run_ids=ids)
            # "No free worker on this node" is this node's business of the moment, not the
            # run's: writing it for every queued run at every decision would cost a write
            # per run per decision. Such runs show no wait_reason.
            # Likewise a fire recorded ahead (scheduled_for still to come) is not waiting:
            # it is not due yet, and writing a reason and an event for each would double
            # the writes of a crowded minute.
            early = {c.run_id for c in candidates if c.queued_at > now}
            nonlocal coming
            coming = len(early)
            early_due.extend(c.not_before for c in candidates
                             if c.not_before is not None and c.not_before > now)
            self.store.set_wait_reasons(
                {run_id: why.text for run_id, why in decision.waiting.items()
                 if why.rule is not WaitRule.NODE_WORKERS
                 and not (why.rule is WaitRule.NOT_BEFORE and run_id in early)},
                conn=conn)
            return claimed, decision.next_check

        # No cyclic garbage collection during a decision and the launch of its runs: with
        # 1,000 runs claimed at once, the collections their allocations trigger (each one
        # walking the whole heap: the configuration, the threads) were 40 % of the claim.
        # Garbage is not lost, only collected after.
        collecting = gc.isenabled()
        gc.disable()
        try:
            next_check = self._decide_and_launch(decide, lambda: coming)
        finally:
            if collecting:
                gc.enable()
        if early_due:
            self._stage_ahead(min(early_due), now)
        return next_check

    # -- staged due times (executor/staging.py) ----------------------------------------------

    def _stage_ahead(self, due: datetime, now: datetime) -> None:
        """Stage the runs that will be due at ``due`` (fires recorded ahead), unless they
        are staged already or the time is too near."""
        ahead = (due - now).total_seconds()
        current = self._current
        stage = self._stage
        if ahead < STAGE_MIN_AHEAD or self.stop_event.is_set():
            return
        candidates = self.store.queued_candidates(due, STAGE_CANDIDATES)
        ready = [c for c in candidates if c.not_before is None or c.not_before <= due]
        if (stage is not None and stage.due == due and stage.executor is current.executor
                and len(stage.candidates) == len(ready)):
            return  # staged already, and nothing more is coming for that time
        with self._lock:
            free = min(self._idle, max(0, self._waiting - self._queue.qsize()))
        if free <= 0 or len(ready) >= STAGE_CANDIDATES:
            return
        load = self.store.admission_load(due, budget_jobs=current.limits.budgeted_jobs())
        lease = current.executor.lease_for("")
        left = (due - self.clock.now()).total_seconds()
        deadline = self.clock.monotonic() + left - STAGE_MIN_AHEAD / 2
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._stage = Stage.prepare(current.executor, current.limits, due, lease, ready,
                                        load, free, deadline)
            # What was just built lives until the due time: frozen, the collections that
            # its allocations are owed do not walk it (a full collection of this heap takes
            # tens of milliseconds, which would come just before the due time). Unfrozen
            # once the stage is claimed or dropped (not when staging failed: nothing to
            # unfreeze it then).
            gc.freeze()
        finally:
            if collecting:
                gc.enable()
        STEP_THREADS.warm(len(self._stage))
        if self.claimer is not None and len(self._stage) > CHUNKS[0]:
            self._stage.token = self.claimer.submit(
                [s.start for s in self._stage.staged.values()], current.executor.owner,
                self._stage.lease_until)
        self.store.checkpoint_wal()  # the burst's commits start with an empty log
        log.debug("staged %d of %d runs due at %s", len(self._stage), len(ready),
                  due.isoformat())

    def _claim_stage(self, stage: Stage, now: datetime) -> None:
        """Claim the staged runs, chunk by chunk, and start each chunk's first steps as soon
        as it is committed (see executor/staging.py); what is left goes the ordinary way."""
        if now - stage.due > LATE or stage.executor is not self._current.executor:
            gc.unfreeze()
            return
        begun: list[Started] = []  # appended by the step threads
        claimed = 0
        remote = stage.token != 0

        def hand(took: list[tuple[Staged, int]]) -> None:
            nonlocal claimed
            # Starts chained by the chunks before and still not taken get a thread each.
            STEP_THREADS.sweep(CHAIN_WAIT)
            with self._lock:
                self._idle -= len(took)
            at = stage.claimed_at or now
            claimed += len(took)
            # The step threads start the runs (lease, log, first step) and run their
            # first steps, while this thread (or the claimer) writes the next chunk.
            for staged, step_run_id in took:
                STEP_THREADS.chain(partial(_begin_staged, staged, step_run_id, at, begun))
            STEP_THREADS.wake(CHAIN_THREADS)

        collecting = gc.isenabled()
        gc.disable()
        try:
            while True:
                with self._lock:
                    left = min(self._idle, self._waiting - self._queue.qsize() - claimed)
                limit = min(stage.chunk_size(), left)
                if limit <= 0:
                    break
                took = self.recorder.call(partial(stage.claim, limit=limit))
                if not took:
                    STEP_THREADS.sweep(CHAIN_WAIT)
                    break
                chunks = None
                if remote and stage.version is not None and stage.order and not stage.dropped:
                    # After the node's first chunk, the claimer writes the next ones (told
                    # before this chunk's runs are handed out); what it leaves (a run
                    # changed) is claimed here, with every check.
                    remote = False
                    chunks = self._claim_remote(stage, left - len(took))
                hand(took)
                for took in chunks or ():
                    hand(took)
        finally:
            # Every staged run is started (or has a thread of its own to start it) before
            # the workers are woken; woken only then, they do not compete with the chunks'
            # claims and the steps' starts for the interpreter.
            until = time.monotonic() + STAGE_START_WAIT
            while len(begun) < claimed and time.monotonic() < until:
                time.sleep(0.001)
                STEP_THREADS.sweep(CHAIN_WAIT)
            STEP_THREADS.sweep()
            while len(begun) < claimed and time.monotonic() < until:
                time.sleep(0.001)
            if len(begun) < claimed:
                log.error("%d staged runs were not started within %.0fs; their leases will "
                          "expire and the reaper re-queue them", claimed - len(begun),
                          STAGE_START_WAIT)
            for started in begun:
                self._queue.put(started)
            if collecting:
                gc.enable()
            gc.unfreeze()
        if stage.dropped:
            log.info("staged runs due at %s: %s; %d claimed staged, the rest the ordinary way",
                     stage.due.isoformat(), stage.dropped, stage.claimed)

    def _claim_remote(self, stage: Stage,
                      limit: int) -> Iterator[list[tuple[Staged, int]]]:
        """Tell the claimer process to write the stage's next chunks, up to ``limit`` runs
        (executor/claimer.py); the iterator returned yields each chunk's runs as it
        commits."""
        assert self.claimer is not None and stage.version is not None
        reports = self.claimer.claim(
            stage.token, [s.run_id for s in stage.order], stage.version, limit,
            CHUNKS[min(stage.chunks, len(CHUNKS) - 1):], self.clock)
        return self._remote_chunks(stage, reports)

    def _remote_chunks(self, stage: Stage, reports: Iterator[Chunk | Stopped],
                       ) -> Iterator[list[tuple[Staged, int]]]:
        for report in reports:
            if isinstance(report, Chunk):
                took = stage.took(report.size, report.taken, report.at, report.version)
                if took:
                    yield took
            else:
                log.debug("claimer stopped at %d of %d staged runs: %s", stage.claimed,
                          stage.claimed + len(stage.order), report.why)

    def _decide_and_launch(
        self, decide: Callable[[sa.Connection], tuple[list[Started], datetime | None]],
        coming: Callable[[], int],
    ) -> datetime | None:
        # Through the group commit: run ends that workers queued are written in the same
        # transaction as this decision.
        claimed, next_check = self.recorder.call(decide)
        if claimed:
            with self._lock:
                self._idle -= len(claimed)
                waiting = max(0, self._waiting - self._queue.qsize())
            # As many runs as workers wait for one: start their first step from here, one
            # after the other, before any worker wakes (one thread wake per run on the way
            # to its step instead of three; each worker then waits for its run's step).
            launched = 0
            for started in claimed[:waiting]:
                try:
                    launched += started.launch()
                except Exception:  # the worker's go() tries again and reports it
                    log.exception("starting the first step of run %s failed", started.run_id)
            with self._lock:
                self._starting += len(claimed) - launched
            for started in claimed:
                self._queue.put(started)
        if coming():
            # Fires recorded ahead are due soon: start the step threads they will need now,
            # not at their due time (a thread start costs more than a no-op step).
            with self._lock:
                free = self._idle
            STEP_THREADS.warm(min(coming(), free))
        return next_check

    def _dispatch_loop(self) -> None:
        backoff = 1.0
        while not self.stop_event.is_set():
            self._wake.clear()
            if self._reload.is_set():
                self._reload.clear()
                self.reload()
            now = self.clock.now()
            try:
                next_check = self.dispatch_once(now)
                backoff = 1.0
            except Exception:  # the store may be down: log, back off, never die
                log.exception("dispatch failed (retrying in %.0fs)", backoff)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            timeout = POLL_SECONDS
            if next_check is not None:
                timeout = min(timeout, max((next_check - self.clock.now()).total_seconds(), 0))
            self._wake.wait(timeout)

    def _work_loop(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            item = self._queue.get()
            with self._lock:
                self._waiting -= 1
            if item is None:
                return
            run = item.tracker.run
            entered = item.tracker.launched is not None  # counted as entered at launch

            def entering() -> None:
                nonlocal entered
                if not entered:
                    entered = True
                    self._entered()

            self._jobs[run.id] = run.job_id
            try:
                outcome = item.go(entering)
                # A queued end is logged when it is written (_run_ended), not before.
                if not outcome.queued_end and self._jobs.pop(run.id, None) is not None:
                    log.info("run %s of %s ended %s", run.id, run.job_id,
                             outcome.state.value if outcome.state else "(lost)")
            except Exception:  # a store failure mid-run: its lease will expire
                self._jobs.pop(run.id, None)
                log.exception("run %s of %s failed in the worker", run.id, run.job_id)
            finally:
                entering()  # a run that ended before any step started
                with self._lock:
                    self._idle += 1
                    refill = self._idle >= self._refill_at
                    burst = self._starting > 0
                    if burst:
                        self._held_back = True
                if not burst:
                    self._after_run(refill)

    def _after_run(self, refill: bool) -> None:
        """A worker's run ended and no run is about to start: write, wake the dispatcher."""
        if self._queue.empty():
            try:
                self.recorder.flush()  # going idle: write the queued run ends now
            except Exception:
                log.exception("writing the end of finished runs failed")
        # A decision costs a write transaction and a read of the queue: while claimed
        # runs still wait in the local queue, wake the dispatcher once half the
        # slots are free rather than at every run end; at once when none waits.
        if refill or self._queue.empty():
            self._wake.set()

    def _entered(self) -> None:
        """A run taken from the local queue enters its first step (or ended before)."""
        with self._lock:
            self._starting -= 1
            catch_up = self._starting == 0 and self._held_back
            if catch_up:
                self._held_back = False
        if catch_up:  # the burst has started: its decision writes what was held back
            self._wake.set()

    def _run_ended(self, boundary: Boundary, applied: bool, error: BaseException | None) -> None:
        """The group commit wrote (or could not write) the end a worker queued."""
        job = self._jobs.pop(boundary.run_id, "?")
        if applied:
            state = boundary.run_end.state.value if boundary.run_end else "?"
            log.info("run %s of %s ended %s", boundary.run_id, job, state)
        elif error is not None:
            log.warning("run %s of %s: its end was not recorded (%s); its lease will expire "
                        "and the run be recovered", boundary.run_id, job, error)
        else:
            log.warning("run %s of %s ended (lost): its end was refused, the run's lease "
                        "was lost (another holder owns the run now)", boundary.run_id, job)

    # -- configuration ---------------------------------------------------------------------

    def _stat(self) -> tuple[float, float]:
        def mtime(path: Path) -> float:
            try:
                return path.stat().st_mtime
            except OSError:
                return 0.0

        return mtime(self.home.config_file), mtime(self.home.jobs_file)

    def _watch_loop(self) -> None:
        while not self.stop_event.wait(WATCH_SECONDS):
            stamp = self._stat()
            if stamp != self._mtimes:
                self._mtimes = stamp
                self.request_reload()

    def reload(self) -> bool:
        """Load both files again; apply them if valid, else keep the running config.

        Writes CONFIG_CHANGED: the jobs added, removed and changed, or (level ERROR) the
        problems that made the reload fail. Returns whether the new config was applied."""
        try:
            new = self.home.load_config()
        except ConfigError as exc:
            problems = [str(p) for p in exc.problems]
            for line in problems:
                log.error("config reload refused: %s", line)
            self.store.append_event(EventType.CONFIG_CHANGED,
                                    f"reload refused: {len(problems)} problem(s); the running "
                                    "configuration is kept", level=Level.ERROR,
                                    payload={"problems": problems}, actor="reload")
            return False
        old = self._current
        old_jobs = {k: v.model_dump(mode="json") for k, v in old.config.jobs.items()}
        new_jobs = {k: v.model_dump(mode="json") for k, v in new.jobs.items()}
        diff = {
            "added": sorted(new_jobs.keys() - old_jobs.keys()),
            "removed": sorted(old_jobs.keys() - new_jobs.keys()),
            "changed": sorted(k for k in new_jobs.keys() & old_jobs.keys()
                              if new_jobs[k] != old_jobs[k]),
        }
        self._current = _Current(new, self._executor(new), limits_from_loaded(new),
                                 [*old.retired, old.executor])
        if self.scheduler is not None:
            self.scheduler.reload(new, self.clock.now())
        self.store.append_event(EventType.CONFIG_CHANGED, "configuration reloaded",
                                payload=diff, actor="reload")
        log.info("configuration reloaded: %s", diff)
        self._wake.set()
        return True


def _begin_staged(staged: Staged, step_run_id: int, at: datetime,
                  begun: list[Started]) -> None:
    """On a step thread: start a staged run that was just claimed, hand it to the node's
    workers (``begun``) and run its first step here. Whatever fails, the run reaches a
    worker (whose ``go()`` starts the step the ordinary way if it was not)."""
    body = None
    try:
        started, body = staged.begin_here(step_run_id, at)
    except Exception:
        log.exception("starting staged run %s failed", staged.run_id)
        started = staged.fallback(step_run_id)
    begun.append(started)
    if body is not None:
        body()


def _claimer_for(store: Store, config: LoadedConfig, workers: int,
                 wanted: bool | None) -> Claimer | None:
    """The claimer process of a node (not started), when it is wanted (default: a SQLite
    file store and at least :data:`~cadenza.executor.claimer.MIN_WORKERS` workers)."""
    url = store.engine.url
    if wanted is False or store.dialect != "sqlite" or sqlite_path(url) is None:
        return None
    if wanted is None and workers < CLAIMER_MIN_WORKERS:
        return None
    return Claimer(url.render_as_string(hide_password=False),
                   config.settings.store.sqlite_synchronous)


def _like_prefix(text: str) -> str:
    """``text`` with the LIKE wildcards escaped away (a host name has none, but be sure)."""
    return text.replace("%", "_").replace("\\", "_")
