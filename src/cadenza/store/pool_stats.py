"""The dashboard's pool figures over a window: resource utilization per pool (the share of the
window its members spent LEASED or RUNNING, and RUNNING alone), members by state now, and
the resources cooling down now.

Utilization is rebuilt from the audit log: every change of a member's state is an event
(RESOURCE_LEASED, RESOURCE_RELEASED, RESOURCE_STATE_CHANGED, each with ``from`` and ``to``
in its payload, written in the transaction of the change). For each member, its state at
the window's start is the ``from`` of its first event in the window (its current state when
it had none), and each event starts a new interval. A pool's share is its members' held
seconds over ``members × window``; members are those of the pool now plus those removed
during the window. Retention pruning the window's events makes the figure unknown
(a window longer than the retained events counts what is left).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from cadenza.domain.events import EventType
from cadenza.store.tables import event_log, resource_health, resources

if TYPE_CHECKING:
    from cadenza.store.protocols import Transactions

HELD = frozenset({"LEASED", "RUNNING"})
_CHANGES = (EventType.RESOURCE_LEASED.value, EventType.RESOURCE_RELEASED.value,
            EventType.RESOURCE_STATE_CHANGED.value)


@dataclass(frozen=True)
class PoolUse:
    """One pool over the window."""

    pool: str
    members: int
    held_seconds: float
    running_seconds: float
    window_seconds: float
    by_state: dict[str, int]

    def share(self, seconds: float) -> float | None:
        capacity = self.members * self.window_seconds
        return None if capacity <= 0 else round(min(1.0, seconds / capacity), 4)

    def as_json(self) -> dict[str, Any]:
        return {"members": self.members, "by_state": self.by_state,
                "leased_share": self.share(self.held_seconds),
                "running_share": self.share(self.running_seconds),
                "leased_seconds": round(self.held_seconds, 3),
                "running_seconds": round(self.running_seconds, 3)}


@dataclass(frozen=True)
class Cooling:
    """A member in COOLDOWN now, and until when (None: not recorded)."""

    resource_id: str
    pool: str
    until: datetime | None

    def as_json(self) -> dict[str, Any]:
        return {"resource": self.resource_id, "pool": self.pool, "until": self.until}


@dataclass(frozen=True)
class PoolStats:
    """Utilization per pool and the members cooling down now."""

    pools: dict[str, PoolUse]
    cooling: list[Cooling]


def pool_stats(store: Transactions, since: datetime, now: datetime) -> PoolStats:
    """The pool figures of the window ``[since, now]`` (see the module docstring)."""
    with store.read() as c:
        members = c.execute(
            sa.select(resources.c.resource_id, resources.c.pool, resources.c.state,
                      resource_health.c.cooldown_until)
            .select_from(resources.outerjoin(
                resource_health, resource_health.c.resource_id == resources.c.resource_id))
            .order_by(resources.c.pool, resources.c.resource_id)).all()
        changes = c.execute(
            sa.select(event_log.c.resource_id, event_log.c.created_at,
                      event_log.c.payload_json)
            .where(event_log.c.resource_id.is_not(None),
                   event_log.c.event_type.in_(_CHANGES),
                   event_log.c.created_at >= since, event_log.c.created_at <= now)
            .order_by(event_log.c.event_id)).all()
    pool_of = {rid: pool for rid, pool, _state, _until in members}
    state_now = {rid: state for rid, _pool, state, _until in members}
    timeline: dict[str, list[tuple[datetime, str | None, str | None]]] = defaultdict(list)
    for rid, at, payload_json in changes:
        payload = _payload(payload_json)
        if "pool" in payload and rid not in pool_of and isinstance(payload["pool"], str):
            pool_of[rid] = payload["pool"]
        if payload.get("removed"):
            timeline[rid].append((at, None, None))
        elif "to" in payload:
            frm, to = payload.get("from"), payload.get("to")
            timeline[rid].append((at, frm if isinstance(frm, str) else None,
                                  to if isinstance(to, str) else None))
    window = max(0.0, (now - since).total_seconds())
    held: defaultdict[str, float] = defaultdict(float)
    running: defaultdict[str, float] = defaultdict(float)
    counted: Counter[str] = Counter()
    for rid, pool in pool_of.items():
        counted[pool] += 1
        steps = timeline.get(rid, [])
        state = steps[0][1] if steps else state_now.get(rid)
        start = since
        for at, _frm, to in steps:
            _add(held, running, pool, state, (at - start).total_seconds())
            start, state = at, to
        _add(held, running, pool, state, (now - start).total_seconds())
    by_state: dict[str, Counter[str]] = defaultdict(Counter)
    for _rid, pool, state, _until in members:
        by_state[pool][state] += 1
    pools = {pool: PoolUse(pool, counted[pool], held[pool], running[pool], window,
                           dict(sorted(by_state[pool].items())))
             for pool in sorted(counted)}
    cooling = [Cooling(rid, pool, until) for rid, pool, state, until in members
               if state == "COOLDOWN"]
    return PoolStats(pools, cooling)


def _add(held: defaultdict[str, float], running: defaultdict[str, float], pool: str,
         state: str | None, seconds: float) -> None:
    if state in HELD and seconds > 0:
        held[pool] += seconds
        if state == "RUNNING":
            running[pool] += seconds


def _payload(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
