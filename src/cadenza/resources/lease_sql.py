"""The SQL texts of :class:`~cadenza.resources.leasing.PoolLeaser` (the claim's snapshot,
the compare-and-swap leases, the reservation on PostgreSQL, the undo and the step start).

Kept apart from the hooks so that each module reads at a glance; the releases' texts are in
:mod:`cadenza.resources.releases`."""

from __future__ import annotations

_RESERVED_KEY = 1668572774
"""The first key of the advisory locks that mark members reserved (``cdzf``)."""
_SNAPSHOT_OF = (
    "SELECT r.resource_id, r.pool, r.kind, r.state, r.route_id, r.lease_owner, r.updated_at,"
    " h.score, h.cooldown_until, r.lease_epoch{{extra}} FROM resources r"
    " LEFT JOIN resource_health h ON h.resource_id = r.resource_id"
    " WHERE (r.pool IN ({marks}){{routes}}){{free}}")
_BOUND_ROUTES = (" OR r.resource_id IN (SELECT route_id FROM resources WHERE pool IN ({marks})"
                 " AND route_id IS NOT NULL)")
_RESERVED = (", CASE WHEN r.state IN ('AVAILABLE', 'COOLDOWN') THEN"
             f" pg_try_advisory_xact_lock({_RESERVED_KEY}, hashtext(r.resource_id)) END")
_FREE = " AND r.state IN ('AVAILABLE', 'COOLDOWN')"


def _snapshot_sql(extra: str, routes: bool, free: bool) -> str:
    return (_SNAPSHOT_OF.replace("{{extra}}", extra)
            .replace("{{routes}}", _BOUND_ROUTES if routes else "")
            .replace("{{free}}", _FREE if free else ""))


SNAPSHOT = {(routes, free): _snapshot_sql("", routes, free)
            for routes in (False, True) for free in (False, True)}
"""The members of the pools a claim needs, and (``routes``) the routes bound to them (a
third cheaper to read without, when no member of those pools binds one); ``free``: only
those that may be free (AVAILABLE, COOLDOWN), all a claim chooses from: the others are
read only to say why a run waits (:meth:`~cadenza.resources.leasing.PoolLeaser._reason`)."""
SNAPSHOT_RESERVED = {(routes, free): _snapshot_sql(_RESERVED, routes, free)
                     for routes in (False, True) for free in (False, True)}
"""PostgreSQL, read in autocommit: the same, and for each free member whether no claim
has reserved it (false: one has, in its transaction; the lock this read takes when it is
free ends with the statement). A hint only: the row locks and the compare-and-swap decide."""
LEASE = (
    "UPDATE resources SET state = 'LEASED', lease_owner = {m},"
    " lease_until = (SELECT lease_until FROM runs WHERE id = {m}),"
    " lease_epoch = lease_epoch + 1, updated_at = {m}, lease_step = {m}"
    " WHERE resource_id = {m} AND state = {m} AND (state = 'AVAILABLE' OR NOT EXISTS"
    " (SELECT 1 FROM resource_health h WHERE h.resource_id = resources.resource_id"
    " AND h.cooldown_until > {m})){lock} RETURNING lease_epoch")
"""AVAILABLE -> LEASED (or COOLDOWN -> AVAILABLE -> LEASED, its cooldown over), a compare
and swap on the state the claim's snapshot saw (a COOLDOWN member only while its cooldown
is over); the lease ends with the run's (``lease_step``: the step that holds it, NULL for
the whole run)."""
LEASE_ROW = {False: "({m}, {m}, {m}, {m})",
             True: "({m}::text, {m}::text, {m}::text, {m}::text)"}
LEASE_MANY = {
    False: "UPDATE resources SET state = '{to}', lease_owner = v.column2,"
           " lease_until = (SELECT lease_until FROM runs WHERE id = v.column2),"
           " lease_epoch = resources.lease_epoch + 1, updated_at = {m},"
           " lease_step = v.column3 FROM (VALUES {values}) AS v"
           " WHERE resources.resource_id = v.column1 AND resources.state = v.column4"
           " AND (resources.state = 'AVAILABLE' OR NOT EXISTS (SELECT 1 FROM resource_health"
           " h WHERE h.resource_id = resources.resource_id AND h.cooldown_until > {m}))"
           " RETURNING resource_id, lease_epoch",
    True: "UPDATE resources AS r SET state = '{to}', lease_owner = v.run_id,"
          " lease_until = (SELECT lease_until FROM runs WHERE id = v.run_id),"
          " lease_epoch = r.lease_epoch + 1, updated_at = {m}, lease_step = v.step"
          " FROM (VALUES {values}) AS v(rid, run_id, step, state)"
          " WHERE r.resource_id = v.rid AND r.state = v.state AND (r.state = 'AVAILABLE'"
          " OR NOT EXISTS (SELECT 1 FROM resource_health h"
          " WHERE h.resource_id = r.resource_id AND h.cooldown_until > {m}))"
          " AND r.resource_id IN (SELECT resource_id FROM resources"
          " WHERE resource_id IN ({marks}) FOR UPDATE SKIP LOCKED)"
          " RETURNING r.resource_id, r.lease_epoch",
}
""":data:`LEASE` for many members at once (rows: id, run, step, state seen); ``{to}``:
LEASED, or RUNNING for a claim that starts its runs' first steps in its own transaction
(:meth:`~cadenza.resources.leasing.PoolLeaser.started`)."""
RESERVE = ("WITH r AS (SELECT resource_id FROM resources WHERE resource_id = ANY(%s)"
           " AND state IN ('AVAILABLE', 'COOLDOWN')"
           " ORDER BY array_position(%s::text[], resource_id::text) LIMIT %s"
           " FOR UPDATE SKIP LOCKED)"
           f" SELECT resource_id, pg_try_advisory_xact_lock({_RESERVED_KEY},"
           " hashtext(resource_id)) FROM r")
"""PostgreSQL: the first members of a list (best first) that no other transaction holds
and that are still free as far as their state goes (checked on the row locked: one leased
since the snapshot is passed over), locked
(:meth:`~cadenza.resources.leasing.PoolLeaser._reserve`)."""
SKIP_LOCKED = (" AND resource_id IN (SELECT resource_id FROM resources WHERE resource_id = %s"
               " FOR UPDATE SKIP LOCKED)")
UNDO = ("UPDATE resources SET state = {m}, lease_owner = NULL, lease_until = NULL,"
        " lease_step = NULL, lease_epoch = lease_epoch - 1, updated_at = {m}"
        " WHERE resource_id = {m}"
        " AND lease_owner = {m} AND state IN ('LEASED', 'RUNNING')")
START = ("UPDATE resources SET state = 'RUNNING', updated_at = {m} WHERE state = 'LEASED'"
         " AND lease_owner IN ({marks})"
         " RETURNING resource_id, pool, lease_owner, lease_epoch, lease_step")
HELD_STEPS = ("SELECT resource_id, pool, kind, state, lease_owner, lease_epoch, lease_step"
              " FROM resources WHERE lease_owner IN ({marks})"
              " AND state IN ('LEASED', 'RUNNING') ORDER BY resource_id{lock}")
"""What the runs of a step hook hold, with the step that holds each member."""
