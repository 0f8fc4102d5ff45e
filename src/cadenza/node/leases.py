"""The run-lease reaper of a node (store/run_leases.py, docs/leases.md).

Every ``lease / 3`` of the node's clock the reaper re-queues the runs of any node whose
lease expired (:meth:`Reaper.reap_once`). At start, before the node claims anything, it
takes back what a previous process of this host left (:meth:`Reaper.reclaim_at_start`):
runs whose lease expired, and runs held by a process of this host that no longer exists,
even before their lease expires.

The renewal side, one heartbeat for the runs this process executes, is the
:class:`~cadenza.executor.lease.LeaseKeeper`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta

import psutil  # type: ignore[import-untyped]

from cadenza.lifecycle import Lifecycle
from cadenza.store import Store
from cadenza.store.run_leases import REAP_BATCH, owner_parts

log = logging.getLogger("cadenza.node")


class Reaper:
    """Re-queues expired run leases (see the module doc). A service."""

    name = "reaper"

    def __init__(self, store: Store, owner: str, life: Lifecycle,
                 lease: Callable[[], timedelta],
                 on_reaped: Callable[[], object] = lambda: None) -> None:
        """``lease`` is read before each pause (a reload changes it); ``on_reaped`` is
        called when runs were re-queued (the dispatcher wakes)."""
        self.store = store
        self.owner = owner
        self.life = life
        self.lease = lease
        self.on_reaped = on_reaped
        self.reaped = 0
        """Runs re-queued by this reaper (at start and since)."""

    def start(self, stack: ExitStack) -> None:
        try:
            self.reclaim_at_start()
        except Exception:  # the store may be down at start: the loop retries
            log.exception("reclaiming runs left by a previous process failed")
        self.life.spawn(stack, self._loop, "cadenza-reaper")

    def reap_once(self) -> int:
        """Re-queue the runs whose lease expired (any node's); returns how many were taken.
        Loops over batches of :data:`~cadenza.store.run_leases.REAP_BATCH` runs."""
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
            self.on_reaped()
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

    def _loop(self) -> None:
        while not self.life.pause(self.lease().total_seconds() / 3):
            try:
                self.reap_once()
            except Exception:  # the store may be down: try again next time
                log.exception("reaping expired leases failed")


def _like_prefix(text: str) -> str:
    """``text`` with the LIKE wildcards escaped away (a host name has none, but be sure)."""
    return text.replace("%", "_").replace("\\", "_")
