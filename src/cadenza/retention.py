"""The daily retention sweep of ``cadenza serve`` (``[retention]``, docs/backup.md).

:class:`RetentionSweeper` calls :meth:`~cadenza.store.maintenance.MaintenanceRepository.prune`
with the current ``[retention]`` settings (``days``, ``keep_last_per_job``): once shortly
after start (:data:`FIRST_DELAY`, so that a start is not slowed by a large first prune), then
every :data:`INTERVAL`. What it deletes, and what it never touches (QUEUED, RUNNING and
NEEDS_REVIEW runs), is the store's rule; this module only decides *when* and *who*.

Who: on PostgreSQL several nodes share one store, and only one should sweep. The sweeper
sweeps only while the scheduler's leadership (``node.leader``) says this node leads; a node
without a scheduler (``--no-scheduler``) never sweeps. Two sweeps at once would still be
safe (each DELETE is conditional), only wasteful.

When: wall time of the injected :class:`~cadenza.clock.Clock` decides, and the loop waits
through it (``clock.wait``: a ``FakeClock`` drives it), at most :data:`POLL_SECONDS` at a
time so that a step of the wall clock is noticed; a stop ends the wait at once. A failed
sweep (store unavailable) is logged and tried again after :data:`RETRY_AFTER`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from cadenza.clock import Clock

if TYPE_CHECKING:
    from cadenza.config.schema_settings import RetentionSettings
    from cadenza.store.maintenance import MaintenanceRepository, PruneReport

log = logging.getLogger("cadenza.retention")

FIRST_DELAY = timedelta(minutes=5)
INTERVAL = timedelta(days=1)
RETRY_AFTER = timedelta(minutes=15)
POLL_SECONDS = 60.0


class _Leading(Protocol):
    @property
    def is_leader(self) -> bool: ...


class RetentionSweeper:
    """Prunes the store once a day on the leader node (see the module doc)."""

    def __init__(self, store: MaintenanceRepository,
                 settings: Callable[[], RetentionSettings], clock: Clock, *,
                 leader: _Leading | None = None, first_delay: timedelta = FIRST_DELAY,
                 interval: timedelta = INTERVAL) -> None:
        """``settings`` is called at each sweep, so a reloaded ``[retention]`` applies to the
        next one. ``leader``: sweep only while it leads (None: always, one process)."""
        self.store = store
        self.settings = settings
        self.clock = clock
        self.leader = leader
        self.interval = interval
        self.next_at: datetime = clock.now() + first_delay
        self.last: PruneReport | None = None

    def due(self, now: datetime) -> bool:
        """Whether a sweep is due at ``now``."""
        return now >= self.next_at

    def sweep_once(self, now: datetime) -> PruneReport | None:
        """Prune now with the current settings, if this node leads; the next sweep is then
        due one interval later. Returns the report (None when another node leads)."""
        self.next_at = now + self.interval
        if self.leader is not None and not self.leader.is_leader:
            log.debug("retention sweep skipped: another node leads")
            return None
        settings = self.settings()
        report = self.store.prune(days=settings.days, keep_last=settings.keep_last_per_job,
                                  now=now)
        self.last = report
        if report.runs or report.events:
            log.info("retention: pruned %d run(s) and %d event(s) older than %s in %.1fs",
                     report.runs, report.events, report.cutoff.isoformat(), report.seconds)
        return report

    def tick(self) -> PruneReport | None:
        """Sweep if due (a failure is logged and retried after :data:`RETRY_AFTER`)."""
        now = self.clock.now()
        if not self.due(now):
            return None
        try:
            return self.sweep_once(now)
        except Exception:  # the store may be down: the loop must not die of it
            log.exception("retention sweep failed (retrying in %s)", RETRY_AFTER)
            self.next_at = now + RETRY_AFTER
            return None

    def run_forever(self, stop_event: threading.Event, *,
                    wait: Callable[[float], object] | None = None) -> None:
        """Tick until ``stop_event`` is set, waiting on the clock between ticks;
        ``wait(seconds)`` replaces that wait (a test may pass ``FakeClock.sleep``)."""

        def pause(seconds: float) -> object:
            return self.clock.wait(stop_event, seconds)

        sleep = wait or pause
        while not stop_event.is_set():
            self.tick()
            remaining = (self.next_at - self.clock.now()).total_seconds()
            sleep(min(max(remaining, 0.0), POLL_SECONDS))
