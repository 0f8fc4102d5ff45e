"""Resources of the pools and their health (docs/pools.md), transitions enforced in SQL.

The machine is :data:`RESOURCE_MACHINE` over
:data:`~cadenza.domain.states.RESOURCE_TRANSITIONS`, moved by the store's compare-and-swap
(:mod:`cadenza.store.transition`). A run's hold on a resource is a *resource lease*
(``lease_owner`` = the run, ``lease_until``, ``lease_epoch``), distinct from the *run
lease* a worker holds on a run (:mod:`cadenza.store.run_leases`). Leasing several
resources all-or-nothing is the pool manager's job (``cadenza.resources``): it opens
``store.write()`` and calls :meth:`ResourcesRepository.transition_resource` with ``conn=`` for
each, in a fixed order, rolling back unless every one returned ``True``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RESOURCE_TRANSITIONS, ResourceState
from cadenza.store.codec import aware_values
from cadenza.store.records import HEALTH_FIELDS, ResourceRecord
from cadenza.store.tables import RESOURCE_KINDS, resource_health, resources
from cadenza.store.transition import Machine, Transitions

RESOURCE_FIELDS = frozenset({"lease_owner", "lease_until", "lease_epoch", "route_id", "last_error"})
"""Columns a resource transition may set through ``fields``."""

RESOURCE_MACHINE = Machine(
    name="resource", noun="resource", states=ResourceState, transitions=RESOURCE_TRANSITIONS,
    table=resources, key=resources.c.resource_id,
    select=sa.select(resources.c.state, resources.c.lease_epoch, resources.c.pool,
                     resources.c.lease_owner)
    .where(resources.c.resource_id == sa.bindparam("p_id")).with_for_update(),
    fields=RESOURCE_FIELDS, stale="lease epoch {epoch} is stale",
)
"""The resource state machine of :meth:`ResourcesRepository.transition_resource`."""

_HOLDING = frozenset({ResourceState.LEASED, ResourceState.RUNNING})
_LEVEL = {ResourceState.FAULT: Level.WARNING, ResourceState.DISABLED: Level.WARNING}


class ResourcesRepository(Transitions):
    """Resources (tables ``resources`` and ``resource_health``)."""

    def upsert_resource(
        self,
        resource_id: str,
        pool: str,
        kind: str,
        *,
        route_id: str | None = None,
        actor: str = "system",
        conn: sa.Connection | None = None,
    ) -> None:
        """Register a pool member from the config, or update its pool, kind and route.

        A new resource starts AVAILABLE (writes RESOURCE_STATE_CHANGED from none). An existing
        one keeps its state and lease; pool, kind and route_id are updated (with updated_at)
        only when they differ, without an event.
        """
        if kind not in RESOURCE_KINDS:
            raise ValueError(
                f"resource kind must be one of {', '.join(RESOURCE_KINDS)}, got {kind!r}"
            )
        now = self._now()
        with self._joined(conn) as c:
            inserted = c.execute(
                self._insert_ignore(resources, ["resource_id"]).values(
                    resource_id=resource_id,
                    pool=pool,
                    kind=kind,
                    state=ResourceState.AVAILABLE.value,
                    route_id=route_id,
                    created_at=now,
                    updated_at=now,
                )
            ).rowcount
            if inserted == 1:
                self._insert_event(
                    c,
                    EventType.RESOURCE_STATE_CHANGED,
                    f"resource {resource_id} ({kind} in pool {pool}) registered AVAILABLE",
                    resource_id=resource_id,
                    payload={
                        "from": None,
                        "to": ResourceState.AVAILABLE,
                        "pool": pool,
                        "kind": kind,
                        "route_id": route_id,
                    },
                    actor=actor,
                    now=now,
                )
                return
            c.execute(
                sa.update(resources)
                .where(
                    resources.c.resource_id == resource_id,
                    sa.or_(
                        resources.c.pool != pool,
                        resources.c.kind != kind,
                        resources.c.route_id.is_distinct_from(route_id),
                    ),
                )
                .values(pool=pool, kind=kind, route_id=route_id, updated_at=now)
            )

    def transition_resource(
        self,
        resource_id: str,
        to: ResourceState,
        *,
        actor: str = "system",
        reason: str | None = None,
        fields: Mapping[str, Any] | None = None,
        epoch: int | None = None,
        conn: sa.Connection | None = None,
    ) -> bool:
        """Move a resource to ``to`` if its state allows it (and ``epoch`` still matches).

        Returns ``True`` iff the row changed. Sets state and updated_at. Entering LEASED
        increments lease_epoch; leaving LEASED/RUNNING for any other state clears lease_owner
        and lease_until. ``fields`` sets any of :data:`RESOURCE_FIELDS` explicitly (last_error
        redacted), e.g. ``{"lease_owner": run_id, "lease_until": t}`` with LEASED. Writes
        RESOURCE_STATE_CHANGED in the same transaction; nothing when refused.
        """
        return self._transition_resource(resource_id, to, actor, reason, fields, epoch, conn)[0]

    def _transition_resource(
        self,
        resource_id: str,
        to: ResourceState,
        actor: str,
        reason: str | None,
        fields: Mapping[str, Any] | None,
        epoch: int | None,
        conn: sa.Connection | None,
    ) -> tuple[bool, ResourceState | None]:
        to = ResourceState(to)
        explicit = RESOURCE_MACHINE.settable(fields)
        if "last_error" in explicit:
            explicit["last_error"] = self._redact_text(explicit["last_error"])

        def change(before: Any, now: datetime) -> tuple[sa.Executable, dict[str, Any]]:
            values: dict[str, Any] = {"state": to.value, "updated_at": now}
            if to is ResourceState.LEASED:
                values["lease_epoch"] = resources.c.lease_epoch + 1
                values["lease_step"] = None  # held for the whole run
            elif to not in _HOLDING:
                values["lease_owner"] = None
                values["lease_until"] = None
                values["lease_step"] = None
            values.update(explicit)
            fence = [] if epoch is None else [resources.c.lease_epoch == epoch]
            return RESOURCE_MACHINE.update(resource_id, to, values, *fence), {}

        def record(c: sa.Connection, before: Any, frm: ResourceState, now: datetime) -> None:
            new_epoch = explicit.get(
                "lease_epoch",
                before.lease_epoch + 1 if to is ResourceState.LEASED else before.lease_epoch,
            )
            self._insert_event(
                c,
                EventType.RESOURCE_STATE_CHANGED,
                f"resource {resource_id} {frm} -> {to}" + (f": {reason}" if reason else ""),
                resource_id=resource_id,
                level=_LEVEL.get(to, Level.INFO),
                payload={
                    "from": frm,
                    "to": to,
                    "reason": reason,
                    "pool": before.pool,
                    "epoch": new_epoch,
                    "lease_owner": explicit.get("lease_owner", before.lease_owner),
                    "fields": explicit,
                },
                actor=actor,
                now=now,
            )

        return self._compare_and_swap(RESOURCE_MACHINE, resource_id, to, conn, change, record)

    def update_resource_health(
        self,
        resource_id: str,
        fields: Mapping[str, Any],
        *,
        conn: sa.Connection | None = None,
    ) -> None:
        """Set health fields of a resource (docs/health-checks.md), creating its health row if
        needed.

        ``fields`` keys are those of :class:`~cadenza.store.records.ResourceHealthRecord`
        (updated_at is set to now). Writes no event: the health checker records each probe as
        HEALTH_CHECKED with its details (``append_event(..., conn=conn)`` in the same
        transaction).
        """
        values = aware_values(fields)
        unknown = set(values) - set(HEALTH_FIELDS)
        if unknown:
            raise ValueError(f"unknown health fields {sorted(unknown)}; allowed: {HEALTH_FIELDS}")
        now = self._now()
        with self._joined(conn) as c:
            inserted = c.execute(
                self._insert_ignore(resource_health, ["resource_id"]).values(
                    resource_id=resource_id, **values, updated_at=now
                )
            ).rowcount
            if inserted != 1:
                c.execute(
                    sa.update(resource_health)
                    .where(resource_health.c.resource_id == resource_id)
                    .values(**values, updated_at=now)
                )

    def _resource_query(self) -> sa.Select[Any]:
        health_columns = [resource_health.c[name] for name in HEALTH_FIELDS]
        return sa.select(
            resources,
            *health_columns,
            resource_health.c.updated_at.label("health_updated_at"),
        ).select_from(
            resources.outerjoin(
                resource_health, resource_health.c.resource_id == resources.c.resource_id
            )
        )

    def get_resource(
        self, resource_id: str, *, conn: sa.Connection | None = None
    ) -> ResourceRecord | None:
        """The resource ``resource_id`` with its health, or ``None``."""
        with self._reading(conn) as c:
            row = c.execute(
                self._resource_query().where(resources.c.resource_id == resource_id)
            ).first()
        return None if row is None else ResourceRecord.from_row(row)

    def list_resources(self, pool: str | None = None, *,
                       state: ResourceState | None = None) -> list[ResourceRecord]:
        """Resources (of one pool, or all; in ``state``, or any), by pool then id, with
        their health."""
        query = self._resource_query()
        if pool is not None:
            query = query.where(resources.c.pool == pool)
        if state is not None:
            query = query.where(resources.c.state == ResourceState(state).value)
        with self.read() as c:
            rows = c.execute(query.order_by(resources.c.pool, resources.c.resource_id)).all()
        return [ResourceRecord.from_row(row) for row in rows]

    def held_by_run(self, run_id: str) -> list[tuple[str, str, str, str | None]]:
        """What ``run_id`` holds now (LEASED or RUNNING), by id: (resource_id, pool, kind,
        route_id) each."""
        with self.read() as c:
            rows = c.execute(
                sa.select(resources.c.resource_id, resources.c.pool, resources.c.kind,
                          resources.c.route_id)
                .where(resources.c.lease_owner == run_id,
                       resources.c.state.in_(("LEASED", "RUNNING")))
                .order_by(resources.c.resource_id)).all()
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    def resource_keys(self) -> dict[str, tuple[str, str, str | None, str]]:
        """Every member: resource_id -> (pool, kind, route_id, state), without health."""
        with self.read() as c:
            rows = c.execute(sa.select(resources.c.resource_id, resources.c.pool,
                                       resources.c.kind, resources.c.route_id,
                                       resources.c.state)).all()
        return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}

    def remove_resource(self, resource_id: str, *, conn: sa.Connection) -> bool:
        """Delete the member ``resource_id`` unless a run holds it (LEASED, RUNNING: it goes
        when released); True when deleted. The caller writes the event, in ``conn``'s
        transaction."""
        return bool(conn.execute(sa.delete(resources).where(
            resources.c.resource_id == resource_id,
            resources.c.state.not_in(("LEASED", "RUNNING")))).rowcount)
