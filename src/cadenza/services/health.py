"""Health: is the process alive and its store reachable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cadenza

if TYPE_CHECKING:
    from cadenza.store import Store


@dataclass(frozen=True)
class Health:
    ok: bool
    version: str
    store: str

    def as_json(self) -> dict[str, Any]:
        return {"status": "ok" if self.ok else "degraded", "version": self.version,
                "store": self.store, "store_ok": self.ok}


def check_health(store: Store) -> Health:
    """The store answers a trivial query (never raises)."""
    return Health(store.ping(), cadenza.__version__, store.dialect)
