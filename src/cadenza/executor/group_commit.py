"""Writing step boundaries: one transaction each, or several runs' in one (group commit).

A worker thread hands each :class:`~cadenza.store.boundary.Boundary` to a :class:`Recorder`
and waits until it is durable: the next step must not start before its start is recorded,
and a refused boundary (the run's lease epoch moved on) must stop the run. A run's *last*
boundary (its end) starts nothing, so a recorder may write it later (:meth:`Recorder.finish`):
:class:`GroupCommit` queues it and writes it with the next write of any run, typically the
claim or the start of the worker's next run, so that a one-step run costs one commit, not two.

:class:`GroupCommit` is the recorder of a worker pool. It needs no thread of its own: the
first waiting worker becomes the *leader*, takes everything queued so far (up to
``max_batch``), writes it in one transaction with
:meth:`~cadenza.store.boundaries.BoundaryWriter.record_boundaries` and wakes the other
workers; what is submitted meanwhile waits for the next leader. Besides boundaries it takes
*jobs* (:meth:`GroupCommit.call`): a function run in the same transaction, such as a claim of
the next runs. With one worker this is a plain write per call; with W busy workers, about W
boundaries share a commit. If a batch fails as a whole, its items are written again one by
one, so that one bad boundary fails only its own run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa

from cadenza.clock import Clock
from cadenza.domain.errors import StoreConflict
from cadenza.store.boundary import Boundary, BoundaryResult
from cadenza.store.protocols import WorkerStore

T = TypeVar("T")

log = logging.getLogger("cadenza.executor")

CONFLICT_TRIES = 4
"""Writes of a boundary or a job that the database rolled back for a conflict (a deadlock,
a serialization failure, a lock wait past ``lock_timeout``: nothing of it applied), before
the error is given up on; they wait 50, 100, then 200 ms between tries."""

PROBLEMS_KEPT = 1000
"""How many problems of deferred run ends :attr:`GroupCommit.problems` keeps (the oldest go)."""

Ended = tuple[Boundary, bool, "BaseException | None"]
"""A deferred run end settled: the boundary, whether it was applied, the error if any."""
EndHook = Callable[[Sequence[Ended]], None]
"""``on_end(ends)``: the deferred run ends one batch settled (written or not), in order,
called once per batch: a node logs one line per batch and state, not one per run."""


class Recorder(Protocol):
    """Writes a boundary durably and says whether it was applied."""

    def record(self, boundary: Boundary) -> BoundaryResult:
        """Write ``boundary`` (blocking until committed); raises the store's errors."""
        ...

    def finish(self, boundary: Boundary) -> BoundaryResult | None:
        """Write a run's last boundary now (its result) or with the next write (``None``)."""
        ...

    def flush(self) -> None:
        """Write every boundary still queued."""
        ...


class DirectRecorder:
    """One transaction per boundary, in the caller's thread."""

    def __init__(self, store: WorkerStore) -> None:
        self.store = store

    def record(self, boundary: Boundary) -> BoundaryResult:
        return retrying_conflicts(lambda: self.store.record_boundaries([boundary])[0],
                                  self.store.clock)

    def finish(self, boundary: Boundary) -> BoundaryResult:
        return self.record(boundary)

    def flush(self) -> None:
        """Nothing is ever queued."""


def retrying_conflicts(write: Callable[[], T], clock: Clock) -> T:
    """``write()``, written again (up to :data:`CONFLICT_TRIES` in all) while the database
    rolls it back for a conflict (:class:`~cadenza.domain.errors.StoreConflict`). Only that
    error: after any other (a COMMIT whose answer was lost among them) the outcome is not
    known, and the caller decides."""
    for attempt in range(CONFLICT_TRIES):
        try:
            return write()
        except StoreConflict as exc:
            if attempt == CONFLICT_TRIES - 1:
                raise
            log.info("a store write conflicted with another transaction; writing it "
                     "again: %s", exc)
            clock.sleep(0.05 * 2 ** attempt)
    raise AssertionError("unreachable")


class _Pending:
    __slots__ = ("boundary", "deferred", "done", "error", "job", "result", "wake")
    wake: threading.Event | None

    def __init__(self, boundary: Boundary | None = None, *, deferred: bool = False,
                 job: Callable[[sa.Connection], Any] | None = None) -> None:
        self.boundary = boundary
        self.job = job
        self.deferred = deferred
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        # Set when the item is done, or when its thread is to lead the next batch: each
        # waiting thread is woken once, not at every batch (16 workers on one condition
        # would all wake for every commit). A deferred run end has no thread waiting.
        self.wake = None if deferred else threading.Event()


class GroupCommit:
    """Leader/follower group commit of boundaries and jobs (see the module docstring)."""

    def __init__(self, store: WorkerStore, *, max_batch: int = 64,
                 on_end: EndHook | None = None) -> None:
        self.store = store
        self.max_batch = max_batch
        self.on_end = on_end
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._conn: sa.Connection | None = None  # used by the leader only
        self._leading = False
        self._settled: list[Ended] = []  # the deferred ends of the batch being written
        self.batches = 0
        self.boundaries = 0
        self.problems: list[str] = []
        """Deferred run ends that were refused or failed (their runs' leases will expire)."""

    def finish(self, boundary: Boundary) -> None:
        """Queue a run's last boundary; the next write (or :meth:`flush`) takes it along."""
        with self._lock:
            self._queue.append(_Pending(boundary, deferred=True))

    def pending(self) -> bool:
        """Whether boundaries or run ends wait to be written."""
        with self._lock:
            return bool(self._queue)

    def flush(self) -> None:
        """Write whatever is queued (a worker about to go idle calls this)."""
        with self._lock:
            if not self._queue:
                return
        self._submit(_Pending(Boundary("", 0)))

    def record(self, boundary: Boundary) -> BoundaryResult:
        result: BoundaryResult = self._submit(_Pending(boundary))
        return result

    def call(self, job: Callable[[sa.Connection], T]) -> T:
        """Run ``job(conn)`` in the next group transaction (with the queued boundaries) and
        return its result; its exceptions are raised here."""
        result: T = self._submit(_Pending(job=job))
        return result

    def _submit(self, item: _Pending) -> Any:
        with self._lock:
            self._queue.append(item)
            follow, self._leading = self._leading, True
        if follow:
            assert item.wake is not None
            item.wake.wait()  # done by a leader, or handed the lead
        if not item.done:
            try:  # this thread leads until its own item is written
                while not item.done:
                    with self._lock:
                        batch = self._queue[: self.max_batch]
                        del self._queue[: self.max_batch]
                    self._write(batch)
            finally:
                with self._lock:
                    waiting = next((p for p in self._queue if not p.deferred), None)
                    if waiting is not None:
                        assert waiting.wake is not None
                        waiting.wake.set()  # hand the lead to one waiting thread
                    else:
                        self._leading = False  # deferred ends wait for the next write
        if item.error is not None:
            raise item.error
        return item.result

    def _write(self, batch: Sequence[_Pending]) -> None:
        for pending in batch:
            if pending.boundary is not None and pending.boundary.is_empty():
                self._settle(pending, BoundaryResult(True, (), None), None)
        batch = [p for p in batch if not p.done]
        if not batch:
            return
        self.batches += 1
        self.boundaries += sum(1 for p in batch if p.boundary is not None)
        try:
            try:
                self._together(batch)
            except Exception:
                for pending in batch:  # one by one: only the one at fault fails
                    if not pending.done:
                        self._alone(pending)
        except BaseException as exc:  # e.g. KeyboardInterrupt: no follower may wait forever
            for pending in batch:
                if not pending.done:
                    self._settle(pending, None, exc)
            raise
        finally:
            self._report()

    def _report(self) -> None:
        """Tell ``on_end`` the deferred run ends the batch settled (the leader's thread)."""
        ends, self._settled = self._settled, []
        if ends and self.on_end is not None:
            try:
                self.on_end(ends)
            except Exception:  # a hook must not fail the batch's other items
                log.exception("reporting the end of runs %s failed",
                              ", ".join(b.run_id for b, _, _ in ends))

    def _together(self, batch: Sequence[_Pending]) -> None:
        marks = [p for p in batch if p.boundary is not None]
        jobs = [p for p in batch if p.job is not None]
        with self.store.write(self._connection()) as conn:
            results = self.store.record_boundaries(
                [p.boundary for p in marks if p.boundary is not None], conn=conn)
            answers = [p.job(conn) for p in jobs if p.job is not None]
        settled = [*zip(marks, results, strict=True), *zip(jobs, answers, strict=True)]
        # The run ends first (nobody waits for them): the first waiting thread's wake tells
        # them all at once, a line per state for the whole commit.
        for pending, result in sorted(settled, key=lambda done: not done[0].deferred):
            self._settle(pending, result, None)

    def _connection(self) -> sa.Connection | None:
        """The leader's own connection (one leader at a time), opened on first use; None on
        SQLite, whose store already writes through one connection."""
        if self.store.dialect == "sqlite":
            return None
        if self._conn is not None and (self._conn.closed or self._conn.invalidated):
            self._conn.close()
            self._conn = None
        if self._conn is None:
            self._conn = self.store.engine.connect()
        return self._conn

    def close(self) -> None:
        """Close the leader's connection (call when no thread writes any more)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _alone(self, pending: _Pending) -> None:
        def write() -> Any:
            if pending.boundary is not None:
                return self.store.record_boundaries([pending.boundary])[0]
            assert pending.job is not None
            with self.store.write() as conn:
                return pending.job(conn)

        try:
            result = retrying_conflicts(write, self.store.clock)
        except Exception as exc:
            self._settle(pending, None, exc)
        else:
            self._settle(pending, result, None)

    def _settle(self, item: _Pending, result: Any, error: BaseException | None) -> None:
        if item.deferred and item.boundary is not None:
            self._ended(item.boundary, result, error)
        item.result, item.error, item.done = result, error, True
        if item.wake is not None:
            # The ends settled so far are told before a waiting thread goes on (the
            # dispatcher, whose decision may claim such a run again at once).
            self._report()
            item.wake.set()

    def _ended(self, boundary: Boundary, result: Any, error: BaseException | None) -> None:
        """A deferred run end is settled: keep it for ``on_end`` (told once the batch is
        written, :meth:`_report`); keep and log what went wrong."""
        applied = error is None and result is not None and bool(result.applied)
        if not applied:
            why = f"error: {error}" if error is not None else "refused (lease lost)"
            self.problems.append(f"the end of run {boundary.run_id} was not recorded: {why}")
            del self.problems[:-PROBLEMS_KEPT]
        if self.on_end is not None:
            self._settled.append((boundary, applied, error))
        elif not applied:
            log.warning("the end of run %s was not recorded: %s", boundary.run_id,
                        f"error: {error}" if error is not None
                        else "refused, the run's lease was lost (another holder owns it)")
