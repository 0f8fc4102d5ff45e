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
LATE = timedelta(seconds=1)
"""A stage claimed later than this after its due time is dropped (the ordinary path)."""


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

    @classmethod
    def prepare(cls, executor: Executor, limits: Limits, due: datetime, lease: timedelta,
                candidates: Sequence[Candidate], load: Load, free: int,
                deadline: float) -> Stage:
        """Stage the runs admission would start at ``due`` (at most ``free``), until the
        store clock's monotonic time reaches ``deadline``."""
        stage = cls(executor, limits, due, due + lease, list(candidates), load, free)
        decision = admit(stage.candidates, limits, load, due, free)
        ids = [c.run_id for c in decision.admitted]
        clock = executor.store.clock
        for run in executor.store.fresh_queued_runs(ids):
            if clock.monotonic() > deadline:
                break  # the due time is near: the rest is claimed the ordinary way
            staged = executor.stage(run, due, stage.lease_until)
            if staged is not None:
                stage.staged[run.id] = staged
        stage.order = [stage.staged[c.run_id] for c in decision.admitted
                       if c.run_id in stage.staged]
        return stage

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
