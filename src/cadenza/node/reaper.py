"""The run-lease reaper of a node (store/run_leases.py, docs/leases.md).

Every ``lease / 3`` of the node's clock the reaper re-queues the runs of any node whose
lease expired (:meth:`Reaper.reap_once`). At start, before the node claims anything, it
takes back what a previous process of this host left (:meth:`Reaper.reclaim_at_start`):
runs whose lease expired, and runs held by a process of this host that no longer exists,
even before their lease expires.

**The clock check.** Before each of these, the reaper compares the node's clock with the
store's time (:meth:`~cadenza.store.lease_clock.LeaseClock.clock_skew`: PostgreSQL's clock,
or the host's on SQLite). Beyond ``[workers].max_clock_skew`` it does not reap: it says why
once, in the log (ERROR) and as a CLOCK_SKEW event, checks again each round and resumes
(INFO, a CLOCK_SKEW event) once the clocks agree. The lease times themselves are the store's,
so a skewed node's claims and renewals stay right; the check keeps a node whose clock is
wrong from taking other nodes' runs on any judgement of its own.

**The write-ahead log** (SQLite) is looked at in the same loop, at most every
:data:`WAL_CHECK_SECONDS`: a log past :data:`WAL_WARN_BYTES` that its checkpoint cannot
empty because a reader holds an old snapshot is a WAL_GROWING warning naming the reader
where the system tells (:meth:`~cadenza.store.maintenance.MaintenanceRepository.check_wal`),
repeated at most every :data:`WAL_WARN_EVERY` seconds while it lasts.

The renewal side, one heartbeat for the runs this process executes, is the
:class:`~cadenza.executor.lease_keeper.LeaseKeeper`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta

import psutil  # type: ignore[import-untyped]

from cadenza.domain.events import EventType, Level
from cadenza.lifecycle import Lifecycle
from cadenza.store.maintenance import WalCheck
from cadenza.store.protocols import ReaperStore
from cadenza.store.run_leases import REAP_BATCH, owner_parts

log = logging.getLogger("cadenza.node")

MAX_CLOCK_SKEW = timedelta(seconds=30)
"""``[workers].max_clock_skew`` by default."""
WAL_CHECK_SECONDS = 60.0
"""How often (monotonic seconds, at a reaper round) the write-ahead log is looked at."""
WAL_WARN_BYTES = 64 * 1024 * 1024
"""A write-ahead log holding more than this that its checkpoint cannot empty is a warning."""
WAL_WARN_EVERY = 3600.0
"""Seconds between two WAL_GROWING warnings while the log stays stuck."""


class Reaper:
    """Re-queues expired run leases (see the module doc). A service."""

    name = "reaper"

    def __init__(self, store: ReaperStore, owner: str, life: Lifecycle,
                 lease: Callable[[], timedelta],
                 on_reaped: Callable[[], object] = lambda: None,
                 max_skew: Callable[[], timedelta] = lambda: MAX_CLOCK_SKEW) -> None:
        """``lease`` and ``max_skew`` are read at each round (a reload changes them);
        ``on_reaped`` is called when runs were re-queued (the dispatcher wakes)."""
        self.store = store
        self.owner = owner
        self.life = life
        self.lease = lease
        self.on_reaped = on_reaped
        self.max_skew = max_skew
        self.reaped = 0
        """Runs re-queued by this reaper (at start and since)."""
        self.refused: str | None = None
        """Why the reaper does not reap now (the node's clock is off), or None. The node
        neither leads the scheduler nor answers ``ok`` to ``/api/health`` meanwhile."""
        self.skew: timedelta | None = None
        """How far the node's clock ran ahead of the store's time at the last look."""
        self.shared = store.dialect == "postgresql"
        """A store that nodes on several hosts share: there a node whose clock is off
        also gives up the scheduler's leadership, answers ``degraded`` and records new
        runs at the store's time. A SQLite store has one host, whose clock is the store's
        time: a node's clock differs from it only when set so on purpose
        (``CADENZA_FAKE_NOW``, for demos), and only its reaper pauses."""
        self._agreed = False
        self._changes = store.data_version()
        self._quiet_at: int | None = None
        """The store's data version when a round last found no run RUNNING (None: look)."""
        self._wal_checked: float | None = None
        self._wal_warned: float | None = None

    def start(self, stack: ExitStack) -> None:
        try:
            self.reclaim_at_start()
        except Exception:  # the store may be down at start: the loop retries
            log.exception("reclaiming runs left by a previous process failed")
        self.life.spawn(stack, self._loop, "cadenza-reaper")

    def clock_agrees(self) -> bool:
        """Whether the node's clock is within ``max_skew`` of the store's time, which the
        reaper needs to act (see the module doc). Says so, in the log and as a CLOCK_SKEW
        event, when the answer changes. Raises what the store raises."""
        skew = self.store.clock_skew(self.life.clock)
        self.skew = skew
        limit = self.max_skew()
        seconds = skew.total_seconds()
        payload = {"node": self.owner, "skew_seconds": round(seconds, 3),
                   "max_clock_skew_seconds": limit.total_seconds(),
                   "store_time": self.store.lease_time}
        if abs(skew) <= limit:
            self._agreed = True
            self.store.correct_clock(None)
            if self.refused is not None:
                self.refused = None
                message = (f"the clock of node {self.owner} is back within "
                           f"{_span(limit)} of the store's time ({_span(skew)} off): its "
                           "reaper re-queues expired leases again, and it may lead the "
                           "scheduler")
                log.info("%s", message)
                self.store.append_event(EventType.CLOCK_SKEW, message, level=Level.INFO,
                                        payload={**payload, "reaping": True}, actor="reaper")
            return True
        if self.shared:
            self.store.correct_clock(skew)  # the runs it records carry the store's time
        if self.refused is None:
            side = "ahead of" if seconds > 0 else "behind"
            self.refused = (
                f"the clock of node {self.owner} is {_span(skew)} {side} the store's time, "
                f"more than [workers].max_clock_skew ({_span(limit)}): "
                + ("it neither re-queues runs (its reaper) nor leads the scheduler until the "
                   "clocks agree, and the runs it records carry the store's time "
                   if self.shared else
                   "its reaper does not re-queue any run until the clocks agree ")
                + "(set this host's clock right, e.g. with NTP; the other nodes go on)")
            log.error("reaper %s: %s", "paused" if self._agreed else "not started",
                      self.refused)
            self.store.append_event(EventType.CLOCK_SKEW, self.refused, level=Level.WARNING,
                                    payload={**payload, "reaping": False}, actor="reaper")
        return False

    @property
    def clock_off(self) -> bool:
        """Whether the node's clock is off on a shared store (see :attr:`shared`): the node
        then neither leads the scheduler nor answers ``ok``."""
        return self.shared and self.refused is not None

    def reap_once(self) -> int:
        """Re-queue the runs whose lease expired (any node's); returns how many were taken
        (0 without looking when the node's clock is off: :meth:`clock_agrees`). Loops over
        batches of :data:`~cadenza.store.run_leases.REAP_BATCH` runs."""
        if not self.clock_agrees():
            return 0
        # No run RUNNING at the last look and nothing committed since (SQLite): none can
        # be RUNNING now, nor expire; skip the read (an idle node's rounds).
        version = self._changes.token()
        if version is not None and version == self._quiet_at:
            return 0
        if not self.store.has_running_runs():
            self._quiet_at = version
            return 0
        self._quiet_at = None
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
        before their lease expires. A live process of this host keeps its runs. Nothing
        when the node's clock is off (:meth:`clock_agrees`)."""
        if not self.clock_agrees():
            return 0
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
        try:
            while not self.life.pause(self.lease().total_seconds() / 3):
                try:
                    self.reap_once()
                except Exception:  # the store may be down: try again next time
                    log.exception("reaping expired leases failed")
                try:
                    self.watch_wal()
                except Exception:  # never let the reaper die of a look at a file
                    log.exception("looking at the write-ahead log failed")
        finally:
            self._changes.close()

    def watch_wal(self, *, threshold: int = WAL_WARN_BYTES) -> WalCheck | None:
        """At most every :data:`WAL_CHECK_SECONDS`: look at the SQLite write-ahead log
        (:meth:`~cadenza.store.maintenance.MaintenanceRepository.check_wal`); when it is stuck
        past ``threshold``, warn (log and WAL_GROWING event, at most every
        :data:`WAL_WARN_EVERY` seconds). Returns the look's result when it warned."""
        now = self.life.clock.monotonic()
        if self._wal_checked is not None and now - self._wal_checked < WAL_CHECK_SECONDS:
            return None
        self._wal_checked = now
        found = self.store.check_wal(threshold)
        if found is None or not found.stuck:
            self._wal_warned = None
            return None
        if self._wal_warned is not None and now - self._wal_warned < WAL_WARN_EVERY:
            return None
        self._wal_warned = now
        log.warning("%s", found.message)
        self.store.report_wal(found, actor="reaper")
        return found


def _like_prefix(text: str) -> str:
    """``text`` with the LIKE wildcards escaped away (a host name has none, but be sure)."""
    return text.replace("%", "_").replace("\\", "_")


def _span(value: timedelta) -> str:
    """A duration for people: ``4m59.8s``, ``31.2s``, ``0.4s`` (its size, no sign)."""
    seconds = round(abs(value.total_seconds()), 1)
    minutes, rest = divmod(seconds, 60)
    if minutes >= 60:
        hours, minutes = divmod(minutes, 60)
        return f"{int(hours)}h{int(minutes):02d}m{rest:04.1f}s"
    return f"{int(minutes)}m{rest:04.1f}s" if minutes else f"{rest:.1f}s"
