"""The pools' members as people see and steer them (docs/pools.md, ``cadenza resources``).

Operations::

    list(pool=None) -> list[ResourceView]     state, score, latency, cooldown, holder, region
    show(resource_id) -> ResourceDetail       the member and its recent health history
    enable(resource_id, reason=None)          DISABLED or FAULT -> AVAILABLE (an event, actor);
                                              its consecutive failed checks start again at 0
    disable(resource_id, reason=None)         any -> DISABLED (an event, actor)
    probes(per_member=12, resource_id=None)   the latest health checks of each route
    utilization(since) -> {pool: share}       share of member time LEASED or RUNNING

Listing first syncs the configured members into the store (as a node's start does), so a
home that never served shows its pools. ``enable`` and ``disable`` are operator actions:
each is a RESOURCE_STATE_CHANGED event whose actor is the person (``cli:<os user>``,
``user:<name>``). Disabling a member a run holds takes it away from that run's record (the
run goes on; the member is not returned to the pool at its end).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadenza.audit.redact import redact_url
from cadenza.domain.states import ResourceState
from cadenza.services.errors import NotFound, Refused
from cadenza.store.records import ResourceRecord

if TYPE_CHECKING:
    from cadenza.services.context import Services

HISTORY = 20
"""Health checks and state changes shown by ``resources show``."""


@dataclass(frozen=True)
class ResourceView:
    """One member as ``resources list`` shows it."""

    resource_id: str
    pool: str
    kind: str
    state: ResourceState
    score: float | None
    latency_ms: float | None
    cooldown_until: datetime | None
    holder: str | None
    """The run holding it (LEASED or RUNNING)."""
    egress_region: str | None
    route: str | None
    last_error: str | None
    proxy: str | None = None
    """A route's proxy URL, its user-info masked (:func:`cadenza.audit.redact.redact_url`)."""

    @classmethod
    def of(cls, record: ResourceRecord, proxy: str | None = None) -> ResourceView:
        """The view of ``record``; ``proxy``: the member's proxy URL from the configuration
        (shown masked)."""
        health = record.health
        cooling = health.cooldown_until if health is not None else None
        return cls(
            resource_id=record.resource_id, pool=record.pool, kind=record.kind,
            state=record.state,
            score=None if health is None else health.score,
            latency_ms=None if health is None else health.latency_ms,
            cooldown_until=cooling if record.state is ResourceState.COOLDOWN else None,
            holder=record.lease_owner,
            egress_region=None if health is None else health.egress_region,
            route=record.route_id, last_error=record.last_error,
            proxy=None if proxy is None else redact_url(proxy))

    def as_json(self) -> dict[str, Any]:
        return {"resource_id": self.resource_id, "pool": self.pool, "kind": self.kind,
                "state": self.state.value, "score": self.score, "latency_ms": self.latency_ms,
                "cooldown_until": self.cooldown_until, "holder": self.holder,
                "egress_region": self.egress_region, "route": self.route,
                "proxy": self.proxy, "last_error": self.last_error}


@dataclass(frozen=True)
class HistoryLine:
    """One recent event of a member: a health check or a change of state."""

    at: datetime
    event_type: str
    message: str
    actor: str

    def as_json(self) -> dict[str, Any]:
        return {"at": self.at, "event_type": self.event_type, "message": self.message,
                "actor": self.actor}


@dataclass(frozen=True)
class ProbePoint:
    """One health check of a route, for the resources page's sparkline."""

    at: datetime
    ok: bool
    score: float | None
    latency_ms: float | None


Probes = dict[str, list[ProbePoint]]
"""The latest health checks of each route, by resource id, oldest first."""


@dataclass(frozen=True)
class ResourceDetail:
    """``resources show``: the member, its health figures and its recent history."""

    view: ResourceView
    health: dict[str, Any]
    history: tuple[HistoryLine, ...]

    def as_json(self) -> dict[str, Any]:
        return {**self.view.as_json(), "health": self.health,
                "history": [line.as_json() for line in self.history]}


class ResourceService:
    """The operations of the module docstring."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def _synced(self) -> None:
        from cadenza.resources.plan import PoolPlan
        from cadenza.resources.pools import sync_members

        sync_members(self.services.store(), PoolPlan.of(self.services.config()),
                     actor=self.services.actor.id)

    def list(self, pool: str | None = None) -> list[ResourceView]:
        """Members (of ``pool``), by pool then id. NotFound for an unknown pool."""
        self._synced()
        config = self.services.config()
        if pool is not None and pool not in config.settings.pools:
            known = ", ".join(sorted(config.settings.pools)) or "none"
            raise NotFound(f"no pool {pool!r} (pools: {known})")
        proxies = self._proxies()
        return [ResourceView.of(r, proxies.get(r.resource_id))
                for r in self.services.store().list_resources(pool)]

    def _proxies(self) -> dict[str, str]:
        """Member id -> its proxy URL (routes), from the configuration."""
        return {m.id: m.proxy for p in self.services.config().settings.pools.values()
                for m in p.members if m.proxy}

    def _record(self, resource_id: str) -> ResourceRecord:
        self._synced()
        record = self.services.store().get_resource(resource_id)
        if record is None:
            raise NotFound(f"no resource {resource_id!r} (see `cadenza resources list`)")
        return record

    def show(self, resource_id: str) -> ResourceDetail:
        """The member with its health figures and its :data:`HISTORY` latest events."""
        record = self._record(resource_id)
        health: dict[str, Any] = {}
        if record.health is not None:
            health = {name: getattr(record.health, name)
                      for name in record.health.__dataclass_fields__}
        events = self.services.store().list_events(resource_id=resource_id, limit=HISTORY,
                                                   newest_first=True)
        history = tuple(HistoryLine(e.created_at, str(e.event_type), e.message, e.actor)
                        for e in events)
        return ResourceDetail(ResourceView.of(record, self._proxies().get(resource_id)),
                              health, history)

    def enable(self, resource_id: str, reason: str | None = None) -> ResourceView:
        """DISABLED (or FAULT) -> AVAILABLE; Refused from any other state."""
        record = self._record(resource_id)
        if record.state not in (ResourceState.DISABLED, ResourceState.FAULT):
            raise Refused(f"resource {resource_id} is {record.state.value}: only a DISABLED "
                          "or FAULT member can be enabled")
        return self._move(resource_id, ResourceState.AVAILABLE, reason or "enabled",
                          fresh=record)

    def disable(self, resource_id: str, reason: str | None = None) -> ResourceView:
        """Any state -> DISABLED; Refused when it is DISABLED already."""
        record = self._record(resource_id)
        if record.state is ResourceState.DISABLED:
            raise Refused(f"resource {resource_id} is DISABLED already")
        return self._move(resource_id, ResourceState.DISABLED, reason or "disabled")

    def _move(self, resource_id: str, to: ResourceState, reason: str,
              fresh: ResourceRecord | None = None) -> ResourceView:
        """Move the member; ``fresh`` (enable: the record as read) also starts its count
        of consecutive failed health checks again, in the same transaction, so that its
        old count does not disable it at its next failure."""
        from cadenza.domain.health import score

        store = self.services.store()
        actor = self.services.actor.id
        why = f"{reason} by {actor}"
        health = fresh.health if fresh is not None else None
        reset = health is not None and health.consecutive_failures > 0
        if reset and health is not None:
            why += f"; consecutive failed health checks reset (were {health.consecutive_failures})"
        with store.write() as conn:
            moved = store.transition_resource(resource_id, to, actor=actor, reason=why,
                                              conn=conn)
            if moved and reset and health is not None:
                store.update_resource_health(resource_id, {
                    "consecutive_failures": 0, "cooldown_until": None,
                    "score": score(health.latency_ms, 0, health.recent_timeouts)},
                    conn=conn)
        if not moved:
            now = store.get_resource(resource_id)
            state = now.state.value if now is not None else "gone"
            raise Refused(f"resource {resource_id} changed meanwhile (now {state}); try again")
        record = store.get_resource(resource_id)
        assert record is not None
        return ResourceView.of(record, self._proxies().get(resource_id))

    def probes(self, per_member: int = 12, resource_id: str | None = None,
               scan: int = 2000) -> Probes:
        """The latest ``per_member`` health checks of each route (of ``resource_id``),
        oldest first: one read of the newest ``scan`` HEALTH_CHECKED events."""
        from cadenza.domain.events import EventType

        rows = self.services.store().list_events(
            event_type=EventType.HEALTH_CHECKED, resource_id=resource_id, limit=scan,
            newest_first=True)
        found: Probes = {}
        for event in rows:
            if event.resource_id is None:
                continue
            points = found.setdefault(event.resource_id, [])
            if len(points) >= per_member:
                continue
            payload = event.payload if isinstance(event.payload, dict) else {}
            points.append(ProbePoint(event.created_at, bool(payload.get("ok")),
                                     _number(payload.get("score")),
                                     _number(payload.get("latency_ms"))))
        return {rid: points[::-1] for rid, points in found.items()}

    def utilization(self, since: datetime, scan: int = 20000,
                    members: Sequence[ResourceView] | None = None) -> dict[str, float]:
        """Each pool's share of member time spent LEASED or RUNNING since ``since`` (the
        dashboard's utilization), from the RESOURCE_LEASED and RESOURCE_RELEASED events of
        the window (two reads) and the members' state now (``members``: as :meth:`list` just
        gave them)."""
        from cadenza.domain.events import EventType

        store = self.services.store()
        now = self.services.clock.now()
        members = self.list() if members is None else members
        busy = {ResourceState.LEASED, ResourceState.RUNNING}
        changes: list[tuple[datetime, str, bool]] = []
        for kind, taken in ((EventType.RESOURCE_LEASED, True),
                            (EventType.RESOURCE_RELEASED, False)):
            for event in store.list_events(event_type=kind, since=since, limit=scan,
                                           resources_only=True):
                if event.resource_id is not None:
                    changes.append((event.created_at, event.resource_id, taken))
        changes.sort(key=lambda c: c[0])
        held: dict[str, datetime] = {}
        used: dict[str, float] = {}
        seen: set[str] = set()
        for at, rid, taken in changes:
            if taken:
                held[rid] = at
            else:
                start = held.pop(rid, None) or (since if rid not in seen else at)
                used[rid] = used.get(rid, 0.0) + max(0.0, (at - start).total_seconds())
            seen.add(rid)
        window = max(1.0, (now - since).total_seconds())
        totals: dict[str, list[float]] = {}
        for member in members:
            rid = member.resource_id
            seconds = used.get(rid, 0.0)
            if rid in held:
                seconds += (now - held[rid]).total_seconds()
            elif member.state in busy and rid not in seen:
                seconds = window  # held the whole window
            pool = totals.setdefault(member.pool, [0.0, 0.0])
            pool[0] += min(seconds, window)
            pool[1] += window
        return {pool: round(s / w, 4) if w else 0.0 for pool, (s, w) in totals.items()}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None
