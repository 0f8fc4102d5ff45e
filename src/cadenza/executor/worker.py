"""A pool of worker threads that drains the queue: claim QUEUED runs in batches, run them.

Each of the ``workers`` threads claims up to ``batch`` runs in one transaction
(:meth:`~cadenza.store.execution.ExecutionRepository.claim_runs`, highest priority then
oldest first, ``FOR UPDATE SKIP LOCKED`` on PostgreSQL) and runs them one after the other
with a shared :class:`~cadenza.executor.runner.Executor`, whose step boundaries go through
one :class:`~cadenza.executor.recorder.GroupCommit`: the workers' boundaries share commits.
A thread stops when a claim finds nothing.

This is the execution half of ``cadenza serve``; admission (concurrency caps, windows,
budgets, resource leases) and the schedule loop come with the scheduling issue, and
:meth:`WorkerPool.drain` claims every QUEUED run of the configuration's jobs as it is.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

from cadenza.config.loader import LoadedConfig
from cadenza.executor.connections import Connections
from cadenza.executor.recorder import GroupCommit
from cadenza.executor.runner import Executor, default_owner
from cadenza.executor.tracking import Observer, RunOutcome
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
        batch: int = 8,
        owner: str | None = None,
        connections: Connections | None = None,
        observer: Observer | None = None,
    ) -> None:
        if workers < 1 or batch < 1:
            raise ValueError("workers and batch must be at least 1")
        self.store = store
        self.config = config
        self.workers = workers
        self.batch = batch
        self.recorder = GroupCommit(store)
        self.executor = Executor(store, config, owner=owner or default_owner(),
                                 connections=connections, recorder=self.recorder)
        self.observer = observer
        self._lock = threading.Lock()
        self._stop = threading.Event()
        lease = max((self.executor.lease_for(job) for job in config.jobs), default=None)
        self.lease = lease or timedelta(hours=24)

    def stop(self) -> None:
        """Ask the threads to stop after their current run."""
        self._stop.set()

    def drain(self) -> DrainStats:
        """Run every QUEUED run of the configuration's jobs; return when none is left."""
        stats = DrainStats()
        started = time.monotonic()
        threads = [
            threading.Thread(target=self._work, args=(stats,), name=f"cadenza-worker-{k}",
                             daemon=True)
            for k in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.recorder.flush()
        stats.errors.extend(self.recorder.problems)
        self.recorder.problems.clear()
        stats.seconds = time.monotonic() - started
        return stats

    def _work(self, stats: DrainStats) -> None:
        jobs = list(self.config.jobs)
        while not self._stop.is_set():
            try:
                until = self.store.clock.now() + self.lease
                runs = self.store.claim_runs(self.executor.owner, until, limit=self.batch,
                                             job_ids=jobs)
            except Exception as exc:  # the store is down: report it, stop this worker
                with self._lock:
                    stats.errors.append(f"claim failed: {exc}")
                self._flush(stats)
                return
            with self._lock:
                stats.claims += 1
            if not runs:
                self._flush(stats)
                return
            for run in runs:
                try:
                    outcome = self.executor.run_claimed(run, self.observer)
                except Exception as exc:  # a store failure mid-run: the lease will expire
                    with self._lock:
                        stats.errors.append(f"run {run.id}: {exc}")
                    continue
                with self._lock:
                    stats.add(outcome)

    def _flush(self, stats: DrainStats) -> None:
        try:
            self.recorder.flush()
        except Exception as exc:
            with self._lock:
                stats.errors.append(f"writing the last run ends failed: {exc}")

    def close(self) -> None:
        """Release the executor's connections."""
        self.executor.close()

