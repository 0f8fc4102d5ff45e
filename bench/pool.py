"""The drain driver of ``bench/runs.py`` (not product code): a pool of worker threads that
claims and runs every QUEUED run, then returns.

``cadenza serve`` runs queued runs with the node's dispatcher and workers; this pool keeps
the benchmark's figure comparable from pass to pass by driving the same executor calls
without admission, schedules or leases to keep: free workers claim as many runs as there are
free workers plus :data:`~cadenza.node.dispatcher.PREFETCH` per worker, like the node's
dispatcher (at most ``batch``), with
:meth:`~cadenza.executor.runner.Executor.claim_and_start` (claim and first step start in one
transaction), keep one and queue the others for the next free workers.
The workers share one :class:`~cadenza.executor.group_commit.GroupCommit`: a claim joins the
group's next transaction, with the step boundaries of the other workers and the ends of the
runs that just finished.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta

import sqlalchemy as sa

from cadenza.config.loader import LoadedConfig
from cadenza.executor.connections import Connections
from cadenza.executor.group_commit import GroupCommit
from cadenza.executor.runner import Executor, Started, default_owner
from cadenza.executor.tracking import Observer, RunOutcome
from cadenza.node.dispatcher import PREFETCH
from cadenza.resources.pools import apply_pools
from cadenza.store import Store


@dataclass
class DrainStats:
    """What a :meth:`WorkerPool.drain` did."""

    runs: int = 0
    states: dict[str, int] = field(default_factory=dict)
    claims: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def add(self, outcome: RunOutcome) -> None:
        self.runs += 1
        key = outcome.state.value if outcome.state is not None else "LOST"
        self.states[key] = self.states.get(key, 0) + 1


class WorkerPool:
    """``workers`` threads over one executor and one group commit (see the module docs)."""

    def __init__(
        self,
        store: Store,
        config: LoadedConfig,
        *,
        workers: int = 4,
        batch: int = 16,
        owner: str | None = None,
        connections: Connections | None = None,
        observer: Observer | None = None,
    ) -> None:
        if workers < 1 or batch < 1:
            raise ValueError("a pool needs at least one worker, and batch at least 1")
        self.store = store
        self.config = config
        self.workers = workers
        self.batch = batch
        self.recorder = GroupCommit(store)
        apply_pools(store, config)  # the pools of this configuration, as a node does
        self.executor = Executor(store, config, owner=owner or default_owner(),
                                 connections=connections, recorder=self.recorder)
        self.observer = observer
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._drained = threading.Event()
        self._cond = threading.Condition()
        self._ready: deque[Started] = deque()
        self._free = 0
        self._claiming = False
        lease = max((self.executor.lease_for(job) for job in config.jobs), default=None)
        self.lease = lease or timedelta(hours=24)

    def stop(self) -> None:
        """Ask the threads to stop after their current run."""
        self._stop.set()

    def drain(self) -> DrainStats:
        """Run every QUEUED run of the configuration's jobs; return when none is left."""
        stats = DrainStats()
        started = time.monotonic()
        self._drained.clear()
        threads = [
            threading.Thread(target=self._work, args=(stats,), name=f"cadenza-worker-{k}",
                             daemon=True)
            for k in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._flush(stats)
        stats.errors.extend(self.recorder.problems)
        self.recorder.problems.clear()
        stats.seconds = time.monotonic() - started
        return stats

    def _work(self, stats: DrainStats) -> None:
        while not self._stop.is_set() and not self._drained.is_set():
            started = self._next(stats)
            if started is None:
                self._drained.set()
                break
            try:
                outcome = started.go()
            except Exception as exc:  # a store failure mid-run: the lease will expire
                with self._lock:
                    stats.errors.append(f"run {started.run_id}: {exc}")
                continue
            with self._lock:
                stats.add(outcome)
        self._flush(stats)

    def _next(self, stats: DrainStats) -> Started | None:
        """A claimed, started run for this (free) worker; None when none is queued."""
        with self._cond:
            self._free += 1
            while not self._ready and self._claiming and not self._drained.is_set():
                self._cond.wait()
            if self._ready or self._drained.is_set():
                self._free -= 1
                return self._ready.popleft() if self._ready else None
            # As the node's dispatcher does: a claim also takes PREFETCH runs per worker
            # ahead of the free workers, so that a worker whose run ends finds the next one.
            self._claiming = True
            wanted = min(self._free + self.workers * PREFETCH, self.batch)
        runs: list[Started] = []
        try:
            runs = self._claim(wanted)
        except Exception as exc:  # the store is down: report it, stop the pool
            with self._lock:
                stats.errors.append(f"claim failed: {exc}")
        with self._cond:
            self._claiming = False
            self._free -= 1
            stats.claims += 1
            if not runs:
                self._drained.set()
            self._ready.extend(runs[1:])
            self._cond.notify_all()
        return runs[0] if runs else None

    def _claim(self, wanted: int) -> list[Started]:
        until = self.store.clock.now() + self.lease
        jobs = list(self.config.jobs)

        def claim(conn: sa.Connection) -> list[Started]:
            return self.executor.claim_and_start(conn, limit=wanted, lease_until=until,
                                                 job_ids=jobs, observer=self.observer)

        # In the group's next transaction: it also writes the ends of the runs that just
        # finished (deferred until a next write), and on SQLite there is one writer anyway.
        return self.recorder.call(claim)

    def _flush(self, stats: DrainStats) -> None:
        try:
            self.recorder.flush()
        except Exception as exc:
            with self._lock:
                stats.errors.append(f"writing the last run ends failed: {exc}")

    def close(self) -> None:
        """Release the executor's and the group commit's connections."""
        self.recorder.close()
        self.executor.close()
