"""Every change of a run's state: the state machine, its SQL and its events, in one module.

A run moves through :data:`~cadenza.domain.states.RUN_TRANSITIONS`; each transition has one
writer here, and every store path that changes a run's state goes through it:

========================  =====================================  ==========================
transition                writer (SQL)                           caller
========================  =====================================  ==========================
create (QUEUED, MISSED)   :func:`creation_event`                 ``create_run``,
                                                                 ``create_fires``
claim (QUEUED->RUNNING)   :func:`claim_statement` (one text per  ``claim_runs``,
and its give-back         dialect), :data:`GIVE_BACK`,           ``claim_staged``
                          :func:`claim_event`
end, re-queue, defer      :data:`END_RUN` (one statement for a   ``record_boundaries``
(RUNNING->...)            batch), :func:`end_run_row`            (the group commit,
                                                                 ``run --local``)
cancel, resume, abandon   :data:`RUN_MACHINE`,                   ``transition_run``
(single run)              :func:`transition_statement`           (``runs cancel``,
                                                                 ``runs resume/abandon``)
reap (RUNNING->QUEUED /   :func:`reap_statement`                 ``reap_expired_run_leases``
NEEDS_REVIEW / CANCELED)
========================  =====================================  ==========================

The events of a run's state are built here only, one dataclass per event type, so that the
same event carries the same payload from every path: :class:`RunChanged`
(RUN_STATE_CHANGED), :class:`RunFinished` (RUN_FINISHED), :class:`RunRecovery`
(RUN_RECOVERED); :func:`state_events` gives the events of any change. What else a run's end
writes (its resource leases, a notification's outbox row, a waiting parent) is the store's
run end hooks (:class:`~cadenza.store.hooks.StoreHooks`), called by each writer in its
transaction.

A run's recoveries (a lost worker's run taken back by the reaper) are counted in
``runs.recoveries`` (migration 0019), not by counting RUN_RECOVERED events.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import TERMINAL_RUN_STATES, RunState
from cadenza.store.codec import UTCDateTime
from cadenza.store.hotsql import BatchUpdate, Dialect
from cadenza.store.tables import runs
from cadenza.store.transition import Machine

_VALUES = "(VALUES {values}) AS v"


def batch_update(columns: tuple[str, ...], stamps: int, sqlite: str,
                 types: tuple[str, ...], *, replan: bool = False) -> BatchUpdate:
    """A :class:`~cadenza.store.hotsql.BatchUpdate` from its SQLite text and the PostgreSQL
    ``types`` of its columns (PostgreSQL's text is made from the same).

    The state guard of such a statement is an expression (``state || '' = 'RUNNING'``),
    which no index answers: PostgreSQL then looks each row up by key. Given the plain
    column, it joined the batch to every RUNNING run found through the state index whenever
    its statistics said few were running (16 run ends among 12,000 running runs: 5 ms
    instead of 0.09). ``replan``: see :attr:`~cadenza.store.hotsql.BatchUpdate.replan`."""
    if len(types) != len(columns) or _VALUES not in sqlite:
        raise ValueError(f"a batch update needs {_VALUES!r} and one type per column")
    return BatchUpdate(columns, stamps, sqlite, types, replan)


class RunEvent(NamedTuple):
    """One event of a run's state, not yet redacted: what the store's writers insert."""

    event_type: EventType
    message: str
    level: Level
    payload: dict[str, Any]


def run_level(to: RunState) -> Level:
    """The level of a run's state change: ERROR for FAILED, WARNING for NEEDS_REVIEW."""
    if to is RunState.FAILED:
        return Level.ERROR
    return Level.WARNING if to is RunState.NEEDS_REVIEW else Level.INFO


def _suffix(reason: str | None) -> str:
    return f": {reason}" if reason else ""


@dataclass(frozen=True, slots=True)
class RunChanged:
    """The payload of RUN_STATE_CHANGED: the run's job, ``from`` and ``to``, the reason, the
    lease epoch after the change and the other columns it set (``fields``)."""

    job_id: str
    frm: RunState
    to: RunState
    reason: str | None
    epoch: int
    fields: Mapping[str, Any] = field(default_factory=dict)

    def event(self) -> RunEvent:
        return RunEvent(EventType.RUN_STATE_CHANGED,
                        f"run {self.frm.value} -> {self.to.value}{_suffix(self.reason)}",
                        run_level(self.to),
                        {"job_id": self.job_id, "from": self.frm.value, "to": self.to.value,
                         "reason": self.reason, "epoch": self.epoch,
                         "fields": dict(self.fields)})


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The payload of RUN_FINISHED: a run's change into a final state (``from``, the lease
    epoch and the other columns it set, as :class:`RunChanged` says them) and when it
    started and ended. The one event of that change: no RUN_STATE_CHANGED restates it."""

    job_id: str
    frm: RunState
    state: RunState
    reason: str | None
    epoch: int
    fields: Mapping[str, Any]
    started_at: datetime | None
    finished_at: datetime

    @property
    def duration_s(self) -> float | None:
        started = self.started_at
        return None if started is None else (self.finished_at - started).total_seconds()

    def event(self) -> RunEvent:
        took = [] if self.fields.get("rows") is None else [f"{self.fields['rows']} rows"]
        if self.duration_s is not None:
            took.append(f"in {self.duration_s:.2f}s")
        return RunEvent(EventType.RUN_FINISHED,
                        f"run of {self.job_id} finished {self.state.value}"
                        + (f" ({' '.join(took)})" if took else "")
                        + _suffix(self.reason), run_level(self.state),
                        {"job_id": self.job_id, "from": self.frm.value,
                         "state": self.state.value, "reason": self.reason,
                         "epoch": self.epoch, "fields": dict(self.fields),
                         "started_at": self.started_at, "finished_at": self.finished_at,
                         "duration_s": self.duration_s})


@dataclass(frozen=True, slots=True)
class RunRecovery:
    """The payload of RUN_RECOVERED: a run the reaper took back from a lost holder."""

    job_id: str
    old_owner: str | None
    old_epoch: int
    lease_until: datetime | None
    why: str
    to: RunState
    recoveries: int
    steps_ended: int

    def event(self) -> RunEvent:
        holder = self.old_owner or "no holder"
        return RunEvent(EventType.RUN_RECOVERED,
                        f"run recovered from {holder} (epoch {self.old_epoch}): {self.why}; "
                        f"now {self.to.value}", Level.WARNING,
                        {"job_id": self.job_id, "old_owner": self.old_owner,
                         "old_epoch": self.old_epoch, "lease_until": self.lease_until,
                         "why": self.why, "to": self.to.value,
                         "recoveries": self.recoveries, "steps_ended": self.steps_ended})


def state_events(job_id: str, frm: RunState, to: RunState, reason: str | None, epoch: int,
                 fields: Mapping[str, Any], started_at: datetime | None,
                 now: datetime) -> list[RunEvent]:
    """The event of a run's change ``frm -> to``: RUN_FINISHED when ``to`` is final (it says
    the change too), else RUN_STATE_CHANGED. Every writer of a run's state uses this."""
    if to in TERMINAL_RUN_STATES:
        return [RunFinished(job_id, frm, to, reason, epoch, fields, started_at, now).event()]
    return [RunChanged(job_id, frm, to, reason, epoch, fields).event()]


# --- create ------------------------------------------------------------------------------

CREATION_PAYLOAD_KEYS = (
    "job_id", "state", "trigger", "schedule", "scheduled_for", "params", "overrides",
    "priority", "not_before", "reason",
)
"""The keys of a RUN_CREATED / RUN_MISSED payload, in the order they are built."""


def creation_event(
    job_id: str,
    state: RunState,
    trigger: str,
    schedule: str | None,
    scheduled_for: datetime | None,
    params: dict[str, Any],
    overrides: dict[str, Any],
    priority: int,
    not_before: datetime | None,
    reason: str | None,
) -> tuple[EventType, str, Level, dict[str, Any]]:
    """The RUN_CREATED (QUEUED) or RUN_MISSED (MISSED) event of a new run, not yet redacted:
    (type, message, level, payload). Shared by ``create_run`` and ``create_fires``, so both
    write the same event."""
    missed = state is RunState.MISSED
    when = f" for {scheduled_for.isoformat()}" if scheduled_for else ""
    message = f"run of {job_id} {'missed' if missed else 'queued'}{when} ({trigger})"
    if reason:
        message += f": {reason}"
    payload = dict(zip(CREATION_PAYLOAD_KEYS, (
        job_id, state, trigger, schedule, scheduled_for, params, overrides, priority,
        not_before, reason,
    ), strict=True))
    if missed:
        return EventType.RUN_MISSED, message, Level.WARNING, payload
    return EventType.RUN_CREATED, message, Level.INFO, payload


# --- claim -------------------------------------------------------------------------------

# -- claim (QUEUED -> RUNNING) and its give-back ----------------------------------------------

TAKE = (
    "WITH chosen AS {materialized}(SELECT id FROM runs WHERE {queued}"
    " AND (not_before IS NULL OR not_before <= {m}){where}"
    " ORDER BY priority DESC, coalesce(scheduled_for, created_at), id LIMIT {m}{lock})"
    " UPDATE runs SET state = 'RUNNING', lease_epoch = lease_epoch + 1, lease_owner = {m},"
    " lease_until = {lease}, started_at = coalesce(started_at, {m}), updated_at = {m},"
    " reason = NULL, wait_reason = NULL"
    # The guard is an expression, not ``state = ?``: given a plain column, SQLite's planner
    # scans every queued run in the index instead of looking the ids up.
    " WHERE id IN (SELECT id FROM chosen) AND state || '' = 'QUEUED' RETURNING {returning}"
)
"""The claim. From the queue, ``{queued}`` is ``state = 'QUEUED'``, a literal: it must match
the partial index's WHERE, read in order. Among given run ids it is an expression
(``state || '' = 'QUEUED'``), which no index answers: both planners then look the ids up by
primary key. Given the plain column, both scanned every queued run in the claim-order index
and kept the given ones (on PostgreSQL whenever the statistics say few runs are queued): a
claim of 16 runs from a queue of 10,000 took 0.86 ms instead of 0.03 on SQLite, and 7 ms
instead of 0.4 on PostgreSQL.
``{lease}`` is a parameter, or ``now() + `` the lease's length on PostgreSQL when the store
judges leases by the database's time (:mod:`cadenza.store.lease_clock`).
On PostgreSQL the CTE is materialized: as a plain subquery it may be evaluated more than
once, and with SKIP LOCKED each evaluation can pick other rows (claiming more than LIMIT)."""
GIVE_BACK = (
    "UPDATE runs SET state = 'QUEUED', lease_epoch = lease_epoch - 1, lease_owner = NULL,"
    " lease_until = NULL, started_at = CASE WHEN lease_epoch = 1 THEN NULL ELSE started_at"
    " END, wait_reason = {m}, updated_at = {m} WHERE id = {m} AND state = 'RUNNING'"
)
"""A claim the hook refused, undone in the same transaction (nobody saw it): a run's first
claim (epoch 1 after it) had no start time before."""


def claim_statement(d: Dialect, *, ids: int | None = None, jobs: int | None = None,
                    fresh: bool = False, returning: str = "*", lease_for: bool = False) -> str:
    """:data:`TAKE` for ``d``, among ``ids`` run ids and ``jobs`` job ids when given.
    Parameters: now, the run ids, the job ids, limit, owner, lease_until (with
    ``lease_for``, PostgreSQL: the lease's length, added to the database's ``now()``),
    now, now."""
    where = f" AND id IN ({d.marks(ids)})" if ids is not None else ""
    if jobs is not None:
        where += f" AND job_id IN ({d.marks(jobs)})"
    if fresh:
        where += " AND lease_epoch = 0"
    lease = f"now() + {d.mark}" if lease_for else d.mark
    queued = "state || '' = 'QUEUED'" if ids is not None else "state = 'QUEUED'"
    return TAKE.format(m=d.mark, where=where, returning=returning, lease=lease, queued=queued,
                       materialized="MATERIALIZED " if d.postgres else "",
                       lock=" FOR UPDATE SKIP LOCKED" if d.postgres else "")


def claim_event(job_id: str, epoch: int, owner: str, until: datetime) -> RunEvent:
    """The RUN_STATE_CHANGED of a claim (QUEUED -> RUNNING by ``owner`` until ``until``)."""
    return RunChanged(job_id, RunState.QUEUED, RunState.RUNNING, None, epoch,
                      {"lease_owner": owner, "lease_until": until}).event()


# --- a single run's transition (cancel, resume, abandon) -----------------------------------

RUN_FIELDS = frozenset(
    "not_before priority rows error wait_reason lease_owner lease_until lease_epoch attempt"
    " resumes started_at finished_at".split()
)
"""Columns a transition may set through ``fields`` (besides state, reason and timestamps)."""

# Built once: constructing and cache-keying a Core statement costs more Python time than
# SQLite needs to run it.
_SELECT_FOR_TRANSITION = (
    sa.select(runs.c.state, runs.c.lease_epoch, runs.c.started_at, runs.c.job_id)
    .where(runs.c.id == sa.bindparam("p_id"))
    .with_for_update()
)

COMMANDED: Mapping[RunState | None, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.CANCELED}),
    RunState.NEEDS_REVIEW: frozenset({RunState.QUEUED, RunState.FAILED}),
}
"""The transitions a person or the scheduler commands on one run: a cancel of a run that
has not started, a resume and an abandon of a run in review. A run starts only through
the claim, and a RUNNING run ends only through its worker's boundary or the reaper: so
that no path takes a run without its claim hook (its resources) or ends one without its
run end hooks."""

RUN_MACHINE = Machine(
    name="run", noun="run", states=RunState, transitions=COMMANDED, table=runs,
    key=runs.c.id, select=_SELECT_FOR_TRANSITION, fields=RUN_FIELDS,
    stale="lease epoch {epoch} is stale; {frm} -> {to} refused",
)
"""The run state machine of ``transition_run``: :data:`COMMANDED` only."""

WRITERS: Mapping[tuple[RunState | None, RunState], tuple[str, ...]] = {
    (None, RunState.QUEUED): ("creation_event",),
    (None, RunState.MISSED): ("creation_event",),
    (RunState.QUEUED, RunState.RUNNING): ("claim_statement",),
    (RunState.QUEUED, RunState.CANCELED): ("RUN_MACHINE",),
    (RunState.RUNNING, RunState.SUCCEEDED): ("END_RUN",),
    (RunState.RUNNING, RunState.FAILED): ("END_RUN",),
    (RunState.RUNNING, RunState.CANCELED): ("END_RUN", "reap_statement"),
    (RunState.RUNNING, RunState.QUEUED): ("END_RUN", "GIVE_BACK", "reap_statement"),
    (RunState.RUNNING, RunState.NEEDS_REVIEW): ("END_RUN", "reap_statement"),
    (RunState.NEEDS_REVIEW, RunState.QUEUED): ("RUN_MACHINE",),
    (RunState.NEEDS_REVIEW, RunState.FAILED): ("RUN_MACHINE",),
}
"""Each transition of :data:`~cadenza.domain.states.RUN_TRANSITIONS` and the writers of
this module that make it (a test checks that both list the same transitions)."""


@functools.cache
def transition_statement(to: RunState, fenced: bool, fields: frozenset[str]) -> sa.Update:
    """``UPDATE runs SET ... WHERE id = :p_id AND state IN (sources) [AND lease_epoch =
    :p_epoch]``. Parameters: p_id, p_now, p_reason, p_epoch, and f_<name> for each field.

    Clears the lease; a final state sets finished_at; NEEDS_REVIEW -> QUEUED (a resume)
    increments resumes and resets attempt. Only the targets of :data:`COMMANDED`."""
    now = sa.bindparam("p_now", type_=UTCDateTime())
    values: dict[str, Any] = {
        "state": to.value,
        "updated_at": now,
        "reason": sa.bindparam("p_reason", type_=sa.Text()),
    }
    values["lease_owner"] = None
    values["lease_until"] = None
    if to in TERMINAL_RUN_STATES:
        values["finished_at"] = now
        values["wait_reason"] = None
    if to is RunState.QUEUED:
        resuming = runs.c.state == RunState.NEEDS_REVIEW.value
        values["resumes"] = sa.case((resuming, runs.c.resumes + 1), else_=runs.c.resumes)
        values["attempt"] = sa.case((resuming, 0), else_=runs.c.attempt)
    for name in fields:
        values[name] = sa.bindparam(f"f_{name}", type_=runs.c[name].type)
    where = [runs.c.id == sa.bindparam("p_id"), runs.c.state.in_(RUN_MACHINE.sources(to))]
    if fenced:
        where.append(runs.c.lease_epoch == sa.bindparam("p_epoch"))
    return sa.update(runs).where(*where).values(values)


# --- a batch of run ends (the step boundaries) ---------------------------------------------

END_RUN = batch_update(
    ("id", "epoch", "state", "rows", "reason", "error", "final", "not_before", "wait_reason",
     "attempt"), 2,
    "UPDATE runs SET state = v.column3, rows = v.column4, reason = v.column5,"
    " error = v.column6, updated_at = ?,"
    " finished_at = CASE WHEN v.column7 = 1 THEN ? ELSE runs.finished_at END,"
    " not_before = CASE WHEN v.column7 = 1 THEN runs.not_before ELSE v.column8 END,"
    " wait_reason = v.column9, attempt = coalesce(v.column10, runs.attempt),"
    " lease_owner = NULL, lease_until = NULL FROM (VALUES {values}) AS v"
    " WHERE runs.id = v.column1 AND runs.state || '' = 'RUNNING' AND runs.lease_epoch = v.column2",
    ("text", "bigint", "text", "bigint", "text", "text", "integer", "timestamptz", "text",
     "integer"))
"""A run's end: RUNNING -> a final state (finished_at set), or QUEUED / NEEDS_REVIEW for a
retry, a deferral or spent attempts (not_before, wait_reason and attempt set); both release
the run's lease. Guarded on RUNNING at the boundary's epoch."""


def end_run_row(run_id: str, epoch: int, state: RunState, rows: int | None,
                reason: str | None, error: str | None, not_before: Any, wait_reason: str | None,
                attempt: int | None) -> dict[str, Any]:
    """One row of :data:`END_RUN` (texts already redacted, times encoded for the dialect)."""
    row: dict[str, Any] = {"id": run_id, "epoch": epoch, "state": state.value,
                           "rows": rows, "reason": reason, "error": error}
    if state in TERMINAL_RUN_STATES:
        row.update(final=1, not_before=None, wait_reason=None, attempt=None)
    else:
        row.update(final=0, not_before=not_before, wait_reason=wait_reason, attempt=attempt)
    return row


def end_fields(state: RunState, rows: int | None, error: str | None,
               not_before: datetime | None, attempt: int | None,
               wait_reason: str | None) -> dict[str, Any]:
    """The ``fields`` of a boundary's run end in its RUN_STATE_CHANGED."""
    fields: dict[str, Any] = {"rows": rows, "error": error}
    if state not in TERMINAL_RUN_STATES:
        fields.update(not_before=not_before, attempt=attempt, wait_reason=wait_reason)
    return fields


# --- the reaper ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Reaped:
    """What the reaper does with one run it takes back: the new state, reason and error."""

    to: RunState
    reason: str
    error: str | None
    why: str


def reap_decision(why: str, holder: str, canceled_by: str | None, recoveries: int,
                  budget: int) -> Reaped:
    """The reaper's choice for a run whose holder was lost: CANCELED when a cancel was
    asked, NEEDS_REVIEW once ``recoveries`` (before this one) reach ``budget``, else QUEUED
    again."""
    if canceled_by is not None:
        return Reaped(RunState.CANCELED, f"canceled by {canceled_by}", None, why)
    if recoveries + 1 > budget:
        return Reaped(RunState.NEEDS_REVIEW,
                      f"{why} (held by {holder}); recovered {recoveries} times already, "
                      "needs review (`cadenza runs resume` or `runs abandon`)",
                      f"the run's worker was lost {recoveries + 1} times (last: {why})", why)
    return Reaped(RunState.QUEUED, f"{why} (held by {holder}); re-queued", None, why)


def reap_statement(run_id: str, epoch: int, reaped: Reaped, at: datetime) -> sa.Update:
    """The reaper's UPDATE of one run: guarded on RUNNING at ``epoch``; the lease cleared,
    epoch + 1, ``recoveries`` + 1, and finished_at for a CANCELED run."""
    values: dict[str, Any] = {
        "state": reaped.to.value, "lease_owner": None, "lease_until": None,
        "not_before": None, "lease_epoch": runs.c.lease_epoch + 1, "reason": reaped.reason,
        "wait_reason": None, "updated_at": at, "recoveries": runs.c.recoveries + 1,
    }
    if reaped.error is not None:
        values["error"] = reaped.error
    if reaped.to in TERMINAL_RUN_STATES:
        values["finished_at"] = at
    return sa.update(runs).where(runs.c.id == run_id,
                                 runs.c.state == RunState.RUNNING.value,
                                 runs.c.lease_epoch == epoch).values(**values)

