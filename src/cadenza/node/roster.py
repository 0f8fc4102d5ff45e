"""A node's row in the store's ``nodes`` table, on PostgreSQL (:mod:`cadenza.store.roster`).

Every :data:`ROSTER_SECONDS` the node writes its owner and its workers and reads back the
workers of every node written within :data:`LIVE_WINDOW`; in between, a decision of its
dispatcher that finds that figure older than :data:`READ_SECONDS` has the thread read it
again (an idle node decides nothing, and its thread sleeps from one write to the next).
The dispatcher reads that figure (:meth:`RosterService.workers_now`) to take no more than
its share of the cluster cap's room for runs claimed ahead (docs/admission.md). The first
write is at the node's start, before its first decision; the row is deleted when the node
stops. A node that is killed leaves its row, counted by the others for :data:`LIVE_WINDOW`
at most: meanwhile they claim a little less ahead, nothing worse.

While the store cannot be written the last figure stays (a warning in the log, once until
a write succeeds again).
"""

from __future__ import annotations

import logging
import threading
from contextlib import ExitStack
from typing import Any

from cadenza.lifecycle import Lifecycle
from cadenza.store.roster import Roster

log = logging.getLogger("cadenza.node")

ROSTER_SECONDS = 10.0
"""Seconds between two writes of a node's row (a node's first is at its start: the others
count it from their next read)."""
READ_SECONDS = 1.0
"""Seconds between two reads of the cluster's workers: how soon a node learns that another
started (its share of the cap's room shrinks then; a drain of a backlog is seconds long)."""
LIVE_WINDOW = 3 * ROSTER_SECONDS
"""A node whose row was not written for this long is not counted."""


class RosterService:
    """Writes this node's row and keeps the cluster's count of workers (see the module doc).
    A service."""

    name = "roster"

    def __init__(self, store: Any, owner: str, workers: int, life: Lifecycle) -> None:
        self.roster = Roster(store)
        self.owner = owner
        self.workers = workers
        self.life = life
        self.clock = life.clock
        self.cluster_workers = workers
        """The workers of every live node, this one's included (its own until it knows)."""
        self._read_at = self.clock.monotonic()
        self._wake = life.wake_on_stop(threading.Event())
        self._failing = False

    def start(self, stack: ExitStack) -> None:
        self.write()
        stack.callback(self.leave)  # after the loop's thread is joined (the stack is LIFO)
        self.life.spawn(stack, self._loop, "cadenza-roster")

    def workers_now(self) -> int:
        """The cluster's workers as last read; asks for a read when that is older than
        :data:`READ_SECONDS` (the dispatcher calls this at each decision, and decides only
        when there is something to decide: an idle node reads nothing)."""
        if self.clock.monotonic() - self._read_at >= READ_SECONDS:
            self._wake.set()
        return self.cluster_workers

    def write(self) -> None:
        """Write this node's row and read the cluster's workers (the store's errors are
        logged: the last figure stays)."""
        self._read_at = self.clock.monotonic()  # as in read(): once a second at most
        try:
            seen = self.roster.seen(self.owner, self.workers, LIVE_WINDOW)
        except Exception as exc:
            if not self._failing:
                log.warning("could not write this node's row in the nodes table (the other "
                            "nodes' workers are taken as last read): %s", exc)
            self._failing = True
            return
        if self._failing:
            log.info("this node's row in the nodes table is written again")
        self._failing = False
        self._counted(seen)

    def read(self) -> None:
        """Read the cluster's workers (the store's errors: the last figure stays)."""
        # Counted as a read even when it fails: a store that is down is not asked again at
        # every decision, but once a second at most.
        self._read_at = self.clock.monotonic()
        try:
            seen = self.roster.live(LIVE_WINDOW)
        except Exception:  # write() says so when the store is down
            return
        self._counted(seen)

    def _counted(self, seen: int) -> None:
        self.cluster_workers = max(seen, self.workers)
        self._read_at = self.clock.monotonic()

    def leave(self) -> None:
        """Delete this node's row (the node stops)."""
        try:
            self.roster.gone(self.owner)
        except Exception as exc:  # the row ages out of the window anyway
            log.warning("could not delete this node's row in the nodes table: %s", exc)

    def _loop(self) -> None:
        # Between two writes the thread sleeps unless a decision asks for a read: an idle
        # node's wake-ups are its idle cost.
        write_at = self.clock.monotonic() + ROSTER_SECONDS
        while not self.life.stopping.is_set():
            self.clock.wait(self._wake, max(0.0, write_at - self.clock.monotonic()))
            self._wake.clear()
            if self.life.stopping.is_set():
                return
            if self.clock.monotonic() >= write_at:
                self.write()
                write_at = self.clock.monotonic() + ROSTER_SECONDS
            elif self.clock.monotonic() - self._read_at >= READ_SECONDS:
                self.read()
