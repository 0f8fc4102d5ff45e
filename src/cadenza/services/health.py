"""Health: is the process alive, its store reachable, and do its writes go through.

``check_health(store)`` never raises. It is degraded when the store does not answer a
trivial query, or when the store's writes fail (a full disk, a read-only file system or
replica, a refused permission, an I/O error): from the first failure until a write works
again and the failure is a minute old (:data:`cadenza.store.core.WRITE_FAILURE_WINDOW`).
``reason`` then says why, as ``"<kind>: <the database's words> (since <time>; <store>)"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cadenza

if TYPE_CHECKING:
    from cadenza.store.protocols import Maintenance


@dataclass(frozen=True)
class Health:
    """``ok`` (everything works), the version, the store's dialect, whether the store
    answers, and why it is degraded (None when ``ok``)."""

    ok: bool
    version: str
    store: str
    store_ok: bool = True
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"status": "ok" if self.ok else "degraded", "version": self.version,
                "store": self.store, "store_ok": self.store_ok, "reason": self.reason}


def check_health(store: Maintenance) -> Health:
    """The store answers a trivial query and its writes do not fail (never raises)."""
    version, dialect = cadenza.__version__, store.dialect
    if not store.ping():
        return Health(False, version, dialect, False, f"the store does not answer ({store.where})")
    failure = store.failing_writes()
    if failure is None:
        return Health(True, version, dialect)
    error = failure.error
    since = f"since {failure.at.isoformat(timespec='seconds')}; " if failure.at else ""
    reason = f"{error.kind}: {error.detail or error} ({since}{store.where})"
    return Health(False, version, dialect, True, reason)
