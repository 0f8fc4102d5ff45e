"""The members a run holds, as its steps see them (``ctx.resources``; docs/pools.md)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from cadenza.config.schema_settings import PoolMember, Settings
from cadenza.resources.leased import Fields, LeasedResource

if TYPE_CHECKING:
    from cadenza.store.protocols import PoolStore

Held = Mapping[str, tuple[LeasedResource, ...]]
"""Pool name -> the members held, by id."""


def _leased(rid: str, pool: str, kind: str, member: PoolMember | None,
            route: LeasedResource | None) -> LeasedResource:
    return LeasedResource(
        resource_id=rid, pool=pool, kind=kind,
        proxy=None if member is None or member.proxy is None else str(member.proxy),
        region=None if member is None else member.region,
        fields=Fields(member.fields if member is not None else {}),
        route=route)


class _Row(NamedTuple):
    resource_id: str
    pool: str
    kind: str
    route_id: str | None


_MEMBERS: dict[int, tuple[Settings, dict[str, PoolMember]]] = {}


def _members(settings: Settings) -> dict[str, PoolMember]:
    """Member id -> its configuration in ``settings`` (kept per settings object: every
    step of a job with pools asks)."""
    found = _MEMBERS.get(id(settings))
    if found is None or found[0] is not settings:
        if len(_MEMBERS) > 16:
            _MEMBERS.clear()
        found = (settings, {m.id: m for pool in settings.pools.values()
                            for m in pool.members})
        _MEMBERS[id(settings)] = found
    return found[1]


def held_resources(store: PoolStore, settings: Settings, run_id: str) -> Held:
    """What ``run_id`` holds now (LEASED or RUNNING), with each member's configuration
    (a proxy URL, a region, fields: secrets resolved). A changed proxy URL is seen at the
    member's next lease: the configuration read is the one the run was claimed with.
    What this process's claim leased, or one read; nothing when the home has no pools."""
    if not settings.pools:
        return MappingProxyType({})
    from cadenza.resources.pools import leaser_of

    leaser = leaser_of(store)
    remembered = None if leaser is None else leaser.held_by(run_id)
    rows: list[Any]
    if remembered is not None:  # claimed in this process: no read
        rows = [_Row(*item) for item in sorted(remembered)]
    else:
        rows = [_Row(*item) for item in store.held_by_run(run_id)]
    config = _members(settings)
    by_id = {row.resource_id: row for row in rows}
    out: dict[str, list[LeasedResource]] = {}
    for row in rows:
        route = None
        bound = by_id.get(row.route_id) if row.route_id else None
        if bound is not None:
            route = _leased(bound.resource_id, bound.pool, bound.kind,
                            config.get(bound.resource_id), None)
        out.setdefault(row.pool, []).append(
            _leased(row.resource_id, row.pool, row.kind, config.get(row.resource_id), route))
    return MappingProxyType({pool: tuple(members) for pool, members in out.items()})
