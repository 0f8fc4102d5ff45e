"""Cooldowns that end at their time: one service of the node (docs/pools.md, "Cooldown").

A member goes COOLDOWN when a run gives it back (until ``now + cooldown``) or, for a route,
when its health score falls below the threshold. Without this service the state would stay
COOLDOWN until a claim looked at the member again, and the resources pages, ``cadenza
resources list``, ``/metrics`` and the dashboard, which all read the store, would show a
cooldown that is over. :class:`CooldownEnds` makes the stored state true at the end:

* a **route** of a route pool is probed once more by the health checker (the seed's "after
  the cooldown, probe once more"): :meth:`HealthChecker.wake` makes it do a round, whose
  probe of the route (due at its ``cooldown_until``) brings it back AVAILABLE when it
  passes, or keeps it cooling down (DISABLED after ``disable_after`` failures) when it does
  not;
* any **other member** (a unit, a credential) goes COOLDOWN -> AVAILABLE, "cooldown over",
  fenced by its lease epoch (a claim that leased it meanwhile wins).

Each round reads the COOLDOWN members (one small query), acts on those whose cooldown has
ended, and waits on the clock until the next end, at most :data:`LOOK` (a cooldown begun
meanwhile, by this process or another, is seen within that time). On PostgreSQL only the
node that runs the health checks does this (the scheduler's leader), as they share the
members; on SQLite the node does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from typing import TYPE_CHECKING

from cadenza.config.schema_settings import Settings
from cadenza.domain.states import ResourceState
from cadenza.lifecycle import Lifecycle
from cadenza.resources.releases import at_utc

if TYPE_CHECKING:
    from cadenza.resources.health import HealthChecker
    from cadenza.store.protocols import PoolStore

log = logging.getLogger(__name__)

LOOK = 1.0
"""Seconds between two reads of the COOLDOWN members, at most."""
IDLE = 60.0
"""Seconds between two looks when the configuration has no pool (or this node does not
lead)."""
MIN_WAIT = 0.05
"""The shortest wait (a cooldown ending within it is handled at the next round)."""


class CooldownEnds:
    """The node's cooldown service (module doc). ``settings()`` gives the configuration in
    force; ``checker`` probes the routes and says whether this node leads."""

    name = "cooldowns"

    def __init__(self, store: PoolStore, life: Lifecycle, settings: Callable[[], Settings],
                 checker: HealthChecker) -> None:
        self.store = store
        self.life = life
        self.settings = settings
        self.checker = checker
        self.rounds = 0
        """Rounds done (tests wait on it)."""
        self.ended = 0
        """Members this service brought back to AVAILABLE (not counting probes)."""

    def start(self, stack: ExitStack) -> None:
        """Start the loop on its thread; the stack joins it."""
        self.life.spawn(stack, self._loop, "cadenza-cooldowns")

    def _loop(self) -> None:
        while not self.life.stopping.is_set():
            try:
                wait = self.round()
            except Exception:  # a store outage must not end the loop; the next round retries
                log.exception("cooldowns: the round failed")
                wait = IDLE
            if self.life.pause(wait):
                return

    def round(self) -> float:
        """End the cooldowns that are over now; returns the seconds to wait."""
        settings = self.settings()
        if not settings.pools or not self.checker.leads():
            self.rounds += 1
            return IDLE
        clock = self.life.clock
        now = clock.now()
        nearest: datetime | None = None
        probe = False
        for record in self.store.list_resources(state=ResourceState.COOLDOWN):
            health = record.health
            until = health.cooldown_until if health is not None else None
            if until is not None and until > now:
                nearest = until if nearest is None else min(nearest, until)
                continue
            if self.checker.probes(settings, record):
                # Probed once more; until the probe is written the member is still
                # COOLDOWN with its end passed: the checker's round picks it (due_at).
                probe = True
                continue
            why = "cooldown over" + (f" (until {at_utc(until)})" if until is not None else "")
            if self.store.transition_resource(record.resource_id, ResourceState.AVAILABLE,
                                              reason=why, epoch=record.lease_epoch):
                self.ended += 1
        if probe:
            self.checker.wake()
        self.rounds += 1
        wait = LOOK if nearest is None else (nearest - clock.now()).total_seconds()
        return max(MIN_WAIT, min(LOOK, wait))
