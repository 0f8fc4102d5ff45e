"""The pools of a configuration in the store: sync and the leasing hooks (docs/pools.md).

:func:`apply_pools` is called with every configuration an executor is built for (a node's
start and each reload, ``cadenza run --local``): it hands the store's
:class:`~cadenza.resources.leasing.PoolLeaser` (the claim, step lease, step start and run
end hooks of the store's assembly, :mod:`cadenza.assembly`) the new plan and syncs the
members:

* a member new in the configuration is registered AVAILABLE (RESOURCE_STATE_CHANGED);
* a member whose pool, kind or bound route changed is updated in place (state and lease
  kept);
* a member no longer configured is deleted at once when nobody holds it (an event says so),
  else when its run releases it (:meth:`PoolLeaser.ended`); it is never leased again;
* a changed proxy URL, region or field needs nothing here: the store keeps no copy of
  them; a run reads them from the configuration it was claimed with, so the change takes
  effect at the member's next lease.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from cadenza.config.loader import LoadedConfig
from cadenza.domain.events import EventType
from cadenza.resources.leasing import PoolLeaser
from cadenza.resources.plan import PoolPlan

if TYPE_CHECKING:
    from cadenza.store import Store
    from cadenza.store.protocols import Hooked, PoolStore

_LOCK = threading.Lock()


def leaser_of(store: Hooked) -> PoolLeaser | None:
    """The store's leaser, when it was assembled (:func:`cadenza.assembly.assemble`)."""
    hook = store.hooks.claim
    return hook if isinstance(hook, PoolLeaser) else None


def install_leaser(store: Store, plan: PoolPlan) -> PoolLeaser:
    """The store's leaser (its assembly's), following ``plan`` from now on."""
    from cadenza.assembly import assemble

    assembly = assemble(store)
    with _LOCK:
        assembly.configure(plan=plan)
    return assembly.leaser


def apply_pools(store: Store, config: LoadedConfig, *, actor: str = "config") -> PoolLeaser:
    """Give the store's leaser ``config``'s plan and sync ``config``'s pools into ``store``
    (see the module docstring). Returns the store's leaser."""
    plan = PoolPlan.of(config)
    leaser = install_leaser(store, plan)
    sync_members(store, plan, actor=actor)
    return leaser


def sync_members(store: PoolStore, plan: PoolPlan, *, actor: str = "config") -> None:
    """Make the store's members those of ``plan`` (see the module docstring). One read,
    and a write transaction only when something differs."""
    known = store.resource_keys()
    wanted = {rid: (pool, plan.pools[pool].kind, member.route)
              for rid, (pool, member) in plan.members.items()}
    stale = [rid for rid, (pool, kind, route) in wanted.items()
             if rid not in known or known[rid][:3] != (pool, kind, route)]
    removed = [rid for rid in known if rid not in wanted]
    if not stale and not removed:
        return
    with store.write() as conn:
        for rid in sorted(stale):
            pool, kind, route = wanted[rid]
            store.upsert_resource(rid, pool, kind, route_id=route, actor=actor, conn=conn)
        for rid in sorted(removed):
            gone = store.remove_resource(rid, conn=conn)
            message = (f"resource {rid} removed: no longer in the configuration" if gone
                       else f"resource {rid} is no longer in the configuration: it goes "
                            "once its run releases it")
            store.append_event(EventType.RESOURCE_STATE_CHANGED, message, resource_id=rid,
                               payload={"removed": gone, "pool": known[rid][0]},
                               actor=actor, conn=conn)
