"""Simulation: which runs would fire over an interval, and which admission rule holds each.

Operations::

    simulate(start, end) -> list[SimulatedFire]    nothing runs and nothing is written
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadenza.services.errors import InvalidRequest
from cadenza.services.timeparse import parse_instant

if TYPE_CHECKING:
    from cadenza.scheduler.simulate import SimulatedFire
    from cadenza.services.context import Services

INSTANT_EXAMPLE = "an ISO date or time like 2027-03-27 or 2027-03-27T12:00:00+01:00"


class SimulateService:
    def __init__(self, services: Services) -> None:
        self.services = services

    def simulate(self, start: str, end: str) -> list[SimulatedFire]:
        """Replay the schedules and admission rules over ``[start, end)`` (ISO; the server's
        zone without offset) on a virtual clock. Runs last their job's median duration from
        history (1 minute without history)."""
        from cadenza.config.admission_limits import limits_from_loaded
        from cadenza.resources.plan import PoolPlan
        from cadenza.scheduler.schedules import server_zone
        from cadenza.scheduler.simulate import (
            SimulatedPool,
            SimulationTooLarge,
            history_durations,
            simulate,
        )

        begin = parse_instant(start, "--from", INSTANT_EXAMPLE)
        finish = parse_instant(end, "--to", INSTANT_EXAMPLE)
        if finish <= begin:
            raise InvalidRequest("--to must come after --from")
        config = self.services.config()
        durations = history_durations(self.services.store(), list(config.jobs))
        try:
            plan = PoolPlan.of(config)
            pools = {name: SimulatedPool(len(pool.members), pool.cooldown)
                     for name, pool in config.settings.pools.items()}
            return simulate(config.jobs, limits_from_loaded(config), begin, finish,
                            workers=config.settings.workers.count, durations=durations,
                            default_zone=server_zone(), needs=plan.peak, pools=pools,
                            calendars=config.settings.calendar_objects)
        except SimulationTooLarge as exc:
            raise InvalidRequest(str(exc)) from None
