"""Probe one route now, on an operator's request (``cadenza resources probe ID``).

The same probe and the same recording as the node's health checks
(:mod:`cadenza.resources.health`): the three phases through the route's proxy, the health
row, the HTTP_REQUEST and HEALTH_CHECKED events (with the actor) in one transaction. The
route's state moves as a scheduled probe would move it when it is in a probed state
(AVAILABLE, COOLDOWN even before its cooldown ends, FAULT); a LEASED or RUNNING route (a run
uses it) and a DISABLED one (only ``resources enable`` brings it back) keep their state and
get their health recorded. A route of a pool without ``[pools.NAME.health]`` is probed with
the defaults (:func:`~cadenza.resources.health.health_of`): TCP connect only, 5 s timeout.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadenza.domain.health import PROBED_STATES
from cadenza.domain.states import ResourceState
from cadenza.lifecycle import Lifecycle
from cadenza.resources.health import HealthChecker, Target, health_of, route_of
from cadenza.resources.probe import probe_route
from cadenza.services.errors import InvalidRequest, NotFound

if TYPE_CHECKING:
    from cadenza.services.context import Services


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """What a probe found and did: the state before and after, the outcome, the health."""

    resource_id: str
    pool: str
    before: ResourceState
    after: ResourceState
    ok: bool
    phase: int | None
    error_type: str | None
    error: str | None
    latency_ms: float | None
    score: float | None
    egress_ip: str | None
    egress_region: str | None
    expected_region: str | None
    cooldown_until: datetime | None

    def as_json(self) -> dict[str, Any]:
        """JSON-ready fields (states and times as text)."""
        data = asdict(self)
        data["before"], data["after"] = self.before.value, self.after.value
        data["cooldown_until"] = None if self.cooldown_until is None \
            else self.cooldown_until.isoformat()
        return data


class ProbeService:
    """``probe(resource_id)`` for the CLI and the API."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def probe(self, resource_id: str) -> ProbeReport:
        """Probe the route ``resource_id`` now and record it (module doc). Raises
        :class:`NotFound` (no such resource, or no longer in the configuration) and
        :class:`InvalidRequest` (not a route)."""
        services = self.services
        settings = services.config().settings
        store = services.store()
        record = store.get_resource(resource_id)
        if record is None:
            raise NotFound(f"no resource {resource_id!r} (see `cadenza resources list`)")
        if record.kind != "route":
            raise InvalidRequest(f"resource {resource_id!r} is a {record.kind}, not a route: "
                                 f"only routes are probed")
        pool = settings.pools.get(record.pool)
        route = None if pool is None else route_of(record, pool)
        if pool is None or route is None:
            raise NotFound(f"resource {resource_id!r} (pool {record.pool!r}) is no longer in "
                           f"cadenza.toml")
        health = health_of(pool)
        checker = HealthChecker(store, Lifecycle(services.clock), lambda: settings)
        probe = probe_route(route, health, services.clock)
        checked = checker.record(Target(record, route, pool, health), probe,
                                 actor=str(services.actor),
                                 transitions=record.state in PROBED_STATES)
        after = store.get_resource(resource_id)
        row = after.health if after is not None else None
        outcome = probe.outcome
        return ProbeReport(
            resource_id, record.pool, checked.before, checked.after, outcome.ok, outcome.phase,
            outcome.error_type, outcome.error, None if row is None else row.latency_ms,
            checked.score, outcome.egress_ip, outcome.egress_region, route.region,
            None if row is None else row.cooldown_until)
