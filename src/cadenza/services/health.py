"""Health: is the process alive, its store reachable, and do its writes go through.

``check_health(store, node)`` never raises. It is degraded when the store does not answer a
trivial query, when the store's writes fail (a full disk, a read-only file system or
replica, a refused permission, an I/O error: from the first failure until a write works
again and the failure is a minute old, :data:`cadenza.store.core.WRITE_FAILURE_WINDOW`),
or when the node's clock differs from the store's time by more than
``[workers] max_clock_skew`` (the node then neither leads nor reaps). ``reason`` then says
why, as ``"<kind>: <the database's words> (since <time>; <store>)"`` or the clock's figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cadenza

if TYPE_CHECKING:
    from cadenza.store.protocols import Maintenance


@dataclass(frozen=True)
class NodeStatus:
    """What a running node says of itself: whether it leads the scheduler (None: it has no
    scheduler), how far its clock is from the store's time (None: not measured yet), and
    why it is degraded (its clock is off), or None."""

    leader: bool | None = None
    clock_skew_seconds: float | None = None
    degraded: str | None = None


@dataclass(frozen=True)
class Health:
    """``ok`` (everything works), the version, the store's dialect, whether the store
    answers, and why it is degraded (None when ``ok``)."""

    ok: bool
    version: str
    store: str
    store_ok: bool = True
    reason: str | None = None
    node: NodeStatus | None = None

    def as_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "status": "ok" if self.ok else "degraded", "version": self.version,
            "store": self.store, "store_ok": self.store_ok, "reason": self.reason}
        if self.node is not None:
            answer["leader"] = self.node.leader
            answer["clock_skew_seconds"] = self.node.clock_skew_seconds
        return answer


def check_health(store: Maintenance, node: NodeStatus | None = None) -> Health:
    """The store answers a trivial query, its writes do not fail, and the node (when given)
    is not degraded (never raises)."""
    version, dialect = cadenza.__version__, store.dialect
    if not store.ping():
        return Health(False, version, dialect, False,
                      f"the store does not answer ({store.where})", node)
    failure = store.failing_writes()
    if failure is not None:
        error = failure.error
        since = f"since {failure.at.isoformat(timespec='seconds')}; " if failure.at else ""
        reason = f"{error.kind}: {error.detail or error} ({since}{store.where})"
        return Health(False, version, dialect, True, reason, node)
    if node is not None and node.degraded is not None:
        return Health(False, version, dialect, True, node.degraded, node)
    return Health(True, version, dialect, node=node)
