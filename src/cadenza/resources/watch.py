"""Members that come back elsewhere: how admission learns, within about a second, that a
pool it refused a run for may have a free member again when the change was not made by
this process's own runs (docs/pools.md, "When a waiting run is tried again").

The leaser sees the releases of its own process at once (its run end hooks). It does not
see what another process does to the same store: a run ending on another node, ``cadenza
resources enable`` in a terminal while ``cadenza serve`` runs, another node's health
checks bringing a route back. Without this, a run refused for pool P would wait for
:data:`~cadenza.resources.leasing.RECHECK` (30 s) after such a change.

:class:`FreeWatch` keeps, for each pool a run was refused for, the free members
(AVAILABLE or COOLDOWN) as the refusal read them, each with its ``updated_at``: every
transition writes ``updated_at``, so a member that became free since shows as a pair
(id, updated_at) the watch has not seen. While refused runs are remembered, admission asks
the watch at each decision; at most every :data:`WATCH` it reads those pools' members
again (one small read: a pool's members and their bound routes) and says whether such a
pair appeared. A member leased since only leaves the set, which is not a reason to try
again. When nothing is refused, the watch reads nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from cadenza.resources.releases import AVAILABLE, COOLDOWN

WATCH = timedelta(seconds=1)
"""How often, at most, the watch reads the pools of the refused runs again."""

FREE_STATES = frozenset({AVAILABLE, COOLDOWN})


class Seen(Protocol):
    """A member as a snapshot read it."""

    resource_id: str
    state: str
    updated_at: Any


class FreeWatch:
    """The free members of the watched pools as last read (see the module docstring).
    Thread-safe: refusals (claims) and admission's decisions may run in different
    threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[str, Any] = {}
        """resource id -> its ``updated_at`` as read, for the free members seen."""
        self._pools: set[str] = set()
        self._next: datetime | None = None

    def note(self, pools: Iterable[str], members: Mapping[str, Seen]) -> None:
        """A refusal read ``members`` (every member of ``pools``, whatever its state, and
        their bound routes): watch those pools from what it saw."""
        with self._lock:
            self._pools.update(pools)
            self._remember(members)

    def due(self, now: datetime, refused: bool) -> list[str]:
        """The pools to read again now: none while nothing is ``refused`` (the watch then
        forgets what it saw) or while the last read is younger than :data:`WATCH`."""
        with self._lock:
            if not refused:
                self._free.clear()
                self._pools.clear()
                self._next = None
                return []
            if not self._pools or (self._next is not None and now < self._next):
                return []
            self._next = now + WATCH
            return sorted(self._pools)

    def moved(self, members: Mapping[str, Seen]) -> bool:
        """Whether ``members`` (read again, as for :meth:`note`) show a member free that
        was not free, or not in that change, when last seen; remembers them."""
        with self._lock:
            came = any(m.state in FREE_STATES and self._free.get(rid, _UNSEEN) != m.updated_at
                       for rid, m in members.items())
            self._remember(members)
            return came

    def _remember(self, members: Mapping[str, Seen]) -> None:
        for rid, m in members.items():
            if m.state in FREE_STATES:
                self._free[rid] = m.updated_at
            else:
                self._free.pop(rid, None)


_UNSEEN = object()

__all__ = ["FREE_STATES", "WATCH", "FreeWatch", "Seen"]
