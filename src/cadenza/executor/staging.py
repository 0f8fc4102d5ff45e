"""A crowded due time, prepared ahead and claimed in chunks (docs/scheduling.md).

The scheduler records the runs of a coming fire a few seconds ahead (``LOOKAHEAD``). A node
that sees them *stages* them (:meth:`Stage.prepare`), off the critical path:

* the admission decision they will get at their due time, over every run that will be due
  then (:func:`~cadenza.domain.admission.admit` with ``now`` = the due time and the load
  read now);
* for each run admitted, a tracker claimed provisionally, its plan, its first step planned
  with its context, and the rows of its claim encoded (:meth:`Executor.stage`).

At the due time the node claims them in **chunks** (:meth:`Stage.claim`): 16 runs, then 32,
64, ... (:data:`CHUNKS`), each chunk one transaction and one complete admission decision:

1. the admission lock (PostgreSQL; SQLite's writer lock is held anyway);
2. the QUEUED runs due (their ids): if they are not those the stage expects, something was
   queued, canceled or claimed meanwhile, and the stage is dropped: the ordinary decision
   takes over (the runs left are claimed the ordinary way);
3. the load (running runs and budget starts, every node): when it differs from the load the
   stage expects, the decision is made again for the runs not claimed yet (:func:`admit`);
   on SQLite, 2 and 3 are skipped when the runs' version counter did not move since the
   stage's previous chunk (nobody queued, canceled, claimed or ended a run in between:
   :meth:`~cadenza.store.claims.RunClaims.runs_version`);
4. the claim of the chunk's runs with their first step start
   (:meth:`~cadenza.store.claims.RunClaims.claim_staged`).

After each chunk commits, its runs' first steps start at once (:meth:`Staged.begin`), while
the next chunk is written: SQLite lets go of the GIL while it writes, so the first runs of a
crowded minute enter their step a few milliseconds after the due time instead of after the
whole minute's claim. Every claim is still a conditional UPDATE (a run is never claimed
twice), every chunk an admission decision of its own (caps hold across nodes), and each
run's claim and first start commit together with their events, as on the ordinary path.
The step threads start a chunk's runs with :func:`begin_staged`; the dispatcher waits for
them through :class:`Begun`.

A crowded minute holds more runs than the node has free workers: the chunks claim as many
as workers wait, and the rest would go through ordinary decisions as workers free up,
each claim planning its run and encoding its rows at that moment, in the burst. So every
run due then is staged, not only those the chunks will claim (the admitted first, until
the deadline: a stage of 10,000 runs may end part way), and what the chunks leave is kept
(:class:`Prepared`) for the decisions after them: each decision makes its own admission
as always, then claims the admitted runs that were staged with their encoded rows
(:meth:`~cadenza.store.claims.RunClaims.claim_staged`, the same conditional claim) and
the others the ordinary way, in the same transaction. A worker that takes such a run
starts its first step as planned ahead (:meth:`RunTracker.claimed_staged
<cadenza.executor.tracking.RunTracker.claimed_staged>`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from cadenza.domain.admission import Candidate, Limits, Load, admit
from cadenza.executor.runner import Executor, Staged, Started
from cadenza.store.protocols import WorkerStore

log = logging.getLogger("cadenza.node")

CHUNKS = (16, 32, 64, 128)
"""Runs per chunk transaction at a due time: small first (the first runs start at once),
then growing (fewer commits); the last size repeats."""
STAGE_READ = 500
"""Runs read per query while staging (the deadline is checked between them too)."""
LATE = timedelta(seconds=1)
"""A stage claimed later than this after its due time is dropped (the ordinary path)."""
PREPARED_FOR = timedelta(seconds=10)
"""How long after their due time the staged runs that its chunks did not claim keep what
was prepared for them (:class:`Prepared`); later, a run is claimed the ordinary way."""


@dataclass
class Stage:
    """The runs of one due time, staged (see the module docstring)."""

    executor: Executor
    limits: Limits
    due: datetime
    lease_until: datetime
    candidates: list[Candidate]
    """Every QUEUED run that will be due at ``due``, as read when staged."""
    load: Load
    free: int
    staged: dict[str, Staged] = field(default_factory=dict)
    order: list[Staged] = field(default_factory=list)
    """The staged runs admitted, in admission order, not claimed yet."""
    claimed: int = 0
    claimed_at: datetime | None = None
    """When the last chunk was claimed."""
    chunks: int = 0
    dropped: str | None = None
    """Why the stage was given up (the ordinary decision claims the rest)."""
    version: int | None = None
    """The runs' version after the last chunk (SQLite, see ``Store.runs_version``)."""
    token: int = 0
    """The claimer process's token for this stage (0: not handed to one)."""
    taken: set[str] = field(default_factory=set)
    """The ids of the runs this stage claimed."""

    @classmethod
    def prepare(cls, executor: Executor, limits: Limits, due: datetime, lease: timedelta,
                candidates: Sequence[Candidate], load: Load, free: int,
                deadline: float, earlier: Stage | None = None) -> Stage:
        """Stage the runs admission would start at ``due`` (at most ``free``: the
        :attr:`order` claimed in chunks at ``due``), then the other runs due then (kept
        :attr:`staged` for the decisions after the chunks, :meth:`Prepared.take`), until
        the store clock's monotonic time reaches ``deadline``. The runs of ``earlier``, a
        stage of the same due time and executor made before more runs were recorded for
        it, are taken over, not staged again."""
        stage = cls(executor, limits, due, due + lease, list(candidates), load, free)
        decision = admit(stage.candidates, limits, load, due, free)
        first = [c.run_id for c in decision.admitted]
        chosen = set(first)
        ids = first + [c.run_id for c in stage.candidates if c.run_id not in chosen]
        if (earlier is not None and earlier.due == due and earlier.executor is executor
                and earlier.lease_until == stage.lease_until):
            stage.staged.update((run_id, earlier.staged[run_id]) for run_id in ids
                                if run_id in earlier.staged)
            ids = [run_id for run_id in ids if run_id not in stage.staged]
        clock = executor.store.clock
        for part in range(0, len(ids), STAGE_READ):
            if clock.monotonic() > deadline:
                break
            for run in executor.store.fresh_queued_runs(ids[part:part + STAGE_READ]):
                if clock.monotonic() > deadline:
                    break  # the due time is near: the rest is claimed the ordinary way
                staged = executor.stage(run, due, stage.lease_until)
                if staged is not None:
                    stage.staged[run.id] = staged
        stage.order = [stage.staged[c.run_id] for c in decision.admitted
                       if c.run_id in stage.staged]
        return stage

    def unclaimed(self) -> dict[str, Staged]:
        """The staged runs this stage did not claim (see :class:`Prepared`)."""
        return {run_id: s for run_id, s in self.staged.items() if run_id not in self.taken}

    def __len__(self) -> int:
        return len(self.order)

    def claim(self, conn: sa.Connection, limit: int) -> list[tuple[Staged, int]]:
        """In ``conn``'s transaction: one chunk of at most ``limit`` runs (see the module
        docstring); returns the runs claimed with their first step run ids. Empty when
        the stage is done or dropped (:attr:`dropped` says why)."""
        store: WorkerStore = self.executor.store
        if not self.order or self.dropped:
            return []
        store.lock_admission(conn)
        unchanged = self.version is not None and store.runs_version(conn) == self.version
        load = self.load
        if not unchanged:  # a run changed since the last chunk: check it all
            due_now = store.due_queued_ids(self.due, conn=conn)
            expected = {c.run_id for c in self.candidates}
            if due_now != expected:
                self.dropped = (f"the runs due changed since they were staged ("
                                f"{len(due_now - expected)} more, {len(expected - due_now)} "
                                "gone)")
                return []
            load = store.admission_load(self.due, budget_jobs=self.limits.budgeted_jobs(),
                                        conn=conn)
        if load != self.load:  # runs started or ended elsewhere: decide again
            decision = admit(self.candidates, self.limits, load, self.due,
                             self.free - self.claimed)
            self.order = [self.staged[c.run_id] for c in decision.admitted
                          if c.run_id in self.staged]
            self.load = load
            if not self.order:
                return []
        now = store.clock.now()
        chunk = self.order[:limit]
        ids = store.claim_staged(conn, [s.start for s in chunk], self.executor.owner,
                                 self.lease_until, now=now)
        return self.took(len(chunk), ids, now, store.runs_version(conn))

    def took(self, size: int, ids: dict[str, int], now: datetime,
             version: int | None) -> list[tuple[Staged, int]]:
        """The next ``size`` runs of the order were given to a claim at ``now`` that took
        ``ids`` (run id -> first step run id), after which the runs' version was
        ``version``: account for them (here or in the claimer process,
        executor/claimer.py); returns the runs claimed with their first step run ids."""
        chunk, self.order = self.order[:size], self.order[size:]
        self.claimed_at = now
        took = [(s, ids[s.run_id]) for s in chunk if s.run_id in ids]
        self.taken.update(s.run_id for s in chunk)
        self.chunks += 1
        self.claimed += len(took)
        if len(took) != len(chunk):  # changed since staged: the count check missed it
            self.dropped = f"{len(chunk) - len(took)} staged runs changed before their claim"
        gone = {s.run_id for s, _ in took}
        self.candidates = [c for c in self.candidates if c.run_id not in gone]
        self.load = self._after(self.load, [s for s, _ in took], now)
        self.version = version
        return took

    def _after(self, load: Load, took: list[Staged], now: datetime) -> Load:
        """``load`` plus the runs just claimed (started now, running)."""
        running = dict(load.running_by_job)
        starts = {job: list(times) for job, times in load.starts_by_job.items()}
        budgeted = self.limits.budgeted_jobs()
        for staged in took:
            job = staged.start.job_id
            running[job] = running.get(job, 0) + 1
            if job in budgeted:
                starts.setdefault(job, []).append(now)
        return Load(load.running_total + len(took), running, starts)

    def chunk_size(self) -> int:
        return CHUNKS[min(self.chunks, len(CHUNKS) - 1)]


class Prepared:
    """The runs of a due time staged ahead that its chunks did not claim (a crowded minute
    holds more runs than a node has free workers): the decisions after the chunks claim
    them with their rows encoded and their first steps planned ahead (:meth:`claim`), in
    the decision's transaction, after the decision's own admission; runs not prepared
    are claimed the ordinary way beside them. What is left :data:`PREPARED_FOR` after the
    due time, or once the configuration was reloaded, is dropped."""

    def __init__(self, stage: Stage | None = None) -> None:
        self.executor = stage.executor if stage is not None else None
        self.runs: dict[str, Staged] = stage.unclaimed() if stage is not None else {}
        self.lease_until = stage.lease_until if stage is not None else None
        self.until = stage.due + PREPARED_FOR if stage is not None else None

    def __len__(self) -> int:
        return len(self.runs)

    def take(self, run_ids: Sequence[str], executor: Executor,
             now: datetime) -> list[Staged]:
        """The prepared runs among ``run_ids`` (admitted by a decision at ``now`` with
        ``executor``), each given once."""
        if not self.runs:
            return []
        if executor is not self.executor or self.until is None or now >= self.until:
            self.runs.clear()
            return []
        return [s for run_id in run_ids if (s := self.runs.pop(run_id, None)) is not None]

    def claim(self, conn: sa.Connection, staged: Sequence[Staged],
              now: datetime) -> list[Started]:
        """In ``conn``'s transaction: claim ``staged`` (from :meth:`take`) at ``now``, with
        their first step starts as encoded ahead; the runs claimed, for the workers (a run
        that changed since it was staged is left alone)."""
        assert self.executor is not None and self.lease_until is not None
        ids = self.executor.store.claim_staged(conn, [s.start for s in staged],
                                               self.executor.owner, self.lease_until,
                                               now=now)
        return [s.claimed_in(conn, ids[s.run_id], now) for s in staged if s.run_id in ids]


class Begun(list[Started]):
    """The runs of a stage that the step threads started (appended from any thread); the
    dispatcher waits for as many as it claimed."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()
        self._want = -1

    def append(self, started: Started) -> None:
        with self._changed:
            super().append(started)
            if len(self) == self._want:  # the waiter wakes once, not at every start
                self._changed.notify_all()

    def wait(self, count: int, seconds: float) -> bool:
        """Wait up to ``seconds`` (real time: other threads' progress) until ``count`` runs
        are started; returns whether they are."""
        with self._changed:
            self._want = count
            return self._changed.wait_for(lambda: len(self) >= count, max(seconds, 0.0))


def begin_staged(staged: Staged, step_run_id: int, at: datetime,
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
