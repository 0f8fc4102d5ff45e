"""The scheduler of a node, as a service (scheduler/service.py does the work).

At start, before the dispatcher may claim anything, the fires a stopped server recorded
ahead are settled by their job's ``on_missed``; then one thread ticks whenever a fire is due,
on the leader only (the store's unique fire is the real guard), and tells the dispatcher
when it created runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack

from cadenza.lifecycle import Lifecycle
from cadenza.scheduler.fires import TickResult
from cadenza.scheduler.service import Scheduler

log = logging.getLogger("cadenza.node")


class SchedulerService:
    """Runs :meth:`Scheduler.run_forever` on a thread of the node. A service."""

    name = "scheduler"

    def __init__(self, scheduler: Scheduler, life: Lifecycle,
                 on_queued: Callable[[], object] = lambda: None) -> None:
        """``on_queued`` is called after a tick that created runs (the dispatcher wakes)."""
        self.scheduler = scheduler
        self.life = life
        self.on_queued = on_queued

    def start(self, stack: ExitStack) -> None:
        # Fires recorded ahead by a server that stopped before their time follow the
        # missed-run policy; settled before the dispatcher may claim them.
        # On the node that leads (the others leave it to the leader).
        try:
            if self.scheduler.try_lead():
                self.scheduler.settle_stale(self.life.clock.now())
        except Exception:
            log.exception("settling the fires recorded ahead by a previous process failed")
        self.life.spawn(stack, self._run, "cadenza-scheduler")

    def _run(self) -> None:
        self.scheduler.run_forever(self.life.stopping, self.life.clock, on_tick=self._ticked)

    def _ticked(self, result: TickResult) -> None:
        if result.queued:
            self.on_queued()
