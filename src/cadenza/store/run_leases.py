"""Run leases: renewal, cancel requests and the reaper (docs/leases.md).

A *run lease* is a worker's hold on a run (a run's hold on a pool member is a *resource
lease*: :mod:`cadenza.store.resources`). In APScheduler 4's words: a claim *acquires* it,
:meth:`RunLeasesRepository.renew_run_leases` *extends* it, the run's end *releases* it and
:meth:`RunLeasesRepository.reap_expired_run_leases` is *reap_expired(now)*; consumers use
them through the :class:`~cadenza.store.protocols.RunLeases` protocol.

A claim (:meth:`~cadenza.store.claims.RunClaims.claim_runs`) gives a run its
holder: ``lease_owner`` (``host:pid:thread``), ``lease_until`` and a new ``lease_epoch``, the
fencing token every later write of the holder carries. This module holds the rest of the
lease's life:

* :meth:`RunLeasesRepository.renew_run_leases`: one renewal round of one process, **one
  UPDATE** for all its runs (``(id, lease_epoch, lease_owner) IN (VALUES ...)``: each run
  keeps its own epoch), returning the runs renewed and their pending cancel requests. Runs
  not renewed are looked up once more (only then) to tell "lost" (another epoch, another
  owner, not RUNNING) from "not visible yet" (a claim whose transaction has not committed).
* :meth:`RunLeasesRepository.cancel_requests`: the cheap read the keeper polls between
  renewals.
* :meth:`RunLeasesRepository.request_cancel`: ``runs cancel`` from any process. A QUEUED run
  is CANCELED at once (conditional UPDATE); a RUNNING run gets ``cancel_requested_by/_at`` and
  its holder stops it at its next poll.
* :meth:`RunLeasesRepository.reap_expired_run_leases`: in one transaction, RUNNING runs whose
  lease expired (or that never had one) go back to QUEUED (lease cleared, ``not_before`` NULL,
  epoch + 1, so a late write of the old holder is refused), their RUNNING step runs end
  FAILED (class ``lost``); a run recovered :data:`MAX_RECOVERIES` times goes to NEEDS_REVIEW
  instead, and a run with a pending cancel request ends CANCELED. ``dead_owner`` also takes
  runs whose holder is known dead before their lease expires (``cadenza serve`` at start).

Clocks: every lease time is written and compared on the store's time
(:mod:`cadenza.store.lease_clock`): PostgreSQL's ``now()`` inside these statements, or one
clock for every process on SQLite's host; see docs/leases.md "Whose clock decides a lease".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa

from cadenza.domain.errors import StoreError
from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState, StepState
from cadenza.store.boundary import EndedRun
from cadenza.store.codec import UTCDateTime, require_aware
from cadenza.store.lease_clock import LeaseClock
from cadenza.store.run_states import RunRecovery, reap_decision, reap_statement, state_events
from cadenza.store.tables import IS_RUNNING, resources, runs, step_runs

if TYPE_CHECKING:
    from cadenza.store.runs import RunsRepository
    from cadenza.store.steps import StepRunsRepository

MAX_RECOVERIES = 3
"""A run whose lease expired this many times (per operator resume) goes to NEEDS_REVIEW."""
REAP_BATCH = 500
"""Runs reaped per transaction at most (a restart after hundreds of expired leases is a
sequence of short transactions, not one long one)."""
LOST_ERROR = "the worker was lost (lease expired)"
LOST_CLASS = "lost"
CANCEL_REQUESTED = EventType.CANCEL_REQUESTED

_RUNNING = RunState.RUNNING.value


@dataclass(frozen=True)
class RunLease:
    """A run this process holds: its id, the epoch of its claim and the claim's owner."""

    run_id: str
    epoch: int
    owner: str


@dataclass(frozen=True)
class Renewal:
    """What one renewal round found (see :meth:`RunLeasesRepository.renew_run_leases`)."""

    renewed: frozenset[str] = frozenset()
    cancels: dict[str, str] = field(default_factory=dict)
    """Renewed runs with a pending cancel request: run id -> who asked."""
    lost: dict[str, str] = field(default_factory=dict)
    """Runs not renewed because another holder (epoch or owner) or state took over: why."""
    unseen: frozenset[str] = frozenset()
    """Runs whose claim is not visible (yet): their claim transaction has not committed, or
    was rolled back."""


@dataclass(frozen=True)
class CancelResult:
    """What :meth:`RunLeasesRepository.request_cancel` did: ``state`` is the run's state after
    it; ``requested`` is True when a running run's holder was asked to stop."""

    run_id: str
    state: RunState | None
    canceled: bool = False
    requested: bool = False
    message: str = ""


@dataclass(frozen=True)
class Recovered:
    """One run taken from a lost holder by the reaper."""

    run_id: str
    job_id: str
    old_owner: str | None
    old_epoch: int
    state: RunState
    """QUEUED (to be resumed), NEEDS_REVIEW (recovered too often) or CANCELED."""
    steps_ended: int


def owner_parts(owner: str | None) -> tuple[str, int | None]:
    """``(host, pid)`` of a ``host:pid:thread`` lease owner (pid None when unparsable)."""
    if not owner:
        return "", None
    parts = owner.rsplit(":", 2)
    if len(parts) < 3:
        return owner, None
    try:
        return parts[0], int(parts[1])
    except ValueError:
        return parts[0], None


def _values(leases: Sequence[RunLease]) -> tuple[str, dict[str, Any]]:
    rows = ", ".join(f"(:r{k}, :e{k}, :o{k})" for k in range(len(leases)))
    ids = ", ".join(f":r{k}" for k in range(len(leases)))
    params: dict[str, Any] = {}
    for k, lease in enumerate(leases):
        params[f"r{k}"] = lease.run_id
        params[f"e{k}"] = int(lease.epoch)
        params[f"o{k}"] = lease.owner
    return f"id IN ({ids}) AND (id, lease_epoch, lease_owner) IN (VALUES {rows})", params


class RunLeasesRepository(LeaseClock):
    """Renewal, cancel requests and reaping of run leases (see the module docstring)."""

    extends_resource_leases: bool = False
    """Set by the pools when the home has pool members: a renewal then also extends the
    resource leases of the runs renewed (a second UPDATE; none without pools)."""

    def renew_run_leases(self, leases: Sequence[RunLease], until: datetime, *,
                     conn: sa.Connection | None = None) -> Renewal:
        """Extend the lease of every run in ``leases`` still RUNNING at that epoch and owner
        to ``until``, in ONE UPDATE; returns which were renewed (with their pending cancel
        requests) and, read only when some were not, why the others were not. ``until`` is
        read on the store's clock; the lease is written on the store's time
        (:meth:`~cadenza.store.lease_clock.LeaseClock._lease_end`: on PostgreSQL judged by
        the database, ``now() +`` its length).

        Changes ``lease_until`` only; writes no event (a renewal is not a state change)."""
        if not leases:
            return Renewal()
        end = self._lease_end(until, self._now())
        match, params = _values(leases)
        if isinstance(end, timedelta):
            statement = sa.text(
                f"UPDATE runs SET lease_until = now() + :until WHERE state = '{_RUNNING}'"
                f" AND {match} RETURNING id, cancel_requested_by"
            ).bindparams(sa.bindparam("until", type_=sa.Interval()))
        else:
            statement = sa.text(
                f"UPDATE runs SET lease_until = :until WHERE state = '{_RUNNING}' AND {match}"
                " RETURNING id, cancel_requested_by"
            ).bindparams(sa.bindparam("until", type_=UTCDateTime()))
        with self._joined(conn) as c:
            rows = c.execute(statement, {**params, "until": end}).all()
            renewed = {row[0] for row in rows}
            if renewed and self.extends_resource_leases:
                # A run's resource leases share its lease's expiry (docs/pools.md).
                c.execute(sa.update(resources)
                          .where(resources.c.lease_owner.in_(sorted(renewed)),
                                 resources.c.state.in_(("LEASED", "RUNNING")))
                          .values(lease_until=sa.select(runs.c.lease_until)
                                  .where(runs.c.id == resources.c.lease_owner)
                                  .scalar_subquery()))
            cancels = {row[0]: row[1] for row in rows if row[1] is not None}
            missing = [lease for lease in leases if lease.run_id not in renewed]
            lost: dict[str, str] = {}
            unseen: set[str] = set()
            if missing:
                found = {row.id: row for row in c.execute(
                    sa.select(runs.c.id, runs.c.state, runs.c.lease_epoch, runs.c.lease_owner)
                    .where(runs.c.id.in_([m.run_id for m in missing])))}
                for lease in missing:
                    row = found.get(lease.run_id)
                    if row is None:
                        lost[lease.run_id] = "the run no longer exists"
                    elif row.lease_epoch < lease.epoch:
                        unseen.add(lease.run_id)
                    elif row.lease_epoch > lease.epoch:
                        lost[lease.run_id] = (f"another holder took the run (epoch "
                                              f"{row.lease_epoch}, ours {lease.epoch})")
                    elif row.state != _RUNNING:
                        lost[lease.run_id] = f"the run is {row.state}"
                    else:
                        lost[lease.run_id] = f"the run is held by {row.lease_owner}"
        return Renewal(frozenset(renewed), cancels, lost, frozenset(unseen))

    def cancel_requests(self, run_ids: Iterable[str]) -> dict[str, str]:
        """Pending cancel requests among ``run_ids``: run id -> who asked (one read)."""
        ids = list(run_ids)
        if not ids:
            return {}
        with self.read() as conn:
            rows = conn.execute(
                sa.select(runs.c.id, runs.c.cancel_requested_by)
                .where(runs.c.id.in_(ids), runs.c.cancel_requested_by.is_not(None)))
            return {row[0]: row[1] for row in rows}

    def request_cancel(self, run_id: str, by: str, *,
                       conn: sa.Connection | None = None) -> CancelResult:
        """``runs cancel``: QUEUED -> CANCELED now (reason ``canceled by <by>``; the
        RUN_STATE_CHANGED and RUN_FINISHED events; a step run that waited, PENDING, ends
        CANCELED with it), or for a RUNNING run set
        ``cancel_requested_by`` / ``cancel_requested_at`` (kept when already set) and write a
        CANCEL_REQUESTED event: its holder stops it and ends it CANCELED. Any other state
        changes nothing (``message`` says why). Raises :class:`StoreError` for no such run."""
        reason = f"canceled by {by}"
        with self._joined(conn) as c:
            for _ in range(3):  # the state may change between the read and the update
                row = c.execute(sa.select(runs.c.state, runs.c.cancel_requested_by)
                                .where(runs.c.id == run_id)).first()
                if row is None:
                    raise StoreError(f"no run {run_id!r}")
                state = RunState(row.state)
                if state is RunState.QUEUED:
                    store = cast("RunsRepository", self)  # combined in Store
                    if store.transition_run(run_id, RunState.CANCELED, actor=by,
                                            reason=reason, conn=c):
                        self._cancel_waiting_steps(c, run_id, reason, by)
                        return CancelResult(run_id, RunState.CANCELED, canceled=True,
                                            message=f"run {run_id} CANCELED ({reason})")
                    continue
                if state is RunState.RUNNING:
                    if row.cancel_requested_by is not None:
                        return CancelResult(
                            run_id, state, requested=True,
                            message=f"run {run_id} is already being canceled (asked by "
                                    f"{row.cancel_requested_by})")
                    now = self._now()
                    done = c.execute(
                        sa.update(runs)
                        .where(runs.c.id == run_id, runs.c.state == _RUNNING,
                               runs.c.cancel_requested_by.is_(None))
                        .values(cancel_requested_by=by[:128], cancel_requested_at=now))
                    if done.rowcount != 1:
                        continue
                    self._insert_event(c, CANCEL_REQUESTED,
                                       f"cancel of the running run requested by {by}",
                                       run_id=run_id, level=Level.WARNING,
                                       payload={"by": by}, actor=by, now=now)
                    return CancelResult(run_id, state, requested=True,
                                        message=f"run {run_id} is RUNNING: its worker was "
                                                f"asked to stop it ({reason})")
                hint = " (use `cadenza runs abandon`)" if state is RunState.NEEDS_REVIEW else ""
                return CancelResult(run_id, state,
                                    message=f"run {run_id} is {state.value}: nothing to "
                                            f"cancel{hint}")
        raise StoreError(f"run {run_id}: its state kept changing; try again")

    def _cancel_waiting_steps(self, conn: sa.Connection, run_id: str, reason: str,
                              by: str) -> None:
        """The PENDING step runs of a run canceled while QUEUED (an attempt that waited,
        e.g. a call_job step for its child) end CANCELED with it."""
        steps = cast("StepRunsRepository", self)  # combined in Store
        waiting = conn.execute(
            sa.select(step_runs.c.id)
            .where(step_runs.c.run_id == run_id, step_runs.c.state == StepState.PENDING.value)
            .order_by(step_runs.c.id)).scalars().all()
        for step_run_id in waiting:
            steps._transition_step_run(step_run_id, StepState.CANCELED, reason=reason,
                                      actor=by, conn=conn)

    def has_running_runs(self) -> bool:
        """Whether any run is RUNNING: one indexed read on the DBAPI connection, outside
        any transaction (an idle reaper's look)."""
        with self._quick_read() as read:
            return bool(read("SELECT 1 FROM runs WHERE state = ? LIMIT 1", (_RUNNING,)))

    def reap_expired_run_leases(
        self,
        *,
        now: datetime | None = None,
        dead_owner: Callable[[str], bool] | None = None,
        owner_like: str | None = None,
        limit: int = REAP_BATCH,
        max_recoveries: int = MAX_RECOVERIES,
    ) -> list[Recovered]:
        """Take back, in one transaction, up to ``limit`` RUNNING runs whose lease expired
        (``lease_until`` before the store's time, or NULL), plus runs whose
        ``lease_owner`` matches the SQL LIKE pattern ``owner_like`` and for which
        ``dead_owner(owner)`` is true (their holder is known dead).

        Per run (conditional on its state and epoch, so two reapers never both act): state
        QUEUED, lease_owner / lease_until / not_before NULL, lease_epoch + 1, reason "lease
        expired ..."; or NEEDS_REVIEW (error set) once it was recovered ``max_recoveries``
        times per operator resume (``resumes``); or CANCELED when a cancel was requested.
        Its RUNNING step runs end FAILED, error :data:`LOST_ERROR`, class ``lost``
        (STEP_FAILED events). Events: RUN_STATE_CHANGED (+ RUN_FINISHED when CANCELED) and
        RUN_RECOVERED with the old owner and epoch. On PostgreSQL the candidates are read
        ``FOR UPDATE SKIP LOCKED``: nodes reaping at once split the work.

        The store's time (:meth:`~cadenza.store.lease_clock.LeaseClock._store_time`) decides
        what expired: ``now`` (default: the store's clock) when the store judges leases by
        its clock; the database's clock (read once, first in the transaction) or the host's
        when it judges them by the database (``now`` then only dates the changes and
        events)."""
        at = require_aware(now or self._now(), "now")
        recovered: list[Recovered] = []
        # No run RUNNING (an idle node's usual answer): nothing to take back, and no write
        # transaction to find it out (one indexed read).
        if not self.has_running_runs():
            return recovered
        with self.write() as conn:
            expiry = at if self.lease_time != "database" else self._store_time(conn)
            expired = sa.or_(runs.c.lease_until.is_(None), runs.c.lease_until < expiry)
            if owner_like is not None and dead_owner is not None:
                expired = sa.or_(expired, runs.c.lease_owner.like(owner_like))
            query = (sa.select(runs.c.id, runs.c.job_id, runs.c.lease_owner,
                               runs.c.lease_epoch, runs.c.lease_until, runs.c.resumes,
                               runs.c.recoveries, runs.c.started_at,
                               runs.c.cancel_requested_by)
                     .where(IS_RUNNING, expired)
                     .order_by(runs.c.lease_until).limit(limit))
            if self.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            for row in conn.execute(query).all():
                lapsed = row.lease_until is None or row.lease_until < expiry
                if lapsed or (dead_owner is not None and row.lease_owner is not None
                              and dead_owner(row.lease_owner)):
                    done = self._reap_one(conn, row, at, expiry, max_recoveries)
                    if done is not None:
                        recovered.append(done)
        return recovered

    def _reap_one(self, conn: sa.Connection, row: Any, at: datetime, expiry: datetime,
                  max_recoveries: int) -> Recovered | None:
        why = ("lease expired" if row.lease_until is not None and row.lease_until < expiry
               else "its worker is gone" if row.lease_until is not None
               else "it never had a lease")
        holder = row.lease_owner or "no holder"
        budget = max_recoveries * (1 + int(row.resumes or 0))
        reaped = reap_decision(why, holder, row.cancel_requested_by, int(row.recoveries or 0),
                               budget)
        to = reaped.to
        done = conn.execute(reap_statement(row.id, row.lease_epoch, reaped, at))
        if done.rowcount != 1:
            return None
        # The step runs the lost worker left RUNNING end FAILED through the step machine,
        # fenced on the epoch the run has now (the events are those of any step end).
        steps = cast("StepRunsRepository", self)
        running = conn.execute(
            sa.select(step_runs.c.id)
            .where(step_runs.c.run_id == row.id, step_runs.c.state == StepState.RUNNING.value)
            .order_by(step_runs.c.id)).scalars().all()
        ended = sum(steps._transition_step(
            step_run_id, StepState.FAILED, LOST_ERROR,
            {"error": LOST_ERROR, "error_class": LOST_CLASS}, "reaper", row.lease_epoch + 1,
            conn, at=at)[0] for step_run_id in running)
        # The run's resource leases go with its run lease (LEASED -> AVAILABLE, RUNNING ->
        # COOLDOWN), and whatever else watches run ends sees this one.
        self._run_ended(conn, [EndedRun(row.id, row.job_id, to, row.lease_epoch)], at)
        fields = {"lease_owner": None, "lease_until": None, "error": reaped.error}
        events = state_events(row.job_id, RunState.RUNNING, to, reaped.reason,
                              row.lease_epoch + 1, fields, row.started_at, at)
        events.append(RunRecovery(row.job_id, row.lease_owner, row.lease_epoch,
                                  row.lease_until, why, to, int(row.recoveries or 0) + 1,
                                  ended).event())
        for event in events:
            self._insert_event(conn, event.event_type, event.message, run_id=row.id,
                               level=event.level, payload=event.payload, actor="reaper",
                               now=at)
        return Recovered(row.id, row.job_id, row.lease_owner, row.lease_epoch, to, ended)
