"""The nodes serving a PostgreSQL store and their workers (the ``nodes`` table).

Several nodes share one cluster cap (``[workers] max_concurrent_runs``), and each claims
runs ahead of its workers, which count against the cap while they wait in its local queue.
To take no more than its share of the cap's room, a node must know how many workers the
other nodes have: each node writes ``(owner, workers)`` on the database's clock every few
seconds (:meth:`Roster.seen`, which answers with the workers of every node seen within the
window; :meth:`Roster.live` reads them alone, more often) and deletes its row when it stops
(:meth:`Roster.gone`). A node killed leaves its row, counted until it is older than the
window, then deleted by a later write (:data:`FORGET_AFTER`).

The database's clock, not the nodes': a node whose clock is off must not count a live
node as gone, nor a gone one as live. SQLite has one node per store: nothing writes here.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

FORGET_AFTER = 86_400.0
"""Seconds after which a row nobody wrote any more is deleted (a node killed long ago)."""

_SEEN = sa.text(
    # One statement (an idle node's write is its idle cost): the sub-statements share one
    # snapshot, so the sum is read over the other nodes, and this node's own row is added
    # from what the INSERT returns; the rows of nodes gone long ago are deleted (never this
    # node's own: one statement must not change a row twice).
    "WITH forgotten AS (DELETE FROM nodes WHERE owner <> :owner"
    " AND seen_at < now() - make_interval(secs => :forget)),"
    " mine AS (INSERT INTO nodes (owner, workers, seen_at) VALUES (:owner, :workers, now())"
    " ON CONFLICT (owner) DO UPDATE SET workers = EXCLUDED.workers, seen_at = now()"
    " RETURNING workers)"
    " SELECT (SELECT workers FROM mine) + coalesce((SELECT sum(workers) FROM nodes"
    " WHERE owner <> :owner AND seen_at >= now() - make_interval(secs => :secs)), 0)")
_LIVE = sa.text("SELECT coalesce(sum(workers), 0) FROM nodes"
                " WHERE seen_at >= now() - make_interval(secs => :secs)")
_GONE = sa.text("DELETE FROM nodes WHERE owner = :owner")


class Roster:
    """The ``nodes`` rows of a PostgreSQL store (``store``: a :class:`~cadenza.store.Store`)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def seen(self, owner: str, workers: int, within: float) -> int:
        """Write that ``owner`` serves with ``workers`` now; return the workers of every
        node written within the last ``within`` seconds, this one included. One
        statement, which also deletes other rows older than :data:`FORGET_AFTER`."""
        with self.store.write() as c:
            return int(c.execute(_SEEN, {"owner": owner, "workers": workers, "secs": within,
                                         "forget": FORGET_AFTER}).scalar_one())

    def live(self, within: float) -> int:
        """The workers of every node written within the last ``within`` seconds."""
        with self.store.read() as c:
            return int(c.execute(_LIVE, {"secs": within}).scalar_one())

    def gone(self, owner: str) -> None:
        """Delete ``owner``'s row (a node that stops)."""
        with self.store.write() as c:
            c.execute(_GONE, {"owner": owner})
