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
from cadenza.store import members as sql
from cadenza.store.boundary import EndedRun
from cadenza.store.codec import dumps
from cadenza.store.hotsql import Dialect

if TYPE_CHECKING:
    from cadenza.resources.plan import PoolPlan

AVAILABLE, LEASED, RUNNING = "AVAILABLE", "LEASED", "RUNNING"
COOLDOWN, FAULT, DISABLED = "COOLDOWN", "FAULT", "DISABLED"

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
        for run_id, held in early.items():  # rare: a claim's run that started nothing
            for member, _step in held:
                sql.unstart(cursor, self._d, member.resource_id, run_id,
                            COOLDOWN if member.was_cooling else AVAILABLE)

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
                    released = sorted(
                        (rid, pool, kind, LEASED if to == AVAILABLE else RUNNING,
                         ids[0] if len(ids) == 1 else _owner(owners, rid), epoch)
                        for rid, pool, kind, to, epoch in sql.release_runs(cursor, d, ids,
                                                                           now))
                else:
                    released = sorted(sql.release_held(cursor, d, ids, now))
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
                held = sql.held(cursor, d, ids)
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
            if not sql.release_one(cursor, d, rid, state, owner, to=to, now=now, error=error):
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
        for rid, until, stamp in cooldowns:
            sql.set_cooldown_end(cursor, d, rid, until, stamp)
        for rid in gone:
            sql.delete_member(cursor, d, rid)
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
        ``updated``: the rows are released already (:func:`~cadenza.store.members.release_held`)."""
        d = self._d
        plan = self.plan
        stamp = d.ts(now)
        ids = [row[0] for row in held]
        if not updated:
            sql.release_members(cursor, d, ids, now)
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
        found: dict[str, tuple[str | None, str]] = {}
        for run_id, error, output in sql.resource_faults(cursor, self._d, run_ids):
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
            sql.write_events(cursor, self._d, rows)


def _owner(owners: dict[str, str] | None, rid: str) -> str:
    found = None if owners is None else owners.get(rid)
    if found is None:  # cannot be: a member not leased by these runs' claims
        raise RuntimeError(f"released {rid}, which no claim of these runs leased here")
    return found
