"""The dispatcher and the workers of a node: admission, claims, staged due times.

::

    scheduler ──creates runs──▶ store ◀──claims── dispatcher thread ──Started──▶ workers
                                                   (admission: one decision per
                                                    write transaction)

* The **dispatcher** decides, in one write transaction, which QUEUED runs may start
  (:func:`~cadenza.domain.admission.admit`: caps, budgets, windows, ``not_before``, free
  workers on this node), claims them (QUEUED → RUNNING, a new lease epoch each) and writes
  the ``wait_reason`` of the others. It wakes when the scheduler created runs, when a worker
  finished (at once if no claimed run waits in the local queue, else once half the slots
  are free), when a waiting run's time comes (precisely at the ``not_before`` of fires the
  scheduler recorded ahead: then one decision claims as many as there are free slots), and
  at least every :data:`POLL_SECONDS` of the node's clock (runs enqueued by other
  processes: ``cadenza run``, other nodes). A fire recorded ahead gets no ``wait_reason``
  before its time. Reloads requested of the node are applied on this thread, between two
  decisions.
* **Staged due times** (:mod:`cadenza.executor.staging`, docs/scheduling.md): fires the
  scheduler recorded ahead are prepared before their time (admission, trackers, first
  steps, the claim's rows) and claimed in chunks at it; the step threads start each
  chunk's runs (lease, log, first step: jobs chained on a few threads, see
  :class:`~cadenza.executor.isolation.StepThreads`) while this thread writes the next
  chunk; the workers are handed those runs once the whole stage is started. The chunks
  claim for the free workers; the other runs due then are staged too, and the decisions
  after the chunks claim them with what was prepared (:class:`Prepared`). Cyclic GC is
  frozen out of what was staged until it is claimed or dropped. A node with many workers
  on a SQLite file has the chunks after the first written by its **claimer process**
  (:mod:`cadenza.executor.claimer`), which has an interpreter lock of its own.
* **Workers** run claimed runs with the :class:`~cadenza.executor.runner.Executor` of the
  configuration that was current when the run was claimed. For as many claimed runs as
  workers wait, the dispatcher starts the first step itself (``Started.launch``), one run
  after the other, before any worker wakes; each worker then only waits for its run's step
  (one thread wake per run on the way to the step, not three). While claimed runs have not
  entered their first step yet, a worker whose run ended neither writes the queued run ends
  nor wakes the dispatcher; the last run to enter wakes it, and its decision writes them.
  A run's "ended" line is logged when its end is written. Cyclic garbage collection is
  paused during a decision and its launches.
* **Stop** (the service's stack): the dispatcher first (a decision it is making hands its
  runs to the workers before they are told to stop), then the workers drain the local queue
  and finish their runs, then the group commit writes what they queued.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from datetime import datetime
from functools import partial
from typing import Any

import sqlalchemy as sa

from cadenza.clock import Clock, SystemClock
from cadenza.domain.admission import WaitRule, admit
from cadenza.executor.claimer import Chunk, Claimer, Stopped
from cadenza.executor.group_commit import Ended, GroupCommit
from cadenza.executor.isolation import STEP_THREADS, TakenOver
from cadenza.executor.runner import Staged, Started
from cadenza.executor.staging import CHUNKS, LATE, Begun, Prepared, Stage, begin_staged
from cadenza.executor.steprun import Attempt
from cadenza.executor.tracking import RunOutcome
from cadenza.lifecycle import Lifecycle
from cadenza.node.config import ConfigHolder, Current
from cadenza.resources.pools import leaser_of
from cadenza.store.protocols import DispatchStore

log = logging.getLogger("cadenza.node")

POLL_SECONDS = 1.0
STAGE_MIN_AHEAD = 0.1
"""Seconds before a due time under which its runs are not staged any more."""
STAGE_MAX_AHEAD = 10.0
"""Seconds before a due time beyond which its runs are not staged yet: staging is for the
fires the scheduler records ahead (3 s); a run held by ``not_before`` for an hour is staged
in its last seconds, not at every decision of the hour (each decision re-staged such runs
when they outnumbered the free workers, and checkpointed the WAL: W6, docs/benchmarks.md)."""
CHAIN_THREADS = 2
"""Step threads woken per chunk of a staged burst to take its chained run starts."""
STAGE_START_WAIT = 10.0
"""Seconds the dispatcher waits for the step threads to start the runs of a stage."""
STAGE_START_POLL = 0.001
"""Seconds between two sweeps of the chained starts while the dispatcher waits for them."""
CHAIN_WAIT = 0.005
"""A chained run start not taken after this many seconds gets a thread of its own."""
STAGE_CANDIDATES = 20_000
"""At most this many runs due at one time are staged (more: the ordinary path). Staging
stops at its deadline anyway (about 0.1 ms per run: 10,000 runs take about a second of
the look-ahead); those not staged by then are claimed the ordinary way."""
CANDIDATES_PER_DECISION = 200
"""Queued runs a full decision reads (and gives a wait reason), at least the free slots."""
QUICK_CANDIDATES_EXTRA = 16
"""A quick decision reads the free slots' worth of queued runs and this many more: enough
for runs held by their own rules (a capped job's backlog) not to leave a slot empty, and
when they do, the same decision reads the full window. With a backlog, reading and judging
200 runs to start one was most of a run's cost; reading 4 per free slot, a quick decision
judged 4 runs for each one it claimed (docs/benchmarks.md). The others' wait reasons are
the full decisions' business, once a second."""
FULL_DECISION_SECONDS = 1.0
"""A full decision at least this often: the wait reasons of runs deep in a backlog stay
fresh, and fires recorded ahead behind it are staged in time."""
#: How long a wait reason this node wrote is taken as still written (Dispatcher._new_reasons).
REASON_MEMO_SECONDS = 30.0
REASON_MEMO_SIZE = 20_000
INLINE_STEPS = True
"""Workers run their runs' thread steps themselves (:meth:`ThreadStep.run_here`): a step
handed to a step thread and its worker woken at its end cost two thread switches per run,
a third of a short run's time. A step that runs long has its run taken over by a new
worker thread (:meth:`Dispatcher._take_over`), which waits for it as before."""
PREFETCH = 1
"""Runs claimed ahead per worker (they wait in the node's local queue, their lease held and
their first step recorded as started), so that a worker finds its next run at once."""
PREFETCH_SHORT = 7
"""Runs claimed ahead per worker while this node's runs are short (:data:`SHORT_RUN`): a
decision (a write transaction, the queue read, admission) then claims about four times as
many runs, and a run waits in the local queue for a few of those short runs at most."""
SHORT_RUN = 0.02
"""Seconds: runs whose recent mean duration on this node is below this are short; above
:data:`LONG_RUN` they are not any more (a gap between the two, so that the depth does not
flap)."""
LONG_RUN = 0.05
PACE_WEIGHT = 0.05
"""Weight of the latest run in the moving mean of run durations."""
_REAL = SystemClock()
"""Runs' durations are measured in real time whatever the node's clock: how long a run
claimed ahead waits in the local queue is real."""
TAKE_WAIT = 0.002
"""Seconds a decision waits at most, before it counts its free slots, for idle workers to
take the runs the previous decision left in the local queue (:func:`let_workers_take`)."""
TAKE_POLL = 0.0002
"""Seconds between two looks at the local queue during that wait."""


def hold_limit(workers: int, cap: int, everyone: int) -> int:
    """The most runs a node of ``workers`` workers holds (running, and claimed ahead in its
    local queue) under a cluster cap of ``cap`` when the live nodes have ``everyone``
    workers together (this node's included): its workers, and its share, in proportion to
    its workers, of the cap's room beyond every node's workers. A node alone may fill the
    cap; the cap itself is admission's to keep (``cap - held`` beside this)."""
    everyone = max(everyone, workers, 1)
    return workers + max(0, cap - everyone) * workers // everyone


def let_workers_take(local: queue.SimpleQueue[Any], waiting: Callable[[], int],
                     seconds: float, clock: Clock = _REAL) -> None:
    """Return once the local queue is empty or no worker waits for it (at most ``seconds``).

    A decision hands its runs to the local queue, and a run ending while a decision is
    being written wakes the dispatcher for the next one, which then starts at once. Its
    free slots are counted before the idle workers have even taken the runs just handed
    out: it claims the few that ended in between, and the decisions settle at half the
    runs each (a run's cost a third higher on PostgreSQL, where a decision is about ten
    round trips, docs/benchmarks.md). Waiting for the workers to take them (microseconds for
    short runs) lets the decision count the slots they free. A worker busy with a run takes
    nothing: then there is nothing to wait for. Real time, whatever the node's clock: the
    workers' threads are."""
    if local.empty() or not waiting():
        return
    deadline = clock.monotonic() + seconds
    while not local.empty() and waiting() and clock.monotonic() < deadline:
        clock.sleep(TAKE_POLL)


def quick_window(free: int, window: int) -> int:
    """How many queued runs a quick decision with ``free`` free slots reads (at most
    ``window``, a full decision's): :data:`QUICK_CANDIDATES_EXTRA` beyond the free slots."""
    return min(window, free + QUICK_CANDIDATES_EXTRA)


class Dispatcher:
    """The dispatcher thread and the worker threads of a node (see the module doc). A
    service: started last of a node's services, so stopped first."""

    name = "dispatcher"

    def __init__(self, store: DispatchStore, holder: ConfigHolder, recorder: GroupCommit,
                 life: Lifecycle, *, workers: int, claimer: Claimer | None,
                 held_back: Callable[[], bool] = lambda: False,
                 cluster_workers: Callable[[], int] | None = None) -> None:
        """``held_back``: whether the node may take no new run now (its data directory
        cannot be written, :mod:`cadenza.node.local_disk`): its workers then count as busy
        (the runs it holds go on, nothing is staged or claimed). ``cluster_workers``: the
        workers of every node serving the store, this one's included (default: this
        node's alone), which bound its share of the cap (:func:`hold_limit`)."""
        self.store = store
        self.held_back = held_back
        self.cluster_workers: Callable[[], int] = cluster_workers or (lambda: workers)
        self.holder = holder
        self.recorder = recorder
        self.life = life
        self.clock = life.clock
        self.stop_event = life.stopping
        self.workers = workers
        self.claimer = claimer
        """The process that writes a stage's chunks (executor/claimer.py), or None."""
        self._wake = life.wake_on_stop(threading.Event())
        self.on_store_change: list[Callable[[], object]] = []
        """Called when an idle poll finds something committed to a SQLite store since the
        previous poll (by this process or another): the node's sender wakes."""
        self._lock = threading.Lock()
        # Runs claimed ahead of a free worker (PREFETCH per worker, PREFETCH_SHORT while
        # runs are short) keep every worker busy between two decisions; they hold their
        # lease while they wait in the local queue.
        self._slots = self.workers * (1 + PREFETCH)
        self._idle = self._slots
        self._refill_at = max(1, self._idle // 2)
        self._pace: float | None = None
        """Moving mean of the real duration of this node's runs (seconds), or None."""
        self._queue: queue.SimpleQueue[Started | None] = queue.SimpleQueue()
        # The group commit of the node: concurrent workers' step boundaries share commits,
        # and a run's end is written with the next write (a claim, a step start) or at idle.
        recorder.on_end = self._runs_ended
        # Claimed runs (in the local queue or taken) whose first step is not entered yet.
        # While there are some (a burst: a crowded minute claimed at once), a worker whose
        # run ended neither writes the queued run ends nor wakes the dispatcher: the Python
        # of those writes would delay the other runs' starts. The last run to enter its step
        # wakes the dispatcher, whose decision writes them (and the dispatcher polls anyway).
        self._starting = 0
        self._waiting = 0  # workers blocked on the local queue
        self._held_back = False
        self._threads: set[threading.Thread] = set()
        """The worker threads (a thread that took a run over replaces the run's first)."""
        self._takeovers = 0  # runs taken over so far (the takers' names count them)
        self._jobs: dict[str, str] = {}
        """run id -> job id of runs whose end a worker queued, for the "ended" log line."""
        self._stage: Stage | None = None
        """The runs of the next crowded due time, staged (executor/staging.py)."""
        self._prepared = Prepared()
        """The runs of the last staged due time that its chunks did not claim."""
        self._full_at = 0.0
        """Monotonic time of the next full decision (FULL_DECISION_SECONDS)."""
        self._reasons: dict[str, tuple[str | None, float]] = {}
        """run id -> (wait reason, monotonic time) this node wrote (see _new_reasons)."""
        holder.on_request(self.wake)
        holder.on_reload(lambda config, now: self.wake())

    @property
    def _current(self) -> Current:
        return self.holder.current

    def wake(self) -> None:
        """Make a decision now (runs were created, re-queued, or a reload was applied)."""
        self._wake.set()

    def holds_runs(self) -> bool:
        """Whether this node holds runs: claimed, running, or in its local queue."""
        with self._lock:
            return self._idle < self._slots

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, stack: ExitStack) -> None:
        workers = ExitStack()
        workers.callback(self._join_workers)
        for k in range(self.workers):
            self._spawn_worker(f"cadenza-worker-{k}")
        # Stopped in reverse: the dispatcher first (a decision it is making hands its runs
        # to the workers before they are told to stop: a run whose step it launched must
        # have a worker waiting), then the workers finish and drain, then what they queued
        # is written.
        stack.callback(self.recorder.flush)
        stack.push(workers)
        stack.callback(self.release_workers)
        self.life.spawn(stack, self._dispatch_loop, "cadenza-dispatcher")
        stack.callback(self._drop_stage)

    def _drop_stage(self) -> None:
        self._stage = None
        self._prepared = Prepared()
        gc.unfreeze()

    def close(self) -> None:
        """Drop a stage still waiting for its due time and release every worker (also
        those a test started by hand on a node it never started)."""
        self._drop_stage()
        self.release_workers()

    def release_workers(self) -> None:
        """Tell every worker to return once the local queue is drained."""
        for _ in range(self.workers):
            self._queue.put(None)

    # -- dispatcher -----------------------------------------------------------------------

    def dispatch_once(self, now: datetime) -> datetime | None:
        """One admission decision: claim what may start, note why the rest waits.

        Returns when a waiting run's time rule clears (None: it depends on runs ending).
        Runs staged for a due time that has come are claimed first (:meth:`_claim_stage`);
        fires recorded ahead are staged after the decision (:meth:`_stage_ahead`)."""
        # The runs the previous decision handed out first (not those this one's stage
        # claim hands out: they are this decision's).
        let_workers_take(self._queue, lambda: self._waiting, TAKE_WAIT)
        stage = self._stage
        if stage is not None and now >= stage.due:
            self._stage = None
            self._claim_stage(stage, now)
        current = self._current
        with self._lock:
            # Never more than the cluster's cap allows beside what this node holds: a slot
            # beyond it (a run claimed ahead) is this node's business, and asking for it
            # gave every run of a backlog a "max_concurrent_runs reached" reason and event
            # on its way (16 workers and the default cap of 16).
            held = self._slots - self._idle
            cap = current.limits.max_concurrent_runs
            # With other nodes, runs claimed ahead take this node's share of the cap's
            # room beyond every node's workers, no more: one node's local queue filling
            # the cap left another's workers idle, its decisions refused by the cap.
            limit = hold_limit(self.workers, cap, self.cluster_workers())
            free = max(0, min(self._idle, cap - held, limit - held))
        if free and self.held_back():
            free = 0  # as if every worker were busy: no claim, no wait reason written

        coming = 0
        early_due: list[datetime] = []

        # At a crowded due time every free worker gets a run from this one decision.
        window = max(CANDIDATES_PER_DECISION, free)
        full = self.clock.monotonic() >= self._full_at
        quick = window if full else quick_window(free, window)

        def decide(conn: sa.Connection) -> tuple[list[Started], datetime | None]:
            nonlocal full
            # The admission lock and the first read (PostgreSQL: with the running runs)
            # in one round trip.
            read, running = self.store.open_decision(conn, now, quick)
            pools = leaser_of(self.store)
            if pools is not None:
                pools.watch(conn, now)  # members freed by other processes, at most 1/s
            load = None
            size = quick
            while True:
                # Runs the pools refused are left alone until a member comes back (here,
                # or elsewhere: the watch) or their cooldown ends: no claim and give-back
                # per blocked run per decision.
                candidates = read if pools is None else [
                    c for c in read if pools.may_try(c.run_id, now)]
                if not candidates and len(read) < size:
                    return [], None if pools is None else pools.next_recheck()
                if load is None:
                    load = self.store.admission_load(
                        now, budget_jobs=current.limits.budgeted_jobs(), conn=conn,
                        running=running)
                decision = admit(candidates, current.limits, load, now, free)
                # A quick read that did not fill the free slots, with more runs queued
                # behind it: judge the full window.
                if size >= window or len(read) < size or len(decision.admitted) >= free:
                    break
                size, full = window, True
                read = self.store.queued_candidates(now, size, conn=conn)
            if not candidates:
                return [], None if pools is None else pools.next_recheck()
            claimed: list[Started] = []
            if decision.admitted:
                ids = [c.run_id for c in decision.admitted]
                for run_id in ids:  # a claim clears the reason: its next one is written
                    self._reasons.pop(run_id, None)
                until = now + max(current.executor.lease_for(c.job_id)
                                  for c in decision.admitted)
                # Claim and record each run's first step start in this same transaction:
                # those of a crowded due time staged ahead with what was prepared for them.
                prepared = self._prepared  # (a stop may drop it meanwhile: close())
                staged = prepared.take(ids, current.executor, now)
                if staged:
                    claimed = prepared.claim(conn, staged, now)
                    done = {s.run_id for s in staged}
                    ids = [run_id for run_id in ids if run_id not in done]
                if ids:
                    claimed += current.executor.claim_and_start(
                        conn, limit=len(ids), lease_until=until, run_ids=ids)
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
            # Likewise the cluster's cap while every worker of this node has a run (or
            # this node's own runs fill the cap): what the cap refused were runs to claim
            # ahead, which would wait for this node's workers anyway. A run refused by the
            # cap while a worker of this node has nothing to do gets the reason.
            mine = {WaitRule.NODE_WORKERS} | (
                {WaitRule.MAX_CONCURRENT_RUNS}
                if held + len(decision.admitted) >= min(cap, self.workers) else set())
            self.store.set_wait_reasons(self._new_reasons(
                {run_id: why.text for run_id, why in decision.waiting.items()
                 if why.rule not in mine
                 and not (why.rule is WaitRule.NOT_BEFORE and run_id in early)}),
                conn=conn)
            recheck = None if pools is None else pools.next_recheck()
            if recheck is not None and (decision.next_check is None
                                        or recheck < decision.next_check):
                return claimed, recheck
            return claimed, decision.next_check

        if full:
            self._full_at = self.clock.monotonic() + FULL_DECISION_SECONDS
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
        elif self._stage is None and self._prepared.until is not None and (
                not self._prepared or now >= self._prepared.until):
            self._prepared = Prepared()  # used up or expired: what it kept may be collected
            gc.unfreeze()
        return next_check

    def _new_reasons(self, reasons: dict[str, str | None]) -> dict[str, str | None]:
        """The wait reasons of ``reasons`` that this node did not write in the last
        REASON_MEMO_SECONDS. A decision reads the queued runs again, and every run held
        (by ``not_before``, a limit, a pool) gets the same reason as at the decision before:
        reading each one's row to find nothing to write was most of a decision with a few
        hundred runs waiting (W6, docs/benchmarks.md). After that time a reason is checked
        against the row again (another node, or the run's own change, may have replaced
        it)."""
        now = self.clock.monotonic()
        memo = self._reasons
        if len(memo) > REASON_MEMO_SIZE:
            memo.clear()
        fresh = {}
        for run_id, text in reasons.items():
            known = memo.get(run_id)
            if known is None or known[0] != text or now - known[1] > REASON_MEMO_SECONDS:
                fresh[run_id] = text
                memo[run_id] = (text, now)
        return fresh

    # -- staged due times (executor/staging.py) ----------------------------------------------

    def _stage_ahead(self, due: datetime, now: datetime) -> None:
        """Stage the runs that will be due at ``due`` (fires recorded ahead), unless they
        are staged already or the time is too near."""
        ahead = (due - now).total_seconds()
        current = self._current
        stage = self._stage
        if not STAGE_MIN_AHEAD <= ahead <= STAGE_MAX_AHEAD or self.stop_event.is_set():
            return
        candidates = self.store.queued_candidates(due, STAGE_CANDIDATES)
        ready = [c for c in candidates if c.not_before is None or c.not_before <= due]
        if (stage is not None and stage.due == due and stage.executor is current.executor
                and len(stage.candidates) == len(ready)):
            return  # staged already, and nothing more is coming for that time
        with self._lock:
            free = min(self._idle, max(0, self._waiting - self._queue.qsize()))
        if free <= 0 or len(ready) >= STAGE_CANDIDATES or self.held_back():
            return
        load = self.store.admission_load(due, budget_jobs=current.limits.budgeted_jobs())
        lease = current.executor.lease_for("")
        left = (due - self.clock.now()).total_seconds()
        deadline = self.clock.monotonic() + left - STAGE_MIN_AHEAD / 2
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._stage = Stage.prepare(current.executor, current.limits, due, lease, ready,
                                        load, free, deadline, earlier=stage)
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
                [s.start for s in self._stage.order], current.executor.owner,
                self._stage.lease_until)
        self.store.checkpoint_wal()  # the burst's commits start with an empty log
        log.debug("staged %d of %d runs due at %s", len(self._stage), len(ready),
                  due.isoformat())

    def _claim_stage(self, stage: Stage, now: datetime) -> None:
        """Claim the staged runs, chunk by chunk, and start each chunk's first steps as soon
        as it is committed (see executor/staging.py); the staged runs left are claimed by
        the decisions after (:class:`Prepared`), the others the ordinary way."""
        current = stage.executor is self._current.executor
        try:
            if now - stage.due <= LATE and current and not self.held_back():
                self._claim_chunks(stage, now)
        finally:
            self._prepared = Prepared(stage if current else None)
            if not self._prepared:
                gc.unfreeze()  # else once they are claimed or dropped (dispatch_once)

    def _claim_chunks(self, stage: Stage, now: datetime) -> None:
        begun = Begun()  # appended by the step threads
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
                STEP_THREADS.chain(partial(begin_staged, staged, step_run_id, at, begun))
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
            polls = round(STAGE_START_WAIT / STAGE_START_POLL)
            while polls > 0 and not begun.wait(claimed, STAGE_START_POLL):
                polls -= 1
                STEP_THREADS.sweep(CHAIN_WAIT)
            STEP_THREADS.sweep()
            begun.wait(claimed, polls * STAGE_START_POLL)
            if len(begun) < claimed:
                log.error("%d staged runs were not started within %.0fs; their leases will "
                          "expire and the reaper re-queue them", claimed - len(begun),
                          STAGE_START_WAIT)
            for started in begun:
                self._queue.put(started)
            if collecting:
                gc.enable()
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
                # Workers run their steps themselves (INLINE_STEPS): none is launched here.
                waiting = 0 if INLINE_STEPS else max(0, self._waiting - self._queue.qsize())
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
            STEP_THREADS.warm(max(0, min(coming(), free)))
        return next_check

    def _idle_poll(self) -> bool:
        """Whether a poll (no wake since the last decision) finds nothing to decide: no run
        queued (by this process or another), no run end waiting to be written, no stage
        (nor staged runs left by one, dropped by the first decision after their time).
        A read, where a decision is a write transaction: an idle node makes no write."""
        return (self._stage is None and self._prepared.until is None
                and not self.recorder.pending() and not self._queue_watch.any_queued())

    def _dispatch_loop(self) -> None:
        self._queue_watch = self.store.queue_watch(on_queued=self.wake,
                                                   on_change=self._store_changed)
        try:
            self._dispatch_until_stopped()
        finally:
            self._queue_watch.close()

    def _store_changed(self) -> None:
        """An idle poll found something committed to the store since the previous one."""
        for listener in self.on_store_change:
            listener()

    def _dispatch_until_stopped(self) -> None:
        backoff = 1.0
        polled = False  # the first pass decides
        while not self.stop_event.is_set():
            self._wake.clear()
            self.holder.look_at_files()  # the config files' watch (at most every 2 s)
            if self.holder.take_request():
                self.holder.reload()
            now = self.clock.now()
            try:
                next_check = None if polled and self._idle_poll() else \
                    self.dispatch_once(now)
                backoff = 1.0
            except Exception:  # the store may be down: log, back off, never die
                log.exception("dispatch failed (retrying in %.0fs)", backoff)
                self.life.pause(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            timeout = POLL_SECONDS
            if next_check is not None:
                timeout = min(timeout, max((next_check - self.clock.now()).total_seconds(), 0))
            polled = not self.clock.wait(self._wake, timeout)

    def _work_loop(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            item = self._queue.get()
            with self._lock:
                self._waiting -= 1
            if item is None:
                return
            if not self._serve(item, item.go):
                return  # taken over: this thread is its step's, and ends with it

    def _serve(self, item: Started, go: Callable[[Callable[[], None]], RunOutcome],
               began: float | None = None) -> bool:
        """Run ``item`` with ``go`` (its go, or its go_on) to its end and count it; False
        when another thread took the run over (see :meth:`_take_over`)."""
        run = item.tracker.run
        entered = item.tracker.launched is not None  # counted as entered at launch
        if INLINE_STEPS:
            item.tracker.takeover = partial(self._take_over, item, threading.current_thread(),
                                            _REAL.monotonic() if began is None else began)

        def entering() -> None:
            nonlocal entered
            if not entered:
                entered = True
                self._entered()

        self._jobs[run.id] = run.job_id
        began = _REAL.monotonic() if began is None else began
        taken = False
        try:
            outcome = go(entering)
            # A queued end is logged when it is written (_runs_ended), not before.
            if not outcome.queued_end and self._jobs.pop(run.id, None) is not None:
                log.info("run %s of %s ended %s", run.id, run.job_id,
                         outcome.state.value if outcome.state else "(lost)")
        except TakenOver:
            taken = True
        except Exception:  # a store failure mid-run: its lease will expire
            self._jobs.pop(run.id, None)
            log.exception("run %s of %s failed in the worker", run.id, run.job_id)
        finally:
            if not taken:
                self._counted(entering, began)
        return not taken

    def _counted(self, entering: Callable[[], None], began: float) -> None:
        entering()  # a run that ended before any step started
        took = _REAL.monotonic() - began
        with self._lock:
            self._idle += 1
            self._paced(took)
            refill = self._idle >= self._refill_at
            burst = self._starting > 0
            if burst:
                self._held_back = True
        if not burst:
            self._after_run(refill)

    def _take_over(self, item: Started, worker: threading.Thread, began: float,
                   attempt: Attempt, step_run_id: int) -> None:
        """The step that ``worker`` runs itself runs long (called by the step watch): a new
        worker thread takes the run over, waits for the step (its deadline, its ticks,
        its log lines written as it runs) and goes on with the run, then serves the
        local queue in ``worker``'s place; ``worker`` ends once the step returns."""
        with self._lock:
            self._takeovers += 1
            name = f"{worker.name.partition('+')[0]}+{self._takeovers}"  # cadenza-worker-0+1
        thread = threading.Thread(target=self._resume, args=(item, began, attempt, step_run_id),
                                  name=name, daemon=True)
        # Added and started under the lock: a stop joins what it reads from ``_threads``
        # under it, and joining a thread whose start() has not returned raises (a node
        # stopped while a takeover began failed its stop). start() returns once the
        # thread runs, before its target asks for the lock.
        with self._lock:
            self._threads.add(thread)
            self._threads.discard(worker)
            try:
                thread.start()
            except BaseException:
                self._threads.discard(thread)
                self._threads.add(worker)
                raise

    def _resume(self, item: Started, began: float, attempt: Attempt, step_run_id: int) -> None:
        if self._serve(item, lambda _entering: item.go_on(attempt, step_run_id), began):
            self._work_loop()

    def _spawn_worker(self, name: str) -> None:
        thread = threading.Thread(target=self._work_loop, name=name, daemon=True)
        with self._lock:  # as in _take_over: a stop never joins a thread not started
            self._threads.add(thread)
            try:
                thread.start()
            except BaseException:
                self._threads.discard(thread)
                raise

    def _join_workers(self) -> None:
        """Wait for the worker threads (up to the join timeout each), those that took runs
        over included, not those left with a step that runs long (abandoned at its
        deadline, as a step thread)."""
        joined: set[threading.Thread] = set()
        while True:
            with self._lock:
                left = [t for t in self._threads if t not in joined]
            if not left:
                return
            for thread in left:
                self.life.join(thread)
                joined.add(thread)

    def _paced(self, took: float) -> None:
        """Count a run that took ``took`` seconds (real time: how long a run claimed ahead
        waits is real) in the moving mean, and set how many runs are claimed ahead per
        worker from it (:data:`PREFETCH_SHORT` while runs are short). Under ``_lock``."""
        pace = took if self._pace is None else self._pace + (took - self._pace) * PACE_WEIGHT
        self._pace = pace
        depth = (PREFETCH_SHORT if pace < SHORT_RUN else PREFETCH if pace > LONG_RUN
                 else None)
        if depth is None:
            return
        slots = self.workers * (1 + depth)
        if slots != self._slots:
            # Runs held beyond a smaller count of slots make _idle negative for a while:
            # nothing more is claimed until enough of them ended.
            self._idle += slots - self._slots
            self._slots = slots
            self._refill_at = max(1, slots // 2)

    def _after_run(self, refill: bool) -> None:
        """A worker's run ended and no run is about to start: wake the dispatcher, whose
        decision writes the queued run ends in its transaction (with its claims: one
        commit, not one for the ends and one for the claim)."""
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

    def _runs_ended(self, ends: Sequence[Ended]) -> None:
        """The group commit wrote (or could not write) run ends the workers queued: one
        INFO line per state for those it wrote (``run R of J ended S``, or ``N runs ended
        S: R1 of J1, R2 of J2, ...``: a line per run was a logging record per run, a
        twentieth of a short run's cost in ``cadenza serve``), a WARNING per run for the
        others."""
        written: dict[str, list[str]] = {}
        info = log.isEnabledFor(logging.INFO)
        for boundary, applied, error in ends:
            run_id = boundary.run_id
            job = self._jobs.pop(run_id, "?")
            if applied:
                if not info:
                    continue
                state = boundary.run_end.state.value if boundary.run_end else "?"
                written.setdefault(state, []).append(f"{run_id} of {job}")
            elif error is not None:
                log.warning("run %s of %s: its end was not recorded (%s); its lease will "
                            "expire and the run be recovered", run_id, job, error)
            else:
                log.warning("run %s of %s ended (lost): its end was refused, the run's lease "
                            "was lost (another holder owns the run now)", run_id, job)
        for state, runs in written.items():
            if len(runs) == 1:
                log.info("run %s ended %s", runs[0], state)
            else:
                log.info("%d runs ended %s: %s", len(runs), state, ", ".join(runs))
