"""Route health checks: one service of the node (docs/health-checks.md).

Every round, for each route pool (its ``[pools.NAME.health]`` table, or the defaults: a
TCP connect every 60 s), the checker probes the
routes that are due (:func:`cadenza.domain.health.due_at`: AVAILABLE and FAULT routes an
``interval`` after their last check, COOLDOWN routes once their cooldown ends; never a
LEASED, RUNNING or DISABLED one), at most ``concurrency`` at a time on a thread pool, each
with :func:`cadenza.resources.probe.probe_route`. For each probe, in one transaction: the
health row (:meth:`update_resource_health`), the transitions of
:func:`cadenza.domain.health.judge` (fenced by the lease epoch read before the probe, so a
route leased meanwhile is left alone), one HTTP_REQUEST event per request of the probe and
one HEALTH_CHECKED event with the details. Then the loop waits on the clock until the next
route is due (at most the shortest interval), so a FakeClock drives it.

On PostgreSQL only the scheduler's leader probes (several nodes share the routes); on SQLite
(one host) the node probes. ``recent_timeouts`` counts the probes that timed out in the last
hour: kept in memory, seeded from the HEALTH_CHECKED events of that hour the first time a
route is seen (a restart or a new leader loses nothing).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from cadenza.clock import Clock
from cadenza.config.schema_settings import Pool, PoolHealth, Settings
from cadenza.domain.events import EventType, Level
from cadenza.domain.health import (
    PROBED_STATES,
    RECENT,
    TIMEOUT,
    Previous,
    Verdict,
    due_at,
    judge,
)
from cadenza.domain.states import ResourceState
from cadenza.lifecycle import Lifecycle
from cadenza.resources.egress import shown_proxy
from cadenza.resources.leased import LeasedResource
from cadenza.resources.probe import Probe, probe_route
from cadenza.store.records import ResourceRecord

if TYPE_CHECKING:
    from cadenza.store.protocols import PoolStore

log = logging.getLogger(__name__)

IDLE_WAIT = 60.0
"""Seconds between two looks when there is no route pool (or this node does not lead)."""
MIN_WAIT = 1.0
"""The shortest wait between two rounds (a route due in the past is probed at once)."""


class _Leading(Protocol):
    @property
    def is_leader(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Target:
    """A route to probe: its record before the probe, as a step would see it, its pool."""

    record: ResourceRecord
    route: LeasedResource
    pool: Pool
    health: PoolHealth


@dataclass(frozen=True, slots=True)
class Checked:
    """What one probe did: the route, the state before and after, the outcome's fields."""

    resource_id: str
    before: ResourceState
    after: ResourceState
    ok: bool
    score: float
    error_type: str | None


def health_of(pool: Pool) -> PoolHealth:
    """The pool's health settings; the defaults for a route pool without a health table
    (a TCP connect to the proxy every 60 s)."""
    return pool.health if pool.health is not None else PoolHealth()


def route_of(record: ResourceRecord, pool: Pool) -> LeasedResource | None:
    """The pool member of ``record`` as a route (None when the config no longer has it)."""
    for member in pool.members:
        if member.id == record.resource_id:
            return LeasedResource(resource_id=record.resource_id, pool=record.pool,
                                  kind=record.kind, proxy=member.proxy, region=member.region,
                                  fields=dict(member.fields), route=None)
    return None


class HealthChecker:
    """The node's health-check service (module doc). ``settings()`` gives the configuration
    in force (a reload changes it); ``leader`` is the scheduler's leadership."""

    name = "health"

    def __init__(self, store: PoolStore, life: Lifecycle, settings: Callable[[], Settings], *,
                 leader: _Leading | None = None,
                 probe: Callable[[LeasedResource, PoolHealth, Clock], Probe] = probe_route
                 ) -> None:
        self.store = store
        self.life = life
        self.settings = settings
        self.leader = leader
        self._probe = probe
        self._postgres = store.engine.dialect.name == "postgresql"
        self._timeouts: dict[str, list[datetime]] = {}
        self._lock = threading.Lock()
        self._wake = life.wake_on_stop(threading.Event())
        self.rounds = 0
        """Rounds done (tests wait on it)."""

    @property
    def clock(self) -> Clock:
        return self.life.clock

    def start(self, stack: ExitStack) -> None:
        """Start the loop on its thread; the stack joins it."""
        self.life.spawn(stack, self._loop, "cadenza-health")

    def wake(self) -> None:
        """Do a round now (the cooldown watch: a route's cooldown that began after this
        loop planned its wait has ended)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self.life.stopping.is_set():
            self._wake.clear()
            try:
                wait = self.round()
            except Exception:  # a store outage must not end the checks; next round retries
                log.exception("health checks: the round failed")
                wait = IDLE_WAIT
            self.clock.wait(self._wake, wait)

    def probes(self, settings: Settings, record: ResourceRecord) -> bool:
        """Whether this checker probes ``record`` (a route of a route pool of
        ``settings`` that still lists it), when it leads."""
        pool = settings.pools.get(record.pool)
        return (record.kind == "route" and pool is not None and pool.kind == "route"
                and route_of(record, pool) is not None)

    def leads(self) -> bool:
        """Whether this node probes: always on SQLite, the scheduler's leader on PostgreSQL."""
        if not self._postgres:
            return True
        return self.leader is not None and self.leader.is_leader

    # -- one round ------------------------------------------------------------------------

    def round(self) -> float:
        """Probe every route due now; returns the seconds until the next one is due."""
        settings = self.settings()
        pools = {name: pool for name, pool in settings.pools.items() if pool.kind == "route"}
        if not pools or not self.leads():
            self.rounds += 1
            return IDLE_WAIT
        now = self.clock.now()
        due = [t for t in self.targets(pools) if self._due(t, now) <= now]
        self.check(due)
        self.rounds += 1
        return self._next_wait(pools)

    def targets(self, pools: dict[str, Pool]) -> list[Target]:
        """The routes of ``pools`` in a probed state, with their configuration."""
        out: list[Target] = []
        for record in self.store.list_resources():
            pool = pools.get(record.pool)
            if pool is None or record.kind != "route" or record.state not in PROBED_STATES:
                continue
            route = route_of(record, pool)
            if route is not None:
                out.append(Target(record, route, pool, health_of(pool)))
        return out

    def _due(self, target: Target, now: datetime) -> datetime:
        health = target.record.health
        when = due_at(target.record.state, health.last_checked_at if health else None,
                      health.cooldown_until if health else None, target.health.interval, now)
        return now if when is None else when

    def _next_wait(self, pools: dict[str, Pool]) -> float:
        now = self.clock.now()
        shortest = min(health_of(p).interval for p in pools.values())
        nearest = now + shortest
        for target in self.targets(pools):
            nearest = min(nearest, self._due(target, now))
        return max(MIN_WAIT, (nearest - now).total_seconds())

    def check(self, targets: Iterable[Target]) -> list[Checked]:
        """Probe ``targets`` (at most their pool's ``concurrency`` at once) and record each
        as it ends; returns what each did, in the order they ended."""
        todo = list(targets)
        if not todo:
            return []
        width = min(len(todo), max(t.health.concurrency for t in todo))
        gates = {t.record.pool: threading.BoundedSemaphore(t.health.concurrency)
                 for t in todo}

        def run(target: Target) -> tuple[Target, Probe]:
            with gates[target.record.pool]:
                return target, self._probe(target.route, target.health, self.clock)

        self._seed_all(todo)
        done: list[Checked] = []
        with ThreadPoolExecutor(width, thread_name_prefix="cadenza-probe") as pool:
            pending = {pool.submit(run, target) for target in todo}
            while pending:
                # Whatever ended meanwhile is written in one transaction (each probe's
                # events with its health row), so the writes keep up with the probes.
                ended, pending = wait(pending, return_when=FIRST_COMPLETED)
                done += self.record_many([future.result() for future in ended])
        return done

    # -- recording ------------------------------------------------------------------------

    def record(self, target: Target, probe: Probe, *, actor: str = "system",
               transitions: bool = True) -> Checked:
        """Write one probe: health row, transitions (unless ``transitions`` is False),
        HTTP_REQUEST and HEALTH_CHECKED events, in one transaction."""
        return self.record_many([(target, probe)], actor=actor, transitions=transitions)[0]

    def record_many(self, probes: list[tuple[Target, Probe]], *, actor: str = "system",
                    transitions: bool = True) -> list[Checked]:
        """:meth:`record` for several probes, in one transaction."""
        with self.store.write() as conn:
            return [self._write(target, probe, actor, transitions, conn)
                    for target, probe in probes]

    def _write(self, target: Target, probe: Probe, actor: str, transitions: bool, conn: Any
               ) -> Checked:
        record, route, health = target.record, target.route, target.health
        outcome = probe.outcome
        now = self.clock.now()
        recent = self._recent_timeouts(record.resource_id, now, outcome.error_type == TIMEOUT)
        old = record.health
        before = Previous() if old is None else Previous(
            old.consecutive_successes, old.consecutive_failures, old.cooldown_until,
            old.egress_ip, old.egress_region)
        verdict = judge(record.state, before, outcome, recent_timeouts=recent, now=now,
                        timeout=health.timeout, threshold=health.threshold,
                        cooldown=target.pool.cooldown, disable_after=health.disable_after)
        state = record.state
        self.store.update_resource_health(record.resource_id, verdict.fields, conn=conn)
        if transitions:
            state = self._move(record, verdict, actor, conn)
        for request in probe.requests:
            self.store.append_event(
                EventType.HTTP_REQUEST,
                f"{request.method} {request.host}: {request.status or request.error} "
                f"(health check of {record.resource_id})",
                resource_id=record.resource_id, payload=request.payload(route),
                level=Level.INFO if request.error is None else Level.WARNING,
                actor=actor, conn=conn)
        self.store.append_event(
            EventType.HEALTH_CHECKED, _message(record, route, verdict, outcome.ok, state,
                                               outcome.error_type, outcome.error),
            resource_id=record.resource_id,
            payload=_payload(record, route, verdict, outcome, state),
            level=Level.INFO if outcome.ok else Level.WARNING, actor=actor, conn=conn)
        return Checked(record.resource_id, record.state, state, outcome.ok,
                       float(verdict.fields["score"]),  # type: ignore[arg-type]
                       outcome.error_type)

    def _move(self, record: ResourceRecord, verdict: Verdict, actor: str, conn: Any
              ) -> ResourceState:
        state = record.state
        for to, reason in verdict.transitions:
            fields = {"last_error": reason} if to is ResourceState.DISABLED else None
            if not self.store.transition_resource(record.resource_id, to, actor=actor,
                                                  reason=reason, fields=fields,
                                                  epoch=record.lease_epoch, conn=conn):
                break  # leased or changed by an operator meanwhile: theirs wins
            state = to
        return state

    def _seed_all(self, targets: list[Target]) -> None:
        """Read the last hour's timeouts of the routes not seen yet, in one query."""
        with self._lock:
            new = {t.record.resource_id for t in targets} - set(self._timeouts)
        if not new:
            return
        since = self.clock.now() - RECENT
        seen: dict[str, list[datetime]] = {rid: [] for rid in new}
        for event in self.store.list_events(event_type=EventType.HEALTH_CHECKED, since=since,
                                            limit=1_000_000, resources_only=True):
            if event.resource_id in seen and isinstance(event.payload, dict) \
                    and event.payload.get("error_type") == TIMEOUT:
                seen[event.resource_id].append(event.created_at)
        with self._lock:
            for rid, times in seen.items():
                self._timeouts.setdefault(rid, times)

    def _recent_timeouts(self, resource_id: str, now: datetime, timed_out: bool) -> int:
        with self._lock:
            if resource_id not in self._timeouts:
                self._timeouts[resource_id] = self._seed(resource_id, now)
            kept = [t for t in self._timeouts[resource_id] if t > now - RECENT]
            if timed_out:
                kept.append(now)
            self._timeouts[resource_id] = kept
            return len(kept)

    def _seed(self, resource_id: str, now: datetime) -> list[datetime]:
        events = self.store.list_events(resource_id=resource_id,
                                        event_type=EventType.HEALTH_CHECKED,
                                        since=now - RECENT, limit=10_000)
        return [e.created_at for e in events
                if isinstance(e.payload, dict) and e.payload.get("error_type") == TIMEOUT]


def _message(record: ResourceRecord, route: LeasedResource, verdict: Verdict, ok: bool,
             state: ResourceState, error_type: str | None, error: str | None) -> str:
    score = verdict.fields["score"]
    move = f"; {record.state} -> {state}" if state != record.state else f"; {state}"
    if ok:
        latency = verdict.fields["latency_ms"]
        egress = verdict.fields["egress_region"] or "?"
        return (f"route {route.resource_id}: health check passed in {latency} ms, score "
                f"{score}, egress {egress}{move}")
    return (f"route {route.resource_id}: health check failed ({error_type}: {error}), "
            f"score {score}{move}")


def _payload(record: ResourceRecord, route: LeasedResource, verdict: Verdict, outcome: Any,
             state: ResourceState) -> dict[str, Any]:
    fields = verdict.fields
    return {
        "pool": record.pool, "proxy": shown_proxy(route.proxy or ""), "ok": outcome.ok,
        "phase": outcome.phase, "error_type": outcome.error_type, "error": outcome.error,
        "latency_ms": fields["latency_ms"], "score": fields["score"],
        "consecutive_failures": fields["consecutive_failures"],
        "recent_timeouts": fields["recent_timeouts"],
        "expected_region": route.region, "egress_ip": outcome.egress_ip,
        "egress_region": outcome.egress_region,
        "cooldown_until": None if fields["cooldown_until"] is None
        else fields["cooldown_until"].isoformat(),  # type: ignore[attr-defined]
        "from": record.state, "to": state,
        "transitions": [{"to": to, "reason": why} for to, why in verdict.transitions],
    }

