"""Whose clock decides a lease: the store's time, so that a run has one lease holder at any
instant (docs/leases.md "Whose clock decides a lease").

A lease's end (``lease_until``) is written at a claim and at each renewal, and compared by
the reaper; both sides must read **one** clock, or a node whose clock runs ahead takes a
live run from its healthy holder. A store judges leases in one of two ways
(:data:`LeaseTime`, chosen when it is opened: ``Store.open(..., lease_time=...)``):

``"database"`` (every store a ``cadenza`` command or ``cadenza serve`` opens)
    The database's own time. On PostgreSQL, ``now()`` inside the statements themselves: the
    claim and the renewal write ``now() + lease``, the reaper compares with the server's
    clock, read first in its transaction (one query per round, not per run); no
    node's clock takes part, so nodes on several hosts agree however far their clocks
    drift. On SQLite, whose writers all run on one host, the OS clock of that host (what
    SQLite's own ``'now'`` reads): a process whose clock is shifted (``CADENZA_FAKE_NOW``)
    still writes and judges lease times on the OS clock. No statement or round trip is
    added to a claim or a renewal: PostgreSQL computes the time in the statements it
    already runs, SQLite's is read in the process.

``"clock"`` (the default of ``Store.open``: tests and tools)
    The store's injected clock, as given. A test drives lease expiry by moving its
    ``FakeClock``; every process that shares the database must then share that clock.

Callers say how long a lease lasts the way they always did, as an end on their own clock
(``until``, the store's clock in every process: the node's). The store keeps the length,
``until - now``, and writes the end on its lease time.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, cast

import sqlalchemy as sa

from cadenza.clock import Clock, SystemClock
from cadenza.store.codec import require_aware
from cadenza.store.core import StoreCore

LeaseTime = Literal["clock", "database"]
"""How a store judges leases (see the module docstring)."""
LEASE_TIMES: tuple[LeaseTime, ...] = ("clock", "database")
OS_CLOCK = SystemClock()
"""The host's clock: the store's time of a SQLite store judged by ``"database"``."""


class LeaseClock(StoreCore):
    """The store's time for leases (see the module docstring); a mixin of the store."""

    lease_time: LeaseTime = "clock"
    """``"clock"``: the store's clock; ``"database"``: the database's time."""

    def _lease_end(self, until: datetime, now: datetime) -> datetime | timedelta:
        """What a claim or renewal writes for a lease that ends at ``until`` on a clock that
        reads ``now``: ``until`` itself (``"clock"``); the same length from the OS clock
        (SQLite, ``"database"``); or the length alone, which the statement adds to
        ``now()`` (PostgreSQL, ``"database"``)."""
        until = require_aware(until, "until")
        if self.lease_time != "database":
            return until
        length = until - require_aware(now, "now")
        if self.dialect == "postgresql":
            return length
        return OS_CLOCK.now() + length

    def _store_time(self, conn: sa.Connection | None = None) -> datetime:
        """The time by which this store judges leases now: its clock (``"clock"``), the OS
        clock (SQLite, ``"database"``) or PostgreSQL's ``clock_timestamp()`` (one query; in
        ``conn``'s transaction when given)."""
        if self.lease_time != "database":
            return self._now()
        if self.dialect != "postgresql":
            return OS_CLOCK.now()
        query = sa.select(sa.func.clock_timestamp())
        if conn is not None:
            value = conn.execute(query).scalar_one()
        else:
            with self.read() as own:
                value = own.execute(query).scalar_one()
        return require_aware(cast("datetime", value), "clock_timestamp()")

    def correct_clock(self, skew: timedelta | None) -> None:
        """While ``skew`` is set (the node's clock is that far ahead of the store's time,
        beyond the node's limit), the runs this store records carry the store's time
        (``clock - skew``); ``None``: the clock's again. Leases are unchanged (they are on
        the store's time already)."""
        self._time_offset = skew

    def clock_skew(self, clock: Clock) -> timedelta:
        """How far ``clock`` (a node's) runs ahead of :meth:`_store_time` (negative: behind),
        read around one look at the store's time (half the look's duration is the error)."""
        before = clock.now()
        store = self._store_time()
        after = clock.now()
        return before + (after - before) / 2 - store
