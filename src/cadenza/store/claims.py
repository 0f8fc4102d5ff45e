"""Taking runs: the one claim of a QUEUED run, whoever takes it (docs/store.md).

Every path that starts a run goes through :func:`_take`, one statement per dialect
(:func:`~cadenza.store.run_states.claim_statement`, beside every other write of a run's
state): the dispatcher's claim of the runs admission chose and ``cadenza run --local``
(:meth:`RunClaims.claim_runs`, followed by the first boundary of
:mod:`cadenza.store.boundaries`), and a staged burst, in the node or in its claimer process
(:meth:`RunClaims.claim_staged`, which writes the first step's start encoded ahead). Admission
(caps, windows, budgets) is decided before: a claim only takes what it is given.

A claim moves each run QUEUED -> RUNNING with a conditional UPDATE: ``lease_epoch + 1`` (the
new holder's fencing token, which every later write of the run checks), lease_owner,
lease_until, started_at on its first start, updated_at; reason and wait_reason cleared. The
runs are chosen in admission's order (priority, then scheduled time, then id); on PostgreSQL
``FOR UPDATE SKIP LOCKED`` in a materialized CTE, so that concurrent claimers never take the
same run.

**The claim hook** (:class:`~cadenza.store.hooks.ClaimHook`, ``store.hooks.claim``) is
the plug point of
what else a run must hold to start, in the claim's own transaction: from the resource pools
on, the run's resource leases, taken in a fixed order, all or nothing. It is called with the
runs just taken (in admission order) and may refuse some; a refused run is given back at once
(QUEUED, its epoch, owner, lease and first start as before, ``wait_reason`` the hook's
reason), gets no claim event and is not returned, and the transaction's other claims stand.

**What a staged claim relies on** (:meth:`RunClaims.runs_version`): on SQLite, the table
``runs_version`` holds a counter that triggers bump in the transaction of every write that can
change an admission decision: a run inserted or deleted, or its state, not_before, priority,
lease epoch or job changed (migration 0007). No code path can forget it. SQLite has one
writer, so an unchanged counter between two transactions means that nobody queued, canceled,
claimed, ended or re-queued a run in between: a staged chunk then skips reading the queue and
the load again. PostgreSQL has no such counter (a counter row would serialize every writer of
``runs`` across nodes): there each chunk checks everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState, StepState
from cadenza.store import later, run_states
from cadenza.store.boundaries import RUN_PARAMS, BoundaryWriter, event_row
from cadenza.store.boundary import Boundary, NewRun
from cadenza.store.codec import UTCDateTime, dumps, new_run_id, require_aware, utc_from_raw
from cadenza.store.hotsql import (
    AUDIT_COLUMNS,
    EVENT_COLUMNS,
    ORDERED,
    SORTS_AGAIN,
    SORTS_AGAIN_COLUMN,
    STEP_COLUMNS,
    Dialect,
    audit_row,
    event_values,
    insert_rows,
    update_rows,
)
from cadenza.store.lease_clock import LeaseClock
from cadenza.store.records import RUN_COLUMNS_SQL, RUN_FIELDS, RunRecord
from cadenza.store.tables import runs

_QUEUED = RunState.QUEUED.value
_RUNNING = RunState.RUNNING.value


_PIPELINE = later.PIPELINE
"""PostgreSQL's claim from the queue sends two statements in one round trip."""
_IDS_PER_CLAIM = 900
"""Ids per claim statement (SQLite's default parameter limit is 32766)."""
_DUE_IDS = ("SELECT id FROM runs WHERE state = 'QUEUED'"
            " AND (not_before IS NULL OR not_before <= {m})")
_RUNS_VERSION = "SELECT version FROM runs_version"
_RUN_COLUMNS = ("id", "job_id", "state", "trigger", "schedule", "scheduled_for", "created_at",
                "finished_at", "not_before", "priority", "params_json", "overrides_json",
                "reason", "updated_at")
_TIMESTAMPS = frozenset(c.name for c in runs.c if isinstance(c.type, UTCDateTime))
_SENTINEL = "9007199254740993"
"""The step run id in a payload encoded ahead (an integer no table reaches here)."""


@dataclass(frozen=True, slots=True)
class StagedStart:
    """The rows of one run's claim and first step start, encoded ahead (redacted)."""

    run_id: str
    job_id: str
    step: tuple[str, str, int]
    """The first step's name, type and attempt."""
    events: tuple[tuple[str, str, str, str, str], ...]
    """(event_type, level, message, payload_json, actor); the step run id is a placeholder."""
    params_json: str | None


class _Row:
    """A decoded ``runs`` row for :meth:`RunRecord.from_row` (which reads ``_mapping``)."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping


def _take(cursor: Any, d: Dialect, *, owner: str, until: datetime | timedelta, now: datetime,
          limit: int, run_ids: list[str] | None = None, job_ids: list[str] | None = None,
          fresh: bool = False, returning: str = "*",
          decode: bool = True) -> tuple[list[str], list[list[Any]]]:
    """Claim up to ``limit`` QUEUED runs due at ``now`` (only among ``run_ids`` / runs of
    ``job_ids`` when given; ``fresh``: only runs never claimed, epoch 0) for ``owner`` until
    ``until`` (or, a ``timedelta``: the lease's length, which PostgreSQL adds to its
    ``now()``; see :meth:`~cadenza.store.lease_clock.LeaseClock._lease_end`). Returns the
    names of the ``returning`` columns and the claimed rows (in no order), timestamps
    decoded (``decode``) or as the driver gives them."""
    stamp = d.ts(now)
    lease_for = isinstance(until, timedelta)
    lease = until if isinstance(until, timedelta) else d.ts(until)
    parts: list[list[str]] = [[]]
    if run_ids is not None:
        parts = [run_ids[k:k + _IDS_PER_CLAIM] for k in range(0, len(run_ids), _IDS_PER_CLAIM)]
    names: list[str] = []
    out: list[list[Any]] = []
    # PostgreSQL, a claim from the whole queue (no ids): see ORDERED.
    again = d.postgres and run_ids is None
    for part in parts:
        if len(out) >= limit:
            break
        sql = run_states.claim_statement(d, ids=len(part) if run_ids is not None else None,
                              jobs=len(job_ids) if job_ids is not None else None,
                              fresh=fresh, returning=returning + SORTS_AGAIN_COLUMN
                              if again else returning, lease_for=lease_for)
        params = [stamp, *part, *(job_ids or ()), limit - len(out), owner, lease, stamp,
                  stamp]
        if again and _PIPELINE:
            with cursor.connection.pipeline():
                cursor.execute(ORDERED)
                cursor.execute(sql, params)
        else:
            if again:  # a libpq older than 14: one round trip more
                cursor.execute(ORDERED)
            cursor.execute(sql, params)
        names = [col[0] for col in cursor.description]
        if again:
            names.pop()
        stamps = [k for k, name in enumerate(names) if name in _TIMESTAMPS] if decode else []
        read = d.read_ts
        for values in cursor.fetchall():
            row = list(values)
            if again:
                row.pop()  # set_config's answer
            for k in stamps:
                row[k] = read(row[k])
            out.append(row)
    if again and not out:  # no row: the RETURNING did not set it back
        cursor.execute(SORTS_AGAIN)
    return names, out


class RunClaims(BoundaryWriter, LeaseClock):
    """Runs queued and taken: :meth:`create_runs`, :meth:`claim_runs`, the staged claim
    (:meth:`stage_start`, :meth:`claim_staged`) and what it checks (see the module
    docstring)."""

    def create_runs(
        self, new_runs: Sequence[NewRun], *, conn: sa.Connection | None = None
    ) -> list[str]:
        """Record several unscheduled (manual or call_job) QUEUED runs in one transaction.

        Returns their ids in order. Sets the same columns and writes the same RUN_CREATED
        events as :meth:`~cadenza.store.runs.RunsRepository.create_run` with
        ``schedule=None`` (scheduled fires, which need deduplication, go through that one).
        """
        if not new_runs:
            return []
        now = self._creation_now()
        d = self._sql()
        stamp = d.ts(now)
        rows: list[tuple[Any, ...]] = []
        events: list[dict[str, Any]] = []
        ids: list[str] = []
        for new in new_runs:
            run_id = new_run_id(now)
            scheduled = require_aware(new.scheduled_for) if new.scheduled_for else None
            not_before = require_aware(new.not_before) if new.not_before else None
            ids.append(run_id)
            rows.append((run_id, new.job_id, _QUEUED, new.trigger, None, d.ts(scheduled), stamp,
                         None, d.ts(not_before), new.priority, dumps(dict(new.params)),
                         dumps(dict(new.overrides)), None, stamp))
            when = f" for {scheduled.isoformat()}" if scheduled else ""
            trigger = self.redactor.redact_text(new.trigger)
            events.append(event_row(
                EventType.RUN_CREATED, f"run of {new.job_id} queued{when} ({trigger})",
                run_id, Level.INFO, {
                    "job_id": new.job_id, "state": RunState.QUEUED.value, "trigger": trigger,
                    "schedule": None, "scheduled_for": scheduled,
                    "params": self._redacted(new.params),
                    "overrides": self._redacted(new.overrides),
                    "priority": new.priority, "not_before": not_before, "reason": None,
                }, self.redactor.redact_text(new.actor), stamp))
        with self._joined(conn) as c:
            cursor = c.connection.cursor()
            try:
                insert_rows(cursor, d, "runs", _RUN_COLUMNS, rows)
                insert_rows(cursor, d, "event_log", EVENT_COLUMNS,
                            list(map(event_values, events)))
            finally:
                cursor.close()
        return ids

    def _redacted(self, values: Mapping[str, Any]) -> Any:
        return self.redactor.redact_value(dict(values)) if values else {}

    def claim_runs(
        self,
        owner: str,
        lease_until: datetime,
        *,
        limit: int = 1,
        run_ids: Iterable[str] | None = None,
        job_ids: Iterable[str] | None = None,
        conn: sa.Connection | None = None,
        starting: bool = False,
    ) -> list[RunRecord]:
        """Take up to ``limit`` QUEUED runs whose ``not_before`` has passed (highest priority,
        then earliest scheduled time: admission's order), optionally only among ``run_ids``
        and runs of ``job_ids``, for ``owner`` until ``lease_until`` (see the module
        docstring for the columns changed and the claim hook).

        ``starting``: the caller records the runs' first boundaries in ``conn``'s
        transaction and then calls :meth:`claim_written` (a claim hook may leave what it
        records of a start to the start: the pools write one event per member leased and
        started).

        Among ``job_ids``, a claim hook with a ``serves(conn, job_ids, now)`` method (the
        pools) is asked first whether any of those jobs could have what it needs: when none
        could, nothing is claimed (no claim made only to be given back).

        Writes one RUN_STATE_CHANGED per claimed run. Admission rules (concurrency caps,
        windows, budgets) are not applied here: the caller decides which runs may start.
        Returns the claimed runs as they are after the change, in admission order.
        """
        if limit < 1:
            return []
        until = require_aware(lease_until, "lease_until")
        ids = list(run_ids) if run_ids is not None else None
        jobs = list(job_ids) if job_ids is not None else None
        if (ids is not None and not ids) or (jobs is not None and not jobs):
            return []
        d = self._sql()
        with self._joined(conn) as c:
            now = self._now()
            hook = self.hooks.claim
            if jobs is not None and hook is not None and not hook.serves(c, jobs, now):
                return []  # nothing free for any of these jobs: no claim to give back
            cursor = c.connection.cursor()
            starting = starting and conn is not None
            if starting:
                self._collect(c)  # the events go with the first boundaries' (see above)
            try:
                names, rows = _take(cursor, d, owner=owner, until=self._lease_end(until, now),
                                    now=now, limit=limit, run_ids=ids, job_ids=jobs,
                                    decode=False)
                if not rows:
                    return []
                if tuple(names) == RUN_FIELDS:  # RETURNING *: every column in table order
                    claimed = [RunRecord.from_raw(row) for row in rows]
                else:  # pragma: no cover - a database that reorders RETURNING *
                    claimed = [RunRecord.from_row(cast("sa.Row[Any]", _Row({
                        name: utc_from_raw(value) if name in _TIMESTAMPS else value
                        for name, value in zip(names, row, strict=True)}))) for row in rows]
                # RETURNING has no order: give them back in the order they were chosen.
                claimed.sort(key=lambda run: (-run.priority, run.scheduled_for or run.created_at,
                                              run.id))
                refused = self._hook(c, cursor, d, [(r.id, r.job_id) for r in claimed], now,
                                     starting=starting)
                if refused:
                    claimed = [r for r in claimed if r.id not in refused]
                stamp = d.ts(now)
                if starting:  # the first boundaries, next in this transaction, need no fence
                    self._claimed_here(c, [(run.id, _RUNNING, run.lease_epoch, run.job_id,
                                            d.ts(run.started_at), None)  # child: not read
                                           for run in claimed])
                if starting:  # said by each run's first step start (see _claims_here)
                    self._claims_here(c, {run.id: run_states.claim_event(
                        run.job_id, run.lease_epoch, owner, until) for run in claimed}, stamp)
                else:
                    events = [claim_event(run.id, run.job_id, run.lease_epoch, owner, until,
                                          stamp) for run in claimed]
                    self.emit_events(c, list(map(audit_row, events)))
            finally:
                cursor.close()
        return claimed

    def _hook(self, c: sa.Connection, cursor: Any, d: Dialect,
              taken: list[tuple[str, str]], now: datetime,
              steps: Mapping[str, str] | None = None,
              starting: bool = False) -> Mapping[str, str]:
        """Call the claim hook, if any, on ``taken``; give back the runs it refuses.
        ``steps``: run id -> the step whose start this claim writes too (a staged claim:
        that step's own needs are taken with the run's, all or nothing); ``starting``: the
        first step starts are written in this transaction, then :meth:`claim_written` is
        called."""
        hook = self.hooks.claim
        if hook is None or not taken:
            return {}
        refused = hook(c, taken, now, steps=steps, starting=starting)
        if refused:
            stamp = d.ts(now)
            cursor.executemany(run_states.GIVE_BACK.format(m=d.mark), [
                (self._redact_text(why), stamp, run_id) for run_id, why in refused.items()])
        return refused

    def stage_start(self, boundary: Boundary, job_id: str, owner: str,
                    lease_until: datetime) -> StagedStart | None:
        """Encode the claim of a fresh run (epoch 0 -> 1) and ``boundary``, its first
        boundary, ahead of time (a staged burst: executor/staging.py). ``None`` when the
        boundary is not one step start and nothing else but parameters (that run is claimed
        the ordinary way). Its log lines are the caller's: the executor gives them back to
        the run's log with the claim's time, and they are written with the run's next
        boundary (fewer rows at the due time; a crash before that boundary loses those
        lines, not the claim's audit events)."""
        if (boundary.epoch != 1 or boundary.logs or len(boundary.starts) != 1
                or boundary.step_end or boundary.run_end or boundary.checkpoint
                or boundary.events or boundary.starts[0].state is not StepState.RUNNING):
            return None
        until = require_aware(lease_until, "lease_until")
        d = self._sql()
        now = self._now()
        # The claim is said by the step start (one STEP_STARTED, as claim_runs writes it).
        claim = run_states.claim_event(job_id, 1, owner, until)
        step_rows = self._events(boundary, [int(_SENTINEL)], job_id, None, now, d,
                                 (claim, None))
        events = []
        for row in step_rows:
            payload = row["payload_json"] or ""
            if payload.count(_SENTINEL) != 1:
                return None  # cannot place the id safely: the ordinary way
            events.append((row["event_type"], row["level"], row["message"], payload,
                           row["actor"]))
        start = boundary.starts[0]
        return StagedStart(
            run_id=boundary.run_id,
            job_id=job_id,
            step=(start.step, start.step_type, start.attempt),
            events=tuple(events),
            params_json=None if boundary.params is None
            else dumps(self.redactor.redact_value(dict(boundary.params))),
        )

    def claim_staged(self, conn: sa.Connection, staged: Sequence[StagedStart], owner: str,
                     lease_until: datetime, *, now: datetime | None = None) -> dict[str, int]:
        """Claim the runs of ``staged`` still QUEUED, fresh (epoch 0) and due, and write their
        first start as encoded ahead, in ``conn``'s transaction, at ``now`` (default: the
        store's clock); returns ``{run_id: first step run id}`` of the runs claimed (the
        others changed since they were staged, or the claim hook refused them, and are left
        alone).

        The rows written are those of :meth:`claim_runs` followed by
        :meth:`~cadenza.store.boundaries.BoundaryWriter.record_boundaries` of the first
        boundary (tests compare the two), with a few multi-row statements: the claim, the
        first step runs, the events (the claim's, then STEP_STARTED with the step run's id
        put into the payload encoded ahead), the resolved parameters where given."""
        if not staged:
            return {}
        d = self._sql()
        now = require_aware(now, "now") if now is not None else self._now()
        stamp = d.ts(now)
        cursor = conn.connection.cursor()
        collecting = self._collect(conn)
        ok = False
        try:
            _, rows = _take(cursor, d, owner=owner,
                            until=self._lease_end(lease_until, now), now=now,
                            limit=len(staged), run_ids=[s.run_id for s in staged],
                            fresh=True, returning="id")
            taken = {row[0] for row in rows}
            mine = [s for s in staged if s.run_id in taken]
            refused = self._hook(conn, cursor, d, [(s.run_id, s.job_id) for s in mine], now,
                                 steps={s.run_id: s.step[0] for s in mine}, starting=True)
            if refused:
                mine = [s for s in mine if s.run_id not in refused]
            if not mine:
                ok = True
                return {}
            running = StepState.RUNNING.value
            returned = insert_rows(cursor, d, "step_runs", STEP_COLUMNS, [
                (s.run_id, *s.step, running, None, stamp, stamp, None, stamp) for s in mine
            ], returning="id, run_id")
            ids = {run_id: int(step_run_id) for step_run_id, run_id in returned}
            for start_hook in self.hooks.step_start:
                start_hook(conn, [(s.run_id, s.job_id) for s in mine], now)
            events: list[tuple[Any, ...]] = []
            for s in mine:
                text = str(ids[s.run_id])
                events.extend((s.run_id, None, kind, level, message,
                               payload.replace(_SENTINEL, text), stamp, actor)
                              for kind, level, message, payload, actor in s.events)
            insert_rows(cursor, d, "event_log", AUDIT_COLUMNS,
                        self._collected(conn, end=collecting) + events)
            update_rows(cursor, d, RUN_PARAMS, [
                {"id": s.run_id, "epoch": 1, "params": s.params_json}
                for s in mine if s.params_json is not None], stamp, "run params")
            ok = True
        finally:
            try:
                if collecting and ok is not None:
                    rest = self._collected(conn, end=True)
                    if rest and ok:  # none in practice: what the hooks emitted after
                        insert_rows(cursor, d, "event_log", AUDIT_COLUMNS, rest)
            finally:
                cursor.close()
        self.claim_written(conn, now)
        return ids

    def claim_written(self, conn: sa.Connection, now: datetime | None = None) -> None:
        """A claim made with ``starting`` and its first boundaries are written in
        ``conn``'s transaction: the claim hook writes what it still holds back."""
        hook = self.hooks.claim
        if hook is not None:
            hook.flush(conn, now if now is not None else self._now())
        rows = self._collected(conn, end=True)
        if rows:
            cursor = conn.connection.cursor()
            try:
                insert_rows(cursor, self._sql(), "event_log", AUDIT_COLUMNS, rows)
            finally:
                cursor.close()

    def fresh_queued_runs(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs of ``run_ids`` that are QUEUED and were never claimed (epoch 0), in
        the order given. Changes nothing."""
        found: dict[str, RunRecord] = {}
        ids = list(run_ids)
        # On the DBAPI cursor: a stage reads thousands of runs in the seconds before their
        # due time, and SQLAlchemy's result layer was a sixth of staging a run.
        with self._quick_read() as read:
            for first in range(0, len(ids), _IDS_PER_CLAIM):
                part = ids[first:first + _IDS_PER_CLAIM]
                rows = read(f"SELECT {RUN_COLUMNS_SQL} FROM runs WHERE id IN "
                            f"({', '.join('?' * len(part))}) AND state = ? "
                            "AND lease_epoch = 0", (*part, _QUEUED))
                found.update((row[0], RunRecord.from_raw(row)) for row in rows)
        return [found[run_id] for run_id in ids if run_id in found]

    def due_queued_ids(self, at: datetime, *, conn: sa.Connection | None = None) -> set[str]:
        """The ids of the QUEUED runs that may start at ``at`` (``not_before`` passed or
        unset). Changes nothing."""
        d = self._sql()
        with self._reading(conn) as c:
            cursor = c.connection.cursor()
            try:
                cursor.execute(_DUE_IDS.format(m=d.mark), [d.ts(require_aware(at, "at"))])
                return {row[0] for row in cursor.fetchall()}
            finally:
                cursor.close()

    def runs_version(self, conn: sa.Connection) -> int | None:
        """SQLite: the runs' version counter, read in ``conn``'s write transaction (see the
        module docstring: equal readings in two transactions mean that no run was queued,
        changed state, moved its due time or priority, or was deleted in between). ``None``
        on PostgreSQL, which keeps no such counter."""
        if self.dialect != "sqlite":
            return None
        cursor = conn.connection.cursor()
        try:
            cursor.execute(_RUNS_VERSION)
            row = cursor.fetchone()
            return int(row[0]) if row is not None else 0
        finally:
            cursor.close()

    def checkpoint_wal(self) -> None:
        """SQLite: copy the write-ahead log into the database now (PASSIVE: waits for
        nobody), so that the writes of a coming burst do not pay for it (a commit that
        finds the log past ``wal_autocheckpoint`` pages checkpoints it itself). Nothing on
        other databases; never raises (the next checkpoint will do)."""
        if self.dialect != "sqlite":
            return
        try:
            raw = self.engine.raw_connection()
            try:
                raw.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                raw.close()
        except Exception:  # busy, or a memory database: nothing to do
            return


def claim_event(run_id: str, job_id: str, epoch: int, owner: str, until: datetime,
                stamp: Any) -> dict[str, Any]:
    """The RUN_STATE_CHANGED event of a claim (:func:`cadenza.store.run_states.claim_event`)
    as ``event_log`` values."""
    event = run_states.claim_event(job_id, epoch, owner, until)
    return event_row(event.event_type, event.message, run_id, event.level, event.payload,
                     "system", stamp)
