"""Writing step boundaries: one transaction each, or several runs' in one (group commit).

A worker thread hands each :class:`~cadenza.store.boundary.Boundary` to a :class:`Recorder`
and waits until it is durable: the next step must not start before its start is recorded,
and a refused boundary (the run's lease epoch moved on) must stop the run. A run's *last*
boundary (its end) starts nothing, so a recorder may write it later (:meth:`Recorder.finish`):
:class:`GroupCommit` queues it and writes it with the next boundary of any run, typically the
start of the worker's next run, so that a one-step run costs one commit, not two.

:class:`GroupCommit` is the recorder of a worker pool. It needs no thread of its own: the
first waiting worker becomes the *leader*, takes every boundary queued so far (up to
``max_batch``), writes them in one transaction with
:meth:`~cadenza.store.execution.ExecutionRepository.record_boundaries` and wakes their
workers; boundaries submitted meanwhile wait for the next leader. With one worker it is a
plain write per boundary; with W busy workers, about W boundaries share a commit. If a batch
fails as a whole, its boundaries are written again one by one, so that one bad boundary
fails only its own run.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from cadenza.store import Store
from cadenza.store.boundary import Boundary, BoundaryResult


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

    def __init__(self, store: Store) -> None:
        self.store = store

    def record(self, boundary: Boundary) -> BoundaryResult:
        return self.store.record_boundaries([boundary])[0]

    def finish(self, boundary: Boundary) -> BoundaryResult:
        return self.record(boundary)

    def flush(self) -> None:
        """Nothing is ever queued."""


class _Pending:
    __slots__ = ("boundary", "deferred", "done", "error", "result")

    def __init__(self, boundary: Boundary, deferred: bool = False) -> None:
        self.boundary = boundary
        self.deferred = deferred
        self.done = False
        self.result: BoundaryResult | None = None
        self.error: BaseException | None = None


class GroupCommit:
    """Leader/follower group commit of boundaries (see the module docstring)."""

    def __init__(self, store: Store, *, max_batch: int = 64) -> None:
        self.store = store
        self.max_batch = max_batch
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._leading = False
        self.batches = 0
        self.boundaries = 0
        self.problems: list[str] = []
        """Deferred run ends that were refused or failed (their runs' leases will expire)."""

    def finish(self, boundary: Boundary) -> None:
        """Queue a run's last boundary; the next write (or :meth:`flush`) takes it along."""
        with self._cond:
            self._queue.append(_Pending(boundary, deferred=True))

    def flush(self) -> None:
        """Write whatever is queued (a worker about to go idle calls this)."""
        with self._cond:
            if not self._queue:
                return
        self.record(Boundary("", 0))

    def record(self, boundary: Boundary) -> BoundaryResult:
        item = _Pending(boundary)
        with self._cond:
            self._queue.append(item)
        while True:
            with self._cond:
                while not item.done and self._leading:
                    self._cond.wait()
                if item.done:
                    break
                self._leading = True
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
            try:
                self._write(batch)
            finally:
                with self._cond:
                    self._leading = False
                    self._cond.notify_all()
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result

    def _write(self, batch: Sequence[_Pending]) -> None:
        for pending in batch:
            if pending.boundary.is_empty():  # flush()'s marker, or a step with nothing to say
                self._settle(pending, BoundaryResult(True, (), None), None)
        batch = [p for p in batch if not p.done]
        if not batch:
            return
        self.batches += 1
        self.boundaries += len(batch)
        try:
            try:
                results = self.store.record_boundaries([p.boundary for p in batch])
            except Exception as exc:
                if len(batch) == 1:
                    self._settle(batch[0], None, exc)
                    return
                for pending in batch:  # write them one by one: only the one at fault fails
                    try:
                        result = self.store.record_boundaries([pending.boundary])[0]
                    except Exception as one:
                        self._settle(pending, None, one)
                    else:
                        self._settle(pending, result, None)
                return
            for pending, result in zip(batch, results, strict=True):
                self._settle(pending, result, None)
        except BaseException as exc:  # e.g. KeyboardInterrupt: no follower may wait forever
            for pending in batch:
                if not pending.done:
                    self._settle(pending, None, exc)
            raise

    def _settle(self, item: _Pending, result: BoundaryResult | None,
                error: BaseException | None) -> None:
        if item.deferred and (error is not None or (result is not None and not result.applied)):
            why = f"error: {error}" if error is not None else "refused (lease lost)"
            self.problems.append(f"the end of run {item.boundary.run_id} was not recorded: {why}")
        item.result, item.error, item.done = result, error, True
