"""The releasing side of the pools: a run end's release, the members' audit events (docs/pools.md).

:class:`Releases` is the part of :class:`~cadenza.resources.leasing.PoolLeaser` that gives
members back: **the run end hook** (:meth:`Releases.ended`: RUNNING -> COOLDOWN with
``cooldown_until`` = now + the pool's ``cooldown``, LEASED -> AVAILABLE for a run that ended
before it started, RUNNING -> FAULT for the member a :class:`cadenza.ResourceFault` named,
or every route the run held when it named none; a member removed from the configuration is
deleted once released), the release of what a step leased (:meth:`Releases._release_all`,
called by the step hook), and the writing of :class:`ResourceEvent` rows, with the
transaction's other events when the store collects them (``Store.emit_events``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState
from cadenza.store.boundary import EndedRun
from cadenza.store.codec import dumps
from cadenza.store.hotsql import AUDIT_COLUMNS, Dialect, insert_rows

if TYPE_CHECKING:
    from cadenza.resources.plan import PoolPlan

AVAILABLE, LEASED, RUNNING = "AVAILABLE", "LEASED", "RUNNING"
COOLDOWN, FAULT, DISABLED = "COOLDOWN", "FAULT", "DISABLED"

_UNSTART = ("UPDATE resources SET state = {m}, lease_owner = NULL,"
            " lease_epoch = lease_epoch - 1 WHERE resource_id = {m} AND state = 'RUNNING'"
            " AND lease_owner = {m}",
            "UPDATE resources SET state = 'LEASED', lease_owner = {m},"
            " lease_epoch = lease_epoch + 1 WHERE resource_id = {m} AND state = {m}"
            " AND lease_owner IS NULL")
"""Members leased straight to RUNNING by a starting claim whose run started no step in the
transaction after all: LEASED, as the lease left them (nobody saw the other state). Two
statements, the lease given back and taken again, because the database refuses RUNNING ->
LEASED (:mod:`cadenza.store.state_guard`); ``updated_at``, ``lease_until`` and
``lease_step`` stay as the lease set them, the epoch comes back to the lease's."""


@dataclass
class ResourceEvent:
    """One audit event of a member, written in the transaction of its change."""


    kind: EventType
    resource_id: str
    run_id: str | None
    message: str
    payload: dict[str, Any]
    level: Level = Level.INFO
    redact: bool = False
    """Whether the message and the reason quote text from outside (a fault's error): the
    others are built from ids, states, times and names from the configuration files,
    which hold no secret values (secrets go by reference), so they skip the redactor."""


def at_utc(when: datetime) -> str:
    """``when`` as ``HH:MM:SS UTC`` (the messages' times)."""
    return when.strftime("%H:%M:%S UTC")



class Releases:
    """The run end hook and the event writing of the pools' leaser (see the module
    docstring); :class:`~cadenza.resources.leasing.PoolLeaser` sets the attributes."""

    plan: PoolPlan
    redact: Callable[[str], str]
    emit: Callable[[sa.Connection, list[tuple[Any, ...]]], None] | None
    _d: Dialect
    _lock: threading.Lock
    _jobs: set[str]
    _step_jobs: set[str]
    _held: dict[str, list[tuple[str, str, str, str | None]]]
    _moved: Callable[[], None]
    """A member went back (admission may try refused runs again): the leaser's method."""
    _started_early: dict[int, tuple[Any, dict[str, list[tuple[Any, str | None]]]]]
    """See ``PoolLeaser.__init__``."""

    def _early_of(self, conn: sa.Connection,
                  run_ids: Sequence[str] | None = None) -> dict[str, list[tuple[Any, str | None]]]:
        """Take the members a starting claim in ``conn``'s transaction leased straight to
        RUNNING, per run (only those of ``run_ids`` when given)."""
        tx = conn.get_transaction()
        with self._lock:
            found = self._started_early.get(id(conn))
            if found is None:
                return {}
            table = found[1]
            if found[0] is not tx:  # a transaction that failed: gone with it
                table = {}
            if run_ids is None:
                out = dict(table)
                table.clear()
            else:
                out = {run_id: table.pop(run_id) for run_id in run_ids if run_id in table}
            if not table:
                del self._started_early[id(conn)]
        return out

    def _unstart(self, conn: sa.Connection, cursor: Any,
                 run_ids: Sequence[str] | None = None) -> None:
        """Members leased straight to RUNNING by a starting claim whose run started no
        step in this transaction (of ``run_ids``, or all): back to LEASED, where the
        lease left them, before anything else reads them."""
        early = self._early_of(conn, run_ids)
        if not early:
            return
        back, again = (sql.format(m=self._d.mark) for sql in _UNSTART)
        for run_id, held in early.items():  # rare: a claim's run that started nothing
            for member, _step in held:
                was = COOLDOWN if member.was_cooling else AVAILABLE
                cursor.execute(back, [was, member.resource_id, run_id])
                if cursor.rowcount == 1:
                    cursor.execute(again, [run_id, member.resource_id, was])

    def ended(self, conn: sa.Connection, ended: Sequence[EndedRun], now: datetime) -> None:
        """Release what the runs of ``ended`` held (see the module docstring)."""
        mine = [e for e in ended if e.job_id in self._jobs]
        if not mine:
            return
        d = self._d
        ids = [e.run_id for e in mine]
        owners: dict[str, str] | None = {}
        with self._lock:
            for e in mine:
                claimed = self._held.pop(e.run_id, None)
                if (owners is not None and claimed is not None
                        and e.job_id not in self._step_jobs):
                    owners.update((member[0], e.run_id) for member in claimed)
                else:
                    owners = None  # claimed elsewhere, or steps lease: the store says
        cursor = conn.connection.cursor()
        try:
            self._unstart(conn, cursor, ids)
            one = not d.postgres and (len(ids) == 1 or owners is not None)
            if (d.postgres or one) and not self._faults(
                    cursor, [e.run_id for e in mine if e.state is RunState.QUEUED]):
                # No fault to sort out: read and release in one statement.
                if one:  # SQLite: RETURNING shows the new state, which tells the old one;
                    # the owner is the one run, or what this process's claims leased
                    # (a run's members are those its claim took: no step leases).
                    cursor.execute(_RELEASE_RUNS.format(marks=d.marks(len(ids))),
                                   [d.ts(now), *ids])
                    released = sorted(
                        (rid, pool, kind, LEASED if to == AVAILABLE else RUNNING,
                         ids[0] if len(ids) == 1 else _owner(owners, rid), epoch)
                        for rid, pool, kind, to, epoch in cursor.fetchall())
                else:
                    cursor.execute(_RELEASE_HELD.format(m=d.mark, marks=d.marks(len(ids))),
                                   [*ids, d.ts(now)])
                    released = sorted(cursor.fetchall())
                if not released:
                    return
                events: list[ResourceEvent] = []
                cooldowns: list[list[Any]] = []
                gone: list[str] = []
                self._release_all(cursor, released, now, events, cooldowns, gone,
                                  updated=True)
                self._after_release(cursor, cooldowns, gone, events)
                self._write(conn, cursor, events, now)
            else:
                cursor.execute(_HELD.format(marks=d.marks(len(ids)),
                                            lock=" FOR UPDATE" if d.postgres else ""), ids)
                held = cursor.fetchall()
                if not held:
                    return
                self._release(conn, cursor, held, mine, now)
        finally:
            cursor.close()
        self._moved()

    def _release(self, conn: sa.Connection, cursor: Any, held: Sequence[Any],
                 mine: list[EndedRun], now: datetime) -> None:
        d = self._d
        faults = self._faults(cursor, [e.run_id for e in mine if e.state is RunState.QUEUED])
        plan = self.plan
        stamp = d.ts(now)
        events: list[ResourceEvent] = []
        cooldowns: list[list[Any]] = []
        gone: list[str] = []
        if not faults:
            self._release_all(cursor, held, now, events, cooldowns, gone)
            held = ()
        for rid, pool, kind, state, owner, epoch in held:
            fault = faults.get(owner)
            error = None
            if state == LEASED:
                to, why, kind_ev = AVAILABLE, "released unused", EventType.RESOURCE_RELEASED
            elif fault is not None and (fault[0] == rid or (fault[0] is None
                                                              and kind == "route")):
                to, why, kind_ev = FAULT, fault[1], EventType.RESOURCE_STATE_CHANGED
                error = self.redact(fault[1])
            else:
                to, kind_ev = COOLDOWN, EventType.RESOURCE_RELEASED
                cooldown = plan.cooldown(pool)
                until = now + cooldown
                why = f"released; cooling down until {at_utc(until)}"
                if cooldown > timedelta(0):  # none: an earlier cooldown_until has passed
                    cooldowns.append([rid, d.ts(until), stamp])
            cursor.execute(_RELEASE.format(m=d.mark), [to, stamp, error, rid, state, owner])
            if cursor.rowcount != 1:
                continue
            events.append(ResourceEvent(
                kind_ev, rid, owner, f"resource {rid} {state} -> {to}: {why} (run {owner})",
                {"from": state, "to": to, "pool": pool, "run_id": owner, "epoch": int(epoch),
                 "reason": why}, Level.WARNING if to == FAULT else Level.INFO,
                redact=to == FAULT))
            if rid not in plan.members:
                gone.append(rid)
        self._after_release(cursor, cooldowns, gone, events)
        self._write(conn, cursor, events, now)

    def _after_release(self, cursor: Any, cooldowns: list[list[Any]], gone: list[str],
                       events: list[ResourceEvent]) -> None:
        """The cooldowns' ends (``resource_health``) and the members removed from the
        configuration, deleted now that they are released."""
        d = self._d
        for row in cooldowns:
            cursor.execute(d.insert("resource_health", _HEALTH_COLUMNS, 1) + _HEALTH_UPSERT,
                           row)
        for rid in gone:
            cursor.execute(_GONE.format(m=d.mark), [rid])
            events.append(ResourceEvent(EventType.RESOURCE_STATE_CHANGED, rid, None,
                                 f"resource {rid} removed: no longer in the configuration",
                                 {"from": None, "to": None, "removed": True}))

    def _release_all(self, cursor: Any, held: Sequence[Any], now: datetime,
                     events: list[ResourceEvent], cooldowns: list[list[Any]],
                     gone: list[str], steps: Mapping[str, str] | None = None,
                     updated: bool = False) -> None:
        """Release every member of ``held`` (no fault among them) with one UPDATE: the
        rows were read FOR UPDATE (PostgreSQL) or under the write lock (SQLite).
        ``steps``: resource id -> the step whose end releases it (a step's lease);
        ``updated``: the rows are released already (:data:`_RELEASE_HELD`)."""
        d = self._d
        plan = self.plan
        stamp = d.ts(now)
        ids = [row[0] for row in held]
        if not updated:
            cursor.execute(_RELEASE_ALL.format(m=d.mark, marks=d.marks(len(ids))),
                           [stamp, *ids])
            if cursor.rowcount != len(ids):
                raise RuntimeError(f"released {cursor.rowcount} of {len(ids)} members")
        ends: dict[str, tuple[timedelta, str, Any]] = {}  # pool -> its cooldown's end
        for rid, pool, _kind, state, owner, epoch in held:
            if state == LEASED:
                to, why = AVAILABLE, "released unused"
            else:
                found = ends.get(pool)
                if found is None:
                    cooldown = plan.cooldown(pool)
                    until = now + cooldown
                    found = ends[pool] = (cooldown, f"released; cooling down until "
                                          f"{at_utc(until)}", d.ts(until))
                cooldown, why, until_ts = found
                to = COOLDOWN
                if cooldown > timedelta(0):  # none: an earlier cooldown_until has passed
                    cooldowns.append([rid, until_ts, stamp])
            payload = {"from": state, "to": to, "pool": pool, "run_id": owner,
                       "epoch": int(epoch), "reason": why}
            step = None if steps is None else steps.get(rid)
            if step is not None:
                why = why.replace("released", f"released at the end of step {step}", 1)
                payload.update(reason=why, step=step)
            events.append(ResourceEvent(
                EventType.RESOURCE_RELEASED, rid, owner,
                f"resource {rid} {state} -> {to}: {why} (run {owner})", payload))
            if rid not in plan.members:
                gone.append(rid)

    def _faults(self, cursor: Any, run_ids: list[str]) -> dict[str, tuple[str | None, str]]:
        """Run id -> (member named or None, error) for runs whose last step failed with a
        resource fault (re-queued in this transaction)."""
        if not run_ids:
            return {}
        cursor.execute(_FAULTS.format(marks=self._d.marks(len(run_ids))), run_ids)
        found: dict[str, tuple[str | None, str]] = {}
        for run_id, error, output in cursor.fetchall():
            named = None
            try:
                data = json.loads(output) if output else None
                if isinstance(data, dict) and isinstance(data.get("resource_id"), str):
                    named = data["resource_id"]
            except ValueError:
                named = None
            found[run_id] = (named, error or "resource fault")
        return found

    def _write(self, conn: sa.Connection, cursor: Any, events: list[ResourceEvent],
               now: datetime) -> None:
        """Write ``events`` in ``conn``'s transaction (through :attr:`emit`, the store's
        ``emit_events``, when installed: with the transaction's other events)."""
        if not events:
            return
        redact = self.redact
        stamp = self._d.ts(now)
        rows = [
            (e.run_id, e.resource_id, e.kind.value, e.level.value,
             redact(e.message) if e.redact else e.message,
             dumps({k: redact(v) if k == "reason" and isinstance(v, str) else v
                    for k, v in e.payload.items()} if e.redact else e.payload),
             stamp, "system") for e in events]
        if self.emit is not None:
            self.emit(conn, rows)
        else:
            insert_rows(cursor, self._d, "event_log", AUDIT_COLUMNS, rows)


_HELD = ("SELECT resource_id, pool, kind, state, lease_owner, lease_epoch FROM resources"
         " WHERE lease_owner IN ({marks}) AND state IN ('LEASED', 'RUNNING')"
         " ORDER BY resource_id{lock}")
_RELEASE = ("UPDATE resources SET state = {m}, lease_owner = NULL, lease_until = NULL,"
            " lease_step = NULL,"
            " updated_at = {m}, last_error = coalesce({m}, last_error)"
            " WHERE resource_id = {m} AND state = {m} AND lease_owner = {m}")
_RELEASE_ALL = ("UPDATE resources SET state = CASE WHEN state = 'LEASED' THEN 'AVAILABLE'"
                " ELSE 'COOLDOWN' END, lease_owner = NULL, lease_until = NULL,"
                " lease_step = NULL, updated_at = {m}"
                " WHERE resource_id IN ({marks}) AND state IN ('LEASED', 'RUNNING')")
_RELEASE_HELD = (
    "WITH old AS (SELECT resource_id, state, lease_owner, lease_epoch FROM resources"
    " WHERE lease_owner IN ({marks}) AND state IN ('LEASED', 'RUNNING') FOR UPDATE)"
    " UPDATE resources AS r SET state = CASE WHEN old.state = 'LEASED' THEN 'AVAILABLE'"
    " ELSE 'COOLDOWN' END, lease_owner = NULL, lease_until = NULL, lease_step = NULL,"
    " updated_at = {m} FROM old WHERE r.resource_id = old.resource_id"
    " RETURNING r.resource_id, r.pool, r.kind, old.state, old.lease_owner, old.lease_epoch")
"""PostgreSQL: :data:`_HELD` and :data:`_RELEASE_ALL` in one statement (no fault)."""
_RELEASE_RUNS = (
    "UPDATE resources SET state = CASE WHEN state = 'LEASED' THEN 'AVAILABLE'"
    " ELSE 'COOLDOWN' END, lease_owner = NULL, lease_until = NULL, lease_step = NULL,"
    " updated_at = ? WHERE lease_owner IN ({marks}) AND state IN ('LEASED', 'RUNNING')"
    " RETURNING resource_id, pool, kind, state, lease_epoch")
"""SQLite, runs' end (no fault): :data:`_HELD` and :data:`_RELEASE_ALL` in one statement
(under the write lock); RETURNING gives the new state (AVAILABLE was LEASED, COOLDOWN was
RUNNING), not the owner: one run's, or known from the claims (``Releases.ended``)."""


def _owner(owners: dict[str, str] | None, rid: str) -> str:
    found = None if owners is None else owners.get(rid)
    if found is None:  # cannot be: a member not leased by these runs' claims
        raise RuntimeError(f"released {rid}, which no claim of these runs leased here")
    return found
_FAULTS = ("SELECT run_id, error, output_json FROM step_runs WHERE error_class = 'resource'"
           " AND id IN (SELECT max(id) FROM step_runs WHERE run_id IN ({marks})"
           " GROUP BY run_id)")
_GONE = "DELETE FROM resources WHERE resource_id = {m}"
_HEALTH_COLUMNS = ("resource_id", "cooldown_until", "updated_at")
_HEALTH_UPSERT = (" ON CONFLICT (resource_id) DO UPDATE SET cooldown_until ="
                  " excluded.cooldown_until, updated_at = excluded.updated_at")
