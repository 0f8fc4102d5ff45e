"""The SQL of the pools' members (the ``resources`` table as leases and releases change it),
behind named functions for :mod:`cadenza.resources.leasing` and
:mod:`cadenza.resources.releases`, which decide what to lease or release (docs/pools.md).

Each function runs its statement on the DBAPI cursor of the caller's store transaction, in
the driver's parameter style (:class:`~cadenza.store.hotsql.Dialect`), like the claim and
the boundaries (:mod:`cadenza.store.hotsql` says why plain SQL on this path). Rows come back
as the driver gives them: tuples in the order each function's docstring names.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cadenza.store.hotsql import AUDIT_COLUMNS, Dialect, insert_rows

RESERVED_KEY = 1668572774
"""The first key of the advisory locks that mark members reserved (``cdzf``)."""

_SNAPSHOT_OF = (
    "SELECT r.resource_id, r.pool, r.kind, r.state, r.route_id, r.lease_owner, r.updated_at,"
    " h.score, h.cooldown_until, r.lease_epoch{{extra}} FROM resources r"
    " LEFT JOIN resource_health h ON h.resource_id = r.resource_id"
    " WHERE (r.pool IN ({marks}){{routes}}){{free}}")
_BOUND_ROUTES = (" OR r.resource_id IN (SELECT route_id FROM resources WHERE pool IN ({marks})"
                 " AND route_id IS NOT NULL)")
_RESERVED = (", CASE WHEN r.state IN ('AVAILABLE', 'COOLDOWN') THEN"
             f" pg_try_advisory_xact_lock({RESERVED_KEY}, hashtext(r.resource_id)) END")
_FREE = " AND r.state IN ('AVAILABLE', 'COOLDOWN')"


def _snapshot_sql(extra: str, routes: bool, free: bool) -> str:
    return (_SNAPSHOT_OF.replace("{{extra}}", extra)
            .replace("{{routes}}", _BOUND_ROUTES if routes else "")
            .replace("{{free}}", _FREE if free else ""))


_SNAPSHOT = {(reserved, routes, free): _snapshot_sql(_RESERVED if reserved else "", routes,
                                                     free)
             for reserved in (False, True) for routes in (False, True)
             for free in (False, True)}


def snapshot(cursor: Any, d: Dialect, pools: Sequence[str], *, routes: bool, free: bool,
             reserved: bool = False) -> list[Any]:
    """The members of ``pools`` and (``routes``) the routes bound to them (a third cheaper to
    read without, when no member of those pools binds one); ``free``: only those that may
    be free (AVAILABLE, COOLDOWN). ``reserved`` (PostgreSQL, read in autocommit): one more
    column, for each free member whether no claim has reserved it (false: one has, in its
    transaction, see :func:`reserve`; the lock this read takes ends with the statement).

    Rows: resource_id, pool, kind, state, route_id, lease_owner, updated_at, score,
    cooldown_until, lease_epoch [, not reserved]."""
    cursor.execute(_SNAPSHOT[reserved, routes, free].format(marks=d.marks(len(pools))),
                   [*pools, *pools] if routes else list(pools))
    return list(cursor.fetchall())


_RESERVE = ("WITH r AS (SELECT resource_id FROM resources WHERE resource_id = ANY(%s)"
            " AND state IN ('AVAILABLE', 'COOLDOWN')"
            " ORDER BY array_position(%s::text[], resource_id::text) LIMIT %s"
            " FOR UPDATE SKIP LOCKED)"
            f" SELECT resource_id, pg_try_advisory_xact_lock({RESERVED_KEY},"
            " hashtext(resource_id)) FROM r")


def reserve(cursor: Any, ids: list[str], count: int) -> set[str]:
    """PostgreSQL: lock the first ``count`` members of ``ids`` (best first) that no other
    transaction holds and that are still free as far as their state goes (checked on the
    row locked: one leased since the snapshot is passed over), until the transaction ends;
    returns their ids. A hint only: the row locks and the compare-and-swap decide."""
    cursor.execute(_RESERVE, [ids, ids, count])
    return {row[0] for row in cursor.fetchall()}


_LEASE = (
    "UPDATE resources SET state = 'LEASED', lease_owner = {m},"
    " lease_until = (SELECT lease_until FROM runs WHERE id = {m}),"
    " lease_epoch = lease_epoch + 1, updated_at = {m}, lease_step = {m}"
    " WHERE resource_id = {m} AND state = {m} AND (state = 'AVAILABLE' OR NOT EXISTS"
    " (SELECT 1 FROM resource_health h WHERE h.resource_id = resources.resource_id"
    " AND h.cooldown_until > {m})){lock} RETURNING lease_epoch")
_SKIP_LOCKED = (" AND resource_id IN (SELECT resource_id FROM resources WHERE resource_id = %s"
                " FOR UPDATE SKIP LOCKED)")
_LEASE_ONE = {False: _LEASE.format(m="?", lock=""),
              True: _LEASE.format(m="%s", lock=_SKIP_LOCKED)}


def lease_one(cursor: Any, d: Dialect, resource_id: str, seen: str, run_id: str,
              lease_step: str | None, now: datetime) -> int | None:
    """AVAILABLE -> LEASED (or COOLDOWN -> AVAILABLE -> LEASED, its cooldown over), a
    compare and swap on the state ``seen`` (a COOLDOWN member only while its cooldown is
    over; PostgreSQL: only a row it can lock at once); the lease ends with the run's
    (``lease_step``: the step that holds it, None for the whole run). Returns the new
    epoch, None when the member moved since it was seen."""
    cursor.execute(_LEASE_ONE[d.postgres], [run_id, run_id, d.ts(now), lease_step,
                                            resource_id, seen, d.ts(now)]
                   + ([resource_id] if d.postgres else []))
    done = cursor.fetchone()
    return None if done is None else int(done[0])


_LEASE_ROW = {False: "({m}, {m}, {m}, {m})",
              True: "({m}::text, {m}::text, {m}::text, {m}::text)"}
_LEASE_MANY = {
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


def lease_many(cursor: Any, d: Dialect, rows: Sequence[tuple[str, str, str | None, str]],
               now: datetime, *, to: str) -> dict[str, int]:
    """:func:`lease_one` for many members in one statement (``rows``: resource id, run id,
    step or None, state seen); ``to``: LEASED, or RUNNING for a claim that starts its runs'
    first steps in its own transaction. Returns resource id -> new epoch of those leased."""
    if to not in ("LEASED", "RUNNING"):
        raise ValueError(f"a lease goes to LEASED or RUNNING, not {to!r}")
    ids = [row[0] for row in rows]
    values = ", ".join([_LEASE_ROW[d.postgres].format(m=d.mark)] * len(rows))
    cursor.execute(_LEASE_MANY[d.postgres].format(m=d.mark, values=values, to=to,
                                                  marks=d.marks(len(ids))),
                   [d.ts(now), *[v for row in rows for v in row], d.ts(now),
                    *(ids if d.postgres else [])])
    return {rid: int(epoch) for rid, epoch in cursor.fetchall()}


_UNDO = ("UPDATE resources SET state = {m}, lease_owner = NULL, lease_until = NULL,"
         " lease_step = NULL, lease_epoch = lease_epoch - 1, updated_at = {m}"
         " WHERE resource_id = {m}"
         " AND lease_owner = {m} AND state IN ('LEASED', 'RUNNING')")


def undo_lease(cursor: Any, d: Dialect, resource_id: str, run_id: str, before: str,
               updated_at: Any) -> None:
    """Put back a lease nobody saw: the member to ``before`` with the ``updated_at`` it had
    (as read by :func:`snapshot`), its epoch back to the one before."""
    cursor.execute(_UNDO.format(m=d.mark),
                   [before, d.ts(updated_at) if d.postgres else updated_at, resource_id,
                    run_id])


_START = ("UPDATE resources SET state = 'RUNNING', updated_at = {m} WHERE state = 'LEASED'"
          " AND lease_owner IN ({marks})"
          " RETURNING resource_id, pool, lease_owner, lease_epoch, lease_step")


def start_leased(cursor: Any, d: Dialect, run_ids: Sequence[str], now: datetime) -> list[Any]:
    """LEASED -> RUNNING for every member the runs of ``run_ids`` hold (their first step
    starts). Rows: resource_id, pool, lease_owner, lease_epoch, lease_step."""
    cursor.execute(_START.format(m=d.mark, marks=d.marks(len(run_ids))),
                   [d.ts(now), *run_ids])
    return list(cursor.fetchall())


_UNSTART = ("UPDATE resources SET state = {m}, lease_owner = NULL,"
            " lease_epoch = lease_epoch - 1 WHERE resource_id = {m} AND state = 'RUNNING'"
            " AND lease_owner = {m}",
            "UPDATE resources SET state = 'LEASED', lease_owner = {m},"
            " lease_epoch = lease_epoch + 1 WHERE resource_id = {m} AND state = {m}"
            " AND lease_owner IS NULL")


def unstart(cursor: Any, d: Dialect, resource_id: str, run_id: str, was: str) -> None:
    """A member leased straight to RUNNING by a starting claim whose run started no step in
    the transaction after all: LEASED, as the lease left it (nobody saw the other state).
    Two statements, the lease given back (to ``was``) and taken again, because the database
    refuses RUNNING -> LEASED (:mod:`cadenza.store.state_guard`); ``updated_at``,
    ``lease_until`` and ``lease_step`` stay as the lease set them, the epoch comes back to
    the lease's."""
    back, again = (sql.format(m=d.mark) for sql in _UNSTART)
    cursor.execute(back, [was, resource_id, run_id])
    if cursor.rowcount == 1:
        cursor.execute(again, [run_id, resource_id, was])


_HELD = ("SELECT resource_id, pool, kind, state, lease_owner, lease_epoch{step}"
         " FROM resources WHERE lease_owner IN ({marks}) AND state IN ('LEASED', 'RUNNING')"
         " ORDER BY resource_id{lock}")


def held(cursor: Any, d: Dialect, run_ids: Sequence[str], *, steps: bool = False) -> list[Any]:
    """What the runs of ``run_ids`` hold, locked for update (PostgreSQL; SQLite: under the
    write lock). Rows: resource_id, pool, kind, state, lease_owner, lease_epoch [,
    lease_step with ``steps``]."""
    cursor.execute(_HELD.format(step=", lease_step" if steps else "",
                                marks=d.marks(len(run_ids)),
                                lock=" FOR UPDATE" if d.postgres else ""), list(run_ids))
    return list(cursor.fetchall())


_RELEASE = ("UPDATE resources SET state = {m}, lease_owner = NULL, lease_until = NULL,"
            " lease_step = NULL,"
            " updated_at = {m}, last_error = coalesce({m}, last_error)"
            " WHERE resource_id = {m} AND state = {m} AND lease_owner = {m}")


def release_one(cursor: Any, d: Dialect, resource_id: str, state: str, owner: str, *,
                to: str, now: datetime, error: str | None) -> bool:
    """``state`` -> ``to`` for a member ``owner`` holds (``error``: its last error, kept
    when None); False when it was not so held."""
    cursor.execute(_RELEASE.format(m=d.mark),
                   [to, d.ts(now), error, resource_id, state, owner])
    return bool(cursor.rowcount == 1)


_RELEASE_ALL = ("UPDATE resources SET state = CASE WHEN state = 'LEASED' THEN 'AVAILABLE'"
                " ELSE 'COOLDOWN' END, lease_owner = NULL, lease_until = NULL,"
                " lease_step = NULL, updated_at = {m}"
                " WHERE resource_id IN ({marks}) AND state IN ('LEASED', 'RUNNING')")


def release_members(cursor: Any, d: Dialect, resource_ids: Sequence[str],
                    now: datetime) -> None:
    """LEASED -> AVAILABLE, RUNNING -> COOLDOWN for every member of ``resource_ids`` (read
    by :func:`held`), one statement; raises RuntimeError when one was not held."""
    cursor.execute(_RELEASE_ALL.format(m=d.mark, marks=d.marks(len(resource_ids))),
                   [d.ts(now), *resource_ids])
    if cursor.rowcount != len(resource_ids):
        raise RuntimeError(f"released {cursor.rowcount} of {len(resource_ids)} members")


_RELEASE_HELD = (
    "WITH old AS (SELECT resource_id, state, lease_owner, lease_epoch FROM resources"
    " WHERE lease_owner IN ({marks}) AND state IN ('LEASED', 'RUNNING') FOR UPDATE)"
    " UPDATE resources AS r SET state = CASE WHEN old.state = 'LEASED' THEN 'AVAILABLE'"
    " ELSE 'COOLDOWN' END, lease_owner = NULL, lease_until = NULL, lease_step = NULL,"
    " updated_at = {m} FROM old WHERE r.resource_id = old.resource_id"
    " RETURNING r.resource_id, r.pool, r.kind, old.state, old.lease_owner, old.lease_epoch")
_RELEASE_RUNS = (
    "UPDATE resources SET state = CASE WHEN state = 'LEASED' THEN 'AVAILABLE'"
    " ELSE 'COOLDOWN' END, lease_owner = NULL, lease_until = NULL, lease_step = NULL,"
    " updated_at = ? WHERE lease_owner IN ({marks}) AND state IN ('LEASED', 'RUNNING')"
    " RETURNING resource_id, pool, kind, state, lease_epoch")


def release_held(cursor: Any, d: Dialect, run_ids: Sequence[str], now: datetime) -> list[Any]:
    """PostgreSQL: :func:`held` and :func:`release_members` in one statement (no fault to
    sort out). Rows: resource_id, pool, kind, old state, lease_owner, lease_epoch."""
    cursor.execute(_RELEASE_HELD.format(m=d.mark, marks=d.marks(len(run_ids))),
                   [*run_ids, d.ts(now)])
    return list(cursor.fetchall())


def release_runs(cursor: Any, d: Dialect, run_ids: Sequence[str], now: datetime) -> list[Any]:
    """SQLite, runs' end (no fault): :func:`held` and :func:`release_members` in one
    statement, under the write lock. RETURNING gives the new state (AVAILABLE was LEASED,
    COOLDOWN was RUNNING), not the owner. Rows: resource_id, pool, kind, new state,
    lease_epoch."""
    cursor.execute(_RELEASE_RUNS.format(marks=d.marks(len(run_ids))), [d.ts(now), *run_ids])
    return list(cursor.fetchall())


_FAULTS = ("SELECT run_id, error, output_json FROM step_runs WHERE error_class = 'resource'"
           " AND id IN (SELECT max(id) FROM step_runs WHERE run_id IN ({marks})"
           " GROUP BY run_id)")


def resource_faults(cursor: Any, d: Dialect, run_ids: Sequence[str]) -> list[Any]:
    """The last step of each run of ``run_ids`` that failed with a resource fault. Rows:
    run_id, error, output_json."""
    cursor.execute(_FAULTS.format(marks=d.marks(len(run_ids))), list(run_ids))
    return list(cursor.fetchall())


_HEALTH_COLUMNS = ("resource_id", "cooldown_until", "updated_at")
_HEALTH_UPSERT = (" ON CONFLICT (resource_id) DO UPDATE SET cooldown_until ="
                  " excluded.cooldown_until, updated_at = excluded.updated_at")


def set_cooldown_end(cursor: Any, d: Dialect, resource_id: str, until: Any,
                     stamp: Any) -> None:
    """``resource_health.cooldown_until`` of a member (``until``, ``stamp``: encoded with
    ``d.ts``), its row made when it has none."""
    cursor.execute(d.insert("resource_health", _HEALTH_COLUMNS, 1) + _HEALTH_UPSERT,
                   [resource_id, until, stamp])


def delete_member(cursor: Any, d: Dialect, resource_id: str) -> None:
    """Delete a member (removed from the configuration, now released)."""
    cursor.execute(f"DELETE FROM resources WHERE resource_id = {d.mark}", [resource_id])


def write_events(cursor: Any, d: Dialect, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert audit events (rows in :data:`~cadenza.store.hotsql.AUDIT_COLUMNS` order)."""
    insert_rows(cursor, d, "event_log", AUDIT_COLUMNS, list(rows))
