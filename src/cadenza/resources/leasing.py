"""Resource leases: taken inside the run's claim (a step's: at that step's start), started
with the step, released at the run's end (a step's: at that step's end) (see
docs/pools.md).

:class:`PoolLeaser` is three hooks of the store, all running in transactions that exist
anyway (leasing adds no commit):

* **the claim hook** (:class:`~cadenza.store.hooks.ClaimHook`): for each run just taken whose
  job ``requires`` members of pools, AVAILABLE -> LEASED by conditional UPDATEs
  (``... WHERE resource_id = :id AND state = 'AVAILABLE'``, success only when one row
  changed), pools in name order, all or nothing per run: a member that binds a route is
  leased with that route, and when anything of a run cannot be had, what it took in this
  transaction is put back as it was (nobody saw it) and the run stays QUEUED with a
  wait_reason naming what holds the pool. Among free members the highest health score
  wins, ties by least recently used (``updated_at``), then id. On PostgreSQL each UPDATE
  only takes a row it can lock at once (``FOR UPDATE SKIP LOCKED``): a claim never waits
  on another, so two claims cannot deadlock whatever order they take members in. A member
  of a pool without health checks whose cooldown has passed goes COOLDOWN -> AVAILABLE
  there first (routes with ``[health]`` come back through their probes instead).
* **the step lease hook** (:class:`~cadenza.store.hooks.StepLeaseHook`):
  a step's own ``requires`` (and an http step's ``via``) beyond what the run holds is taken
  at that step's start, in the boundary's transaction, the same way (``lease_step`` names
  the step), and returned at its end (RUNNING -> COOLDOWN); a step that cannot have it
  sends its run back to QUEUED with a wait_reason, no attempt spent. A staged claim, which
  writes the first step's start, takes that step's needs with the run's.
* **the step start hook** (:class:`~cadenza.store.hooks.StepStartHook`):
  LEASED -> RUNNING when the run's first step starts (or the step that leased them).
* **the run end hook**: RUNNING -> COOLDOWN (``cooldown_until`` = now + the pool's
  ``cooldown``), LEASED -> AVAILABLE (the run ended before it started), RUNNING -> FAULT
  for the member a :class:`cadenza.ResourceFault` named (every route the run held when it
  named none). A member removed from the configuration is deleted once released.

A resource lease's ``lease_until`` is its run's (renewals extend both); when the reaper
re-queues a run whose lease expired, the run end hooks see it and its members return by the
same rules. Every change writes RESOURCE_LEASED, RESOURCE_RELEASED or
RESOURCE_STATE_CHANGED in the same transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from cadenza.domain.events import EventType
from cadenza.resources.plan import PoolPlan
from cadenza.resources.releases import (
    AVAILABLE,
    COOLDOWN,
    DISABLED,
    FAULT,
    LEASED,
    RUNNING,
    Releases,
    ResourceEvent,
    at_utc,
)
from cadenza.resources.watch import FreeWatch
from cadenza.store import members as sql
from cadenza.store.boundary import StepChange
from cadenza.store.hotsql import Dialect


@dataclass(slots=True)
class _Member:
    resource_id: str
    pool: str
    kind: str
    state: str
    route_id: str | None
    lease_owner: str | None
    updated_at: Any
    """As read (SQLite: the fixed-width text, which sorts as the time does; PostgreSQL: a
    datetime): an order for least recently used, and the value an undo puts back."""
    score: float | None
    cooldown_until: datetime | None
    epoch: int = 0
    was_cooling: bool = False
    """Taken by this claim out of a passed cooldown (an undo puts it back COOLDOWN)."""


class PoolLeaser(Releases):
    """The claim, step and run end hooks of the pools (see the module docstring)."""

    def __init__(self, plan: PoolPlan, *, postgres: bool,
                 redact: Callable[[str], str] = str,
                 emit: Callable[[sa.Connection, list[tuple[Any, ...]]], None] | None = None
                 ) -> None:
        """``redact``: the store's redactor's ``redact_text`` (a fault's error may quote a
        proxy URL); ``emit``: the store's ``emit_events`` (the events go with the
        transaction's other events, one INSERT for all; None: the leaser's events are not
        written, a test's)."""
        self.plan = plan
        self.postgres = postgres
        self.redact = redact
        self._d = Dialect("postgresql" if postgres else "sqlite")
        self._lock = threading.Lock()
        self._jobs: set[str] = set(plan.needs) | set(plan.steps)
        self._step_jobs: set[str] = set(plan.steps)
        self.changes = 0
        """Bumped by every release or return to AVAILABLE in this process: admission may
        try a run the pools refused again once it moved (see :meth:`may_try`)."""
        self._blocked: dict[str, tuple[int, datetime | None]] = {}
        self._unwritten: dict[int, tuple[Any, list[ResourceEvent]]] = {}
        """id(connection) -> (its transaction, lease events not written yet): when the
        leased members' step starts in the same transaction (a claim that writes the first
        step's start, a step's own lease), their LEASED -> RUNNING goes into the same event
        (:meth:`started`); :meth:`flush` writes what is left."""
        self._started_early: dict[int, tuple[Any, dict[str, list[tuple[_Member, str | None]]]]]
        self._started_early = {}
        """id(connection) -> (its transaction, run id -> the members (and lease step) a
        starting claim leased straight to RUNNING): :meth:`started` writes nothing more for
        them; :meth:`flush` and the run end hook put those of a run that started no step
        back to LEASED (:data:`_UNSTART`)."""
        self._snapshots: dict[int, tuple[Any, frozenset[str], dict[str, _Member]]] = {}
        """id(connection) -> the snapshot :meth:`serves` read in its transaction."""
        self.emit = emit
        self._held: dict[str, list[tuple[str, str, str, str | None]]] = {}
        """Run id -> the members its last claim in this process leased (id, pool, kind,
        bound route): what ``ctx.resources`` shows, without a read per step."""
        self._watch = FreeWatch()
        """The free members of the pools runs were refused for, as last read: changes made
        by other processes are seen through it (:meth:`watch`)."""

    def update(self, plan: PoolPlan) -> None:
        """Use ``plan`` from now on (a reload). Jobs that needed resources before keep
        being watched at their runs' ends (a run claimed before the reload holds them)."""
        with self._lock:
            self.plan = plan
            self._jobs |= set(plan.needs) | set(plan.steps)
            self._step_jobs |= set(plan.steps)
            self.changes += 1

    def needs(self, job_id: str) -> Mapping[str, int]:
        """What a run of ``job_id`` must hold (pool -> count)."""
        return self.plan.needs.get(job_id, {})

    # -- admission memory ------------------------------------------------------------------

    def may_try(self, run_id: str, now: datetime) -> bool:
        """False for a run the pools refused, while nothing was released in this process
        since and no cooldown it waits for has ended: admission then leaves it alone
        instead of claiming it and giving it back at every decision. What other processes
        free is seen through :meth:`watch` (within about a second); a refusal is retried
        at the latest after :data:`RECHECK` in any case."""
        with self._lock:
            seen = self._blocked.get(run_id)
            if seen is None:
                return True
            changes, recheck = seen
            if changes != self.changes or recheck is None or now >= recheck:
                del self._blocked[run_id]
                return True
            return False

    def watch(self, conn: sa.Connection, now: datetime) -> bool:
        """Admission, at each decision, before :meth:`may_try`: whether a member of a pool
        a remembered run was refused for has come back by another process's doing (a run
        ended on another node, ``cadenza resources enable``, another node's probe): then
        every refused run may be tried again. One read of those pools at most every
        :data:`~cadenza.resources.watch.WATCH`, none while no run is refused
        (:mod:`cadenza.resources.watch`)."""
        with self._lock:
            refused = bool(self._blocked)
        pools = self._watch.due(now, refused)
        if not pools:
            return False
        cursor = conn.connection.cursor()
        try:
            members = self._snapshot(cursor, pools, everyone=True)
        finally:
            cursor.close()
        if not self._watch.moved(members):
            return False
        self._moved()
        return True

    def next_recheck(self) -> datetime | None:
        """When the earliest refused run should be tried again (a cooldown's end, or
        :data:`RECHECK` after its refusal); ``None`` when no run is remembered."""
        with self._lock:
            times = [t for _, t in self._blocked.values() if t is not None]
        return min(times) if times else None

    def held_by(self, run_id: str) -> list[tuple[str, str, str, str | None]] | None:
        """What this process's claim leased for ``run_id`` (None: not claimed here)."""
        with self._lock:
            found = self._held.get(run_id)
            return None if found is None else list(found)

    def _remember(self, run_id: str, recheck: datetime | None) -> None:
        with self._lock:
            if len(self._blocked) > 100_000:
                self._blocked.clear()
            self._blocked[run_id] = (self.changes, recheck)

    def _moved(self) -> None:
        with self._lock:
            self.changes += 1

    # -- the claim hook --------------------------------------------------------------------

    def __call__(self, conn: sa.Connection, taken: Sequence[tuple[str, str]],
                 now: datetime, steps: Mapping[str, str] | None = None,
                 starting: bool = False) -> Mapping[str, str]:
        """Lease what each run of ``taken`` needs; ``{run_id: why}`` for those that wait.
        ``steps``: run id -> the step whose start the claim writes too (a staged claim):
        that step's needs are taken with the run's, all or nothing. ``starting``: the
        caller writes the runs' first step starts in this transaction and then calls
        :meth:`flush`: the lease events wait for them (one event per member for both
        changes)."""
        plan = self.plan
        wanted: list[tuple[str, Mapping[str, int], str | None, Mapping[str, int]]] = []
        for run_id, job_id in taken:
            step = None if steps is None else steps.get(run_id)
            needs, own = plan.needs.get(job_id, {}), plan.step(job_id, step)
            if needs or own:
                wanted.append((run_id, needs, step, own))
        if not wanted:
            return {}
        pools = sorted({pool for _, needs, _, own in wanted for pool in (*needs, *own)})
        cursor = conn.connection.cursor()
        try:
            with self._lock:
                read = self._snapshots.pop(id(conn), None)
            if (read is not None and read[0] is conn.get_transaction()
                    and read[1].issuperset(pools)):
                snapshot = read[2]  # read by serves() in this transaction, just before
            else:
                snapshot = self._snapshot(cursor, pools)
            events: list[ResourceEvent] = []
            refused: dict[str, str] = {}
            early: dict[str, list[tuple[_Member, str | None]]] | None = \
                {} if starting else None
            again = self._lease_batch(cursor, wanted, snapshot, now, events, early)
            if early:
                with self._lock:
                    self._started_early[id(conn)] = (conn.get_transaction(), early)
            if again and self._d.postgres:  # others may have moved since the snapshot
                snapshot = self._snapshot(cursor, pools)
            for run_id, needs, step, own in again:  # one by one: why, or a race lost
                why = self._lease_run(cursor, run_id, needs, snapshot, now, events,
                                      step=step, step_needs=own)
                if why is not None:
                    refused[run_id] = why[0]
                    self._remember(run_id, why[1])
            if starting:
                self._defer(conn, events)
            else:
                self._write(conn, cursor, events, now)
        finally:
            cursor.close()
        return refused

    def serves(self, conn: sa.Connection, job_ids: Sequence[str], now: datetime) -> bool:
        """Whether a run of one of ``job_ids`` might have what it needs now: False only
        when, for each of them, some pool it needs has no free member (a claim by job ids
        asks first, so that contention does not claim runs only to give them back).
        Optimistic: counts and bound routes are the claim's to check. Its one read is the
        pools' snapshot, which the claim that follows in the same transaction leases from
        (its compare-and-swap catches whatever changed in between).

        On PostgreSQL, when ``conn``'s transaction has sent nothing yet, the snapshot is
        read before it begins (autocommit, one round trip): a claim that finds nothing
        free then costs no BEGIN and no COMMIT, which was two thirds of the round trips of
        W4's waiting workers (docs/benchmarks.md)."""
        plan = self.plan
        needed = [plan.needs.get(job_id, {}) for job_id in job_ids]
        if any(not needs for needs in needed):
            return True
        pools = sorted({pool for needs in needed for pool in needs})
        cursor = conn.connection.cursor()
        try:
            raw: Any = conn.connection.driver_connection
            ahead = self._d.postgres and raw is not None \
                and raw.info.transaction_status == _IDLE and not raw.autocommit
            if ahead:
                raw.autocommit = True  # nothing sent yet: the read goes before the BEGIN
                try:
                    snapshot = self._snapshot(cursor, pools, reserved=True)
                finally:
                    raw.autocommit = False
            else:
                snapshot = self._snapshot(cursor, pools)
            free: set[str] = set()
            for m in snapshot.values():
                if m.pool not in free and self._free(m, now):
                    free.add(m.pool)
            servable = [needs for needs in needed if all(pool in free for pool in needs)]
            if servable and self._d.postgres:
                servable = servable if self._reserve(cursor, servable[0], snapshot,
                                                     now) else []
        finally:
            cursor.close()
        with self._lock:  # the claim that follows in this transaction leases from it
            self._snapshots[id(conn)] = (conn.get_transaction(), frozenset(pools), snapshot)
        return bool(servable)

    def _reserve(self, cursor: Any, needs: Mapping[str, int], snapshot: dict[str, _Member],
                 now: datetime) -> bool:
        """PostgreSQL: lock (``FOR UPDATE SKIP LOCKED``, until the transaction ends) the
        free members a run needing ``needs`` would take, best first, so that of several
        claims that saw the same member free only one claims a run for it: the others
        skip it, find too few, and claim nothing, where they would have claimed a run,
        lost the member's compare-and-swap and given the run back (W4: about one such
        claim per lease, docs/benchmarks.md). Members another claim locked are marked
        taken in ``snapshot``. False when a pool has too few free members left."""
        for pool in sorted(needs):
            ranked = sorted(
                (m for m in snapshot.values() if m.pool == pool and self._free(m, now)
                 and (m.route_id is None or self._free(snapshot.get(m.route_id), now))),
                key=lambda m: (-(m.score if m.score is not None else 100.0), m.updated_at,
                               m.resource_id))
            if len(ranked) < needs[pool]:
                return False
            ids = [m.resource_id for m in ranked]
            locked = sql.reserve(cursor, ids, needs[pool])
            if len(locked) < needs[pool]:
                return False
            for member in ranked:
                if member.resource_id in locked:
                    locked.discard(member.resource_id)
                    if not locked:
                        break
                else:
                    member.state = LEASED  # another claim's, as far as this one can tell
        return True

    def _defer(self, conn: sa.Connection, events: list[ResourceEvent]) -> None:
        """Keep ``events`` (leases) for :meth:`started` or :meth:`flush` in ``conn``'s
        transaction."""
        if not events:
            return
        tx = conn.get_transaction()
        with self._lock:
            found = self._unwritten.get(id(conn))
            if found is None or found[0] is not tx:  # a transaction that failed: gone
                found = (tx, [])
                self._unwritten[id(conn)] = found
            found[1].extend(events)

    def _unwritten_of(self, conn: sa.Connection) -> list[ResourceEvent]:
        tx = conn.get_transaction()
        with self._lock:
            found = self._unwritten.pop(id(conn), None)
        return [] if found is None or found[0] is not tx else found[1]

    def flush(self, conn: sa.Connection, now: datetime) -> None:
        """Write the lease events still waiting in ``conn``'s transaction (runs whose
        first boundary started no step: their members back to LEASED first)."""
        events = self._unwritten_of(conn)
        early = self._started_early.get(id(conn))
        if events or early is not None:
            cursor = conn.connection.cursor()
            try:
                self._unstart(conn, cursor)
                self._write(conn, cursor, events, now)
            finally:
                cursor.close()

    def _snapshot(self, cursor: Any, pools: list[str], reserved: bool = False,
                  everyone: bool = False) -> dict[str, _Member]:
        """The members of ``pools`` and their bound routes that may be free (AVAILABLE,
        COOLDOWN; ``everyone``: whatever their state). ``reserved`` (PostgreSQL, a
        read in autocommit only: the test's locks end with the statement): a free member
        that another claim has reserved (:func:`~cadenza.store.members.reserve` takes an
        advisory lock with the row lock, until that claim's transaction ends) is marked
        LEASED, as far as this claim can tell, so that it does not begin a transaction to
        find it locked."""
        d = self._d
        rows = sql.snapshot(cursor, d, pools, routes=self.plan.binds_routes(pools),
                            free=not everyone, reserved=reserved)
        read = d.read_ts
        out: dict[str, _Member] = {}
        for (rid, pool, kind, state, route, owner, updated, score, cooldown,
             epoch, *free) in rows:
            if free and free[0] is False:
                state = LEASED  # reserved by a claim in its transaction
            # Only a cooling member's end is read (parsed): the others' is never looked at
            # (parsing every member's was ~8 % of the drain's leasing).
            out[rid] = _Member(rid, pool, kind, state, route, owner, updated,
                               None if score is None else float(score),
                               read(cooldown) if state == COOLDOWN else None, int(epoch))
        return out

    def _free(self, member: _Member | None, now: datetime) -> bool:
        if member is None or member.resource_id not in self.plan.members:
            return False  # removed from the configuration: finishes its lease, then goes
        state = member.state
        if state == AVAILABLE:
            return True
        if state != COOLDOWN or self.plan.probed(member.pool):
            return False
        until = member.cooldown_until
        return until is None or until <= now

    def _lease_batch(self, cursor: Any,
                     wanted: list[tuple[str, Mapping[str, int], str | None, Mapping[str, int]]],
                     snapshot: dict[str, _Member], now: datetime,
                     events: list[ResourceEvent],
                     early: dict[str, list[tuple[_Member, str | None]]] | None = None,
                     ) -> list[tuple[str, Mapping[str, int], str | None, Mapping[str, int]]]:
        """Lease for every run of ``wanted`` that the snapshot can serve, with one
        multi-row compare-and-swap UPDATE (:func:`~cadenza.store.members.lease_many`, on
        the state each member had in the snapshot): the members are chosen by the same rules as
        :meth:`_lease_run`, run after run. Returns the runs left to :meth:`_lease_run`
        (one by one): those the snapshot cannot serve (it says why) and those one of whose
        members changed since the snapshot (their other members are put back first,
        nobody saw them). ``early`` (a claim that starts its runs' first steps in this
        transaction): the members go straight to RUNNING, saving the step start's UPDATE,
        and are listed there per run (:meth:`started`)."""
        planned = []
        rest = []
        order: dict[str, list[_Member]] = {}
        for item in wanted:
            run_id, needs, step, own = item
            chosen = self._choose(run_id, needs, step, own, snapshot, now, order)
            if chosen is None:
                rest.append(item)
            else:
                planned.append((item, chosen))
        rows = [(m.resource_id, item[0], lease_step, was)
                for item, chosen in planned for m, lease_step, was, _epoch, _ in chosen]
        if not rows:
            return rest
        done = sql.lease_many(cursor, self._d, rows, now,
                              to=LEASED if early is None else RUNNING)
        for item, chosen in planned:
            run_id = item[0]
            if all(m.resource_id in done for m, *_ in chosen):
                held = []
                for member, lease_step, was, _epoch, _updated in chosen:
                    member.epoch = done[member.resource_id]
                    member.was_cooling = was == COOLDOWN
                    events.append(self._lease_event(member, was, run_id, lease_step))
                    held.append((member.resource_id, member.pool, member.kind,
                                 member.route_id))
                with self._lock:
                    if len(self._held) > 100_000:
                        self._held.clear()
                    self._held[run_id] = held
                if early is not None:
                    early[run_id] = [(m, lease_step) for m, lease_step, *_ in chosen]
                continue
            for member, _step, was, epoch, updated in chosen:  # a race lost: put back
                if member.resource_id in done:
                    member.epoch, member.was_cooling = done[member.resource_id], was == COOLDOWN
                    self._undo(cursor, run_id, [(member, updated)])
                    member.state, member.epoch = was, epoch
                else:
                    member.state = LEASED  # someone else's, as far as this claim can tell
            rest.append(item)
        return rest

    def _choose(self, run_id: str, needs: Mapping[str, int], step: str | None,
                step_needs: Mapping[str, int], snapshot: dict[str, _Member], now: datetime,
                order: dict[str, list[_Member]]
                ) -> list[tuple[_Member, str | None, str, int, Any]] | None:
        """The members :meth:`_lease_run` would take for ``run_id`` if every
        compare-and-swap succeeded (each with its lease step, state, epoch and last use),
        marked taken in ``snapshot``; None (nothing marked) when it cannot have them.
        ``order``: pool -> its members in the order of preference (built once per batch,
        here, when missing, of the members free then; those taken since are skipped as
        they go, and dropped once they lead the list)."""
        chosen: list[tuple[_Member, str | None, str, int, Any]] = []
        taken: set[str] = set()
        free = self._free

        def pick(pool: str, count: int, lease_step: str | None) -> bool:
            ranked = order.get(pool)
            if ranked is None:
                ranked = sorted((m for m in snapshot.values()
                                 if m.pool == pool and free(m, now)),
                                key=lambda m: (-(m.score if m.score is not None else 100.0),
                                               m.updated_at, m.resource_id))
                order[pool] = ranked
            lead = 0
            while lead < len(ranked) and ranked[lead].state == LEASED:
                lead += 1
            if lead:
                del ranked[:lead]  # chosen for earlier runs of the batch
            got = 0
            for member in ranked:
                if got == count:
                    break
                if member.state == LEASED or member.resource_id in taken:
                    continue
                route = snapshot.get(member.route_id) if member.route_id else None
                if member.route_id is not None and (
                        route is None or route.resource_id in taken
                        or not self._free(route, now)):
                    continue
                for one in (member, route):
                    if one is not None:
                        taken.add(one.resource_id)
                        chosen.append((one, lease_step, one.state, one.epoch,
                                       one.updated_at))
                got += 1
            return got >= count

        for pool in sorted(needs):
            if not pick(pool, needs[pool], None):
                return None
        if step is not None and step_needs:
            counts: dict[str, int] = {}
            for member, *_ in chosen:
                counts[member.pool] = counts.get(member.pool, 0) + 1
            for pool in sorted(step_needs):
                extra = step_needs[pool] - counts.get(pool, 0)
                if extra > 0 and not pick(pool, extra, step):
                    return None
        for member, *_ in chosen:
            member.state, member.lease_owner = LEASED, run_id
        return chosen

    def _lease_run(self, cursor: Any, run_id: str, needs: Mapping[str, int],
                   snapshot: dict[str, _Member], now: datetime, events: list[ResourceEvent], *,
                   step: str | None = None, step_needs: Mapping[str, int] | None = None,
                   held: Mapping[str, int] | None = None,
                   remember: bool = True) -> tuple[str, datetime | None] | None:
        """Take ``needs`` for the whole run, then what ``step`` needs beyond what the run
        holds (``held``: pool -> members it holds already, plus what was just taken),
        all or nothing: on a refusal everything taken here is put back (nobody saw it)."""
        mine: list[tuple[_Member, Any]] = []
        pending: list[ResourceEvent] = []
        wants = [(pool, needs[pool], None) for pool in sorted(needs)]
        for pool, count, lease_step in wants:
            why = self._take_pool(cursor, run_id, pool, count, lease_step, snapshot, now,
                                  events, pending, mine)
            if why is not None:
                return why
        if step is not None and step_needs:
            counts = dict(held or {})
            for member, _ in mine:
                counts[member.pool] = counts.get(member.pool, 0) + 1
            for pool in sorted(step_needs):
                extra = step_needs[pool] - counts.get(pool, 0)
                if extra > 0:
                    why = self._take_pool(cursor, run_id, pool, extra, step, snapshot, now,
                                          events, pending, mine, shown=step_needs[pool])
                    if why is not None:
                        return why
        events.extend(pending)
        if remember:
            with self._lock:
                if len(self._held) > 100_000:
                    self._held.clear()
                self._held[run_id] = [(m.resource_id, m.pool, m.kind, m.route_id)
                                      for m, _ in mine]
        return None

    def _take_pool(self, cursor: Any, run_id: str, pool: str, count: int,
                   lease_step: str | None, snapshot: dict[str, _Member], now: datetime,
                   events: list[ResourceEvent], pending: list[ResourceEvent],
                   mine: list[tuple[_Member, Any]],
                   shown: int | None = None) -> tuple[str, datetime | None] | None:
        """Take ``count`` members of ``pool`` (each with its bound route); on a refusal,
        put back everything in ``mine`` and say why."""
        candidates = [m for m in snapshot.values() if m.pool == pool
                      and self._free(m, now)
                      and (m.route_id is None or self._free(snapshot.get(m.route_id), now))]
        candidates.sort(key=lambda m: (-(m.score if m.score is not None else 100.0),
                                       m.updated_at, m.resource_id))
        got = 0
        for member in candidates:
            if got == count:
                break
            if not self._take(cursor, member, run_id, lease_step, now, pending, mine):
                continue
            route = snapshot.get(member.route_id) if member.route_id else None
            if route is not None and not self._take(cursor, route, run_id, lease_step, now,
                                                    pending, mine):
                self._undo(cursor, run_id, [mine.pop()])
                pending.pop()
                continue
            got += 1
        if got < count:
            self._undo(cursor, run_id, mine)
            return self._reason(cursor, pool, shown if shown is not None else count,
                                snapshot, now, lease_step)
        return None

    def _take(self, cursor: Any, member: _Member, run_id: str, lease_step: str | None,
              now: datetime, pending: list[ResourceEvent],
              mine: list[tuple[_Member, Any]]) -> bool:
        if not self._free(member, now):
            return False
        was = member.state
        # Compare and swap on the state the snapshot saw: a member whose cooldown has
        # passed goes COOLDOWN -> AVAILABLE -> LEASED in this one statement (both
        # transitions in its event), unless someone moved it since.
        epoch = sql.lease_one(cursor, self._d, member.resource_id, was, run_id, lease_step,
                              now)
        if epoch is None:
            member.state = LEASED  # someone else's now, as far as this claim can tell
            return False
        mine.append((member, member.updated_at))
        member.state, member.lease_owner, member.epoch = LEASED, run_id, epoch
        member.was_cooling = was == COOLDOWN
        pending.append(self._lease_event(member, was, run_id, lease_step))
        return True

    def _lease_event(self, member: _Member, was: str, run_id: str,
                     lease_step: str | None) -> ResourceEvent:
        """RESOURCE_LEASED for ``member`` leased out of ``was`` (AVAILABLE, or COOLDOWN:
        both transitions in one event)."""
        payload: dict[str, Any] = {"from": was, "to": LEASED, "pool": member.pool,
                                   "run_id": run_id, "epoch": member.epoch,
                                   "route_id": member.route_id}
        whose = f"run {run_id}"
        if lease_step is not None:
            payload["step"] = lease_step
            whose += f" for step {lease_step}"
        message = (f"resource {member.resource_id} ({member.kind} of pool {member.pool}) "
                   f"leased by {whose}")
        if was == COOLDOWN:
            payload["transitions"] = [[COOLDOWN, AVAILABLE, "cooldown over"],
                                      [AVAILABLE, LEASED, "leased"]]
            message = message.replace(") leased by", ") COOLDOWN -> AVAILABLE: cooldown over; "
                                                     "leased by", 1)
        return ResourceEvent(EventType.RESOURCE_LEASED, member.resource_id, run_id, message,
                             payload)

    def _undo(self, cursor: Any, run_id: str, taken: list[tuple[_Member, Any]]) -> None:
        """Put back what this claim leased for ``run_id`` (nobody saw it), with the
        ``updated_at`` each had (as read: see :class:`_Member`)."""
        d = self._d
        for member, updated_at in reversed(taken):
            before = COOLDOWN if member.was_cooling else AVAILABLE
            sql.undo_lease(cursor, d, member.resource_id, run_id, before, updated_at)
            member.state, member.lease_owner = before, None
            member.epoch -= 1
        taken.clear()

    def _reason(self, cursor: Any, pool: str, count: int, snapshot: dict[str, _Member],
                now: datetime, step: str | None = None) -> tuple[str, datetime | None]:
        """Why a run waits for ``pool`` (for ``step``), and when to look again at the
        latest: from every member of the pool (read now, in the claim's transaction) as
        this claim sees them (``snapshot``: the free ones it read, with what it took or
        found reserved since)."""
        everyone = self._snapshot(cursor, [pool], everyone=True)
        self._watch.note([pool], everyone)  # what "came back" is measured against
        seen = {**everyone, **snapshot}
        members = [m for m in seen.values() if m.pool == pool]
        recheck = now + RECHECK
        what = f"{count} of pool {pool}" + (f" for step {step}" if step is not None else "")
        if not members:
            return (f"waiting for {what}: the pool has no members", recheck)
        cooling = [m for m in members if m.state == COOLDOWN]
        held = sorted({m.lease_owner for m in members
                       if m.state in (LEASED, RUNNING) and m.lease_owner})
        parts: list[str] = []
        if cooling:
            ends = [m.cooldown_until for m in cooling if m.cooldown_until is not None]
            if ends:
                soonest = min(ends)
                parts.append(f"{len(cooling)} cooling down until {at_utc(soonest)}")
                if soonest > now:
                    recheck = min(recheck, soonest)
            else:
                parts.append(f"{len(cooling)} cooling down")
        leased = sum(1 for m in members if m.state in (LEASED, RUNNING))
        if leased:
            who = ", ".join(held[:3]) + ("…" if len(held) > 3 else "")
            parts.append(f"{leased} leased by run{'s' if len(held) > 1 else ''} {who}")
        for state, word in ((FAULT, "at fault"), (DISABLED, "disabled")):
            n = sum(1 for m in members if m.state == state)
            if n:
                parts.append(f"{n} {word}")
        for m in members:
            if m.state == AVAILABLE and m.route_id is not None:
                route = seen.get(m.route_id)
                state = route.state if route is not None else "missing"
                if route is None or not self._free(route, now):
                    parts.append(f"{m.resource_id} is bound to route {m.route_id}, which is "
                                 f"{state}")
        return (f"waiting for {what}: " + ", ".join(parts or ["none free"]), recheck)

    # -- the step start hook ---------------------------------------------------------------

    def started(self, conn: sa.Connection, runs: Sequence[tuple[str, str]],
                now: datetime) -> None:
        """LEASED -> RUNNING for the members of ``runs`` (run id, job id) whose first step
        starts in this transaction. Members a starting claim in this transaction leased
        straight to RUNNING need no statement: only their events change (a run that also
        leased for its step here, or was not claimed here, runs
        :func:`~cadenza.store.members.start_leased`)."""
        ids = [run_id for run_id, job_id in runs if job_id in self._jobs]
        if not ids:
            return
        d = self._d
        early = self._early_of(conn, ids)
        unwritten = self._unwritten_of(conn)
        leases = {(e.resource_id, e.run_id): e for e in unwritten}
        done = {(m.resource_id, run_id) for run_id, held in early.items() for m, _ in held}
        others = {run_id for rid, run_id in leases if (rid, run_id) not in done}
        rest = [run_id for run_id in ids if run_id not in early or run_id in others]
        cursor = conn.connection.cursor()
        try:
            rows: list[Any] = []
            if rest:
                rows = sql.start_leased(cursor, d, rest, now)
            rows += [(m.resource_id, m.pool, run_id, m.epoch, step)
                     for run_id, held in early.items() for m, step in held]
            events: list[ResourceEvent] = []
            for rid, pool, owner, epoch, step in rows:
                why = f"run {owner} started" + (f" step {step}" if step is not None else "")
                lease = leases.pop((rid, owner), None)
                if lease is not None:  # leased in this transaction: one event for both
                    lease.payload["transitions"] = [
                        *lease.payload.get("transitions",
                                           [[lease.payload["from"], LEASED, "leased"]]),
                        [LEASED, RUNNING, why]]
                    lease.payload["to"] = RUNNING
                    lease.message += f"; LEASED -> RUNNING: {why}"
                    events.append(lease)
                    continue
                events.append(ResourceEvent(
                    EventType.RESOURCE_STATE_CHANGED, rid, owner,
                    f"resource {rid} LEASED -> RUNNING: {why}",
                    {"from": LEASED, "to": RUNNING, "pool": pool, "run_id": owner,
                     "epoch": int(epoch), **({"step": step} if step is not None else {})}))
            # Leases of runs that start nothing here (none in practice): as they were.
            events[:0] = [e for e in unwritten if (e.resource_id, e.run_id) in leases]
            self._write(conn, cursor, events, now)
        finally:
            cursor.close()

    # -- the step hook ---------------------------------------------------------------------

    def steps_changed(self, conn: sa.Connection, changes: Sequence[StepChange],
                      now: datetime) -> Mapping[str, str]:
        """At boundaries that end a step and / or start one (the run goes on): return what
        the step that ended leased (RUNNING -> COOLDOWN, LEASED -> AVAILABLE), then take
        what the step that starts needs beyond what the run holds, all or nothing.
        ``{run_id: why}`` for the runs whose step cannot have it: their boundary puts the
        run back in the queue instead (``record_boundaries``), and admission leaves them
        alone as it does a refused claim."""
        plan = self.plan
        mine = [c for c in changes if c.job_id in self._step_jobs]
        if not mine:
            return {}
        d = self._d
        ids = sorted({c.run_id for c in mine})
        refused: dict[str, str] = {}
        cursor = conn.connection.cursor()
        try:
            held: dict[str, list[Any]] = {}
            for row in sql.held(cursor, d, ids, steps=True):
                held.setdefault(row[4], []).append(row)
            events: list[ResourceEvent] = []
            ended = [row for c in mine if c.ended is not None
                     for row in held.get(c.run_id, ()) if row[6] == c.ended]
            if ended:
                cooldowns: list[list[Any]] = []
                gone: list[str] = []
                self._release_all(cursor, [row[:6] for row in ended], now, events,
                                  cooldowns, gone, steps={row[0]: row[6] for row in ended})
                self._after_release(cursor, cooldowns, gone, events)
                released = {row[0] for row in ended}
                held = {run: [row for row in rows if row[0] not in released]
                        for run, rows in held.items()}
            starting = [(c, own) for c in mine
                        if (own := plan.step(c.job_id, c.starting)) and c.starting is not None]
            if starting:
                pools = sorted({pool for _, own in starting for pool in own})
                snapshot = self._snapshot(cursor, pools)
                for change, own in starting:
                    counts: dict[str, int] = {}
                    for row in held.get(change.run_id, ()):
                        counts[row[1]] = counts.get(row[1], 0) + 1
                    leased: list[ResourceEvent] = []
                    why = self._lease_run(cursor, change.run_id, {}, snapshot, now, leased,
                                          step=change.starting, step_needs=own, held=counts,
                                          remember=False)
                    if why is not None:
                        refused[change.run_id] = why[0]
                        self._remember(change.run_id, why[1])
                    else:  # the step starts in this transaction: see started()
                        self._defer(conn, leased)
            self._write(conn, cursor, events, now)
        finally:
            cursor.close()
        with self._lock:  # ctx.resources reads the store for these runs from now on
            for run_id in ids:
                self._held.pop(run_id, None)
        if ended:
            self._moved()
        return refused


_IDLE = 0
"""psycopg's ``TransactionStatus.IDLE``: no transaction begun on the server."""

RECHECK = timedelta(seconds=30)
"""The longest a refused run is left alone by admission (other nodes' releases)."""
