"""What each consumer of the store uses: small protocols, implemented by :class:`Store`.

A consumer types its store against the protocol it needs, not against :class:`Store` (one
object with every repository), so that what it may do is visible in its signature and a test
double, or another implementation, needs only those methods:

* :class:`RunQueue`: runs created and taken (the scheduler, "run now", the dispatcher);
* :class:`RunControl`: an operator's decisions (cancel, resume, abandon);
* :class:`RunLeases`: a worker's hold on a run (the lease keeper and the reaper);
* :class:`Resources`: the pools' members, their resource leases and health;
* :class:`AuditLog`: the append-only event log (:class:`EventQueries` reads it);
* :class:`HistoryQueries`: read-only runs, step runs, logs and events (CLI, web UI, API).

And what the store calls inside its own transactions, given to it once as one
:class:`StoreHooks` table (built by :func:`cadenza.assembly.assemble` for every process:
``serve``, ``run --local``, the claimer process, the CLI's services): :class:`ClaimHook`,
:class:`StepLeaseHook`, :class:`StepStartHook`, :class:`RunEndHook` and :class:`MissedHook`.

"Lease" names two holds (docs/leases.md, docs/pools.md): a **run lease** (a worker's hold on a
run: ``runs.lease_*``, fenced by ``lease_epoch``) and a **resource lease** (a run's hold on a
pool member: ``resources.lease_*``). The lease vocabulary follows APScheduler 4's data
store: *acquire* (a claim), *extend* (a renewal), *release* (the end of the holder's use)
and *reap_expired(now)*; each method's docstring (on the implementation) says which fields it
changes and which events it writes.

``store/store.py`` proves under mypy that :class:`Store` implements every protocol here; a
unit test checks the same at runtime, signature by signature.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import ResourceState, RunState
from cadenza.store.boundary import NewRun
from cadenza.store.records import (
    EventRecord,
    LogRecord,
    ResourceRecord,
    RunRecord,
    StepRunRecord,
)

if TYPE_CHECKING:
    from cadenza.store.boundary import EndedRun, StepChange
    from cadenza.store.run_leases import CancelResult, Recovered, Renewal, RunLease


class RunQueue(Protocol):
    """Runs created (one per fire, or "run now") and taken by a worker.

    *acquire* of a run lease is :meth:`claim_runs`: QUEUED -> RUNNING with a new
    ``lease_epoch``, ``lease_owner`` and ``lease_until``; its *release* is the run's end.
    """

    def create_run(
        self,
        job_id: str,
        trigger: str,
        *,
        state: RunState = ...,
        schedule: str | None = ...,
        scheduled_for: datetime | None = ...,
        params: Mapping[str, Any] | None = ...,
        overrides: Mapping[str, Any] | None = ...,
        reason: str | None = ...,
        priority: int = ...,
        not_before: datetime | None = ...,
        actor: str = ...,
        conn: sa.Connection | None = ...,
    ) -> str | None:
        """Record one run (QUEUED, or MISSED); ``None`` when the fire exists already."""
        ...

    def create_runs(self, new_runs: Sequence[NewRun], *,
                    conn: sa.Connection | None = ...) -> list[str]:
        """Record several unscheduled QUEUED runs in one transaction; their ids."""
        ...

    def transition_run(
        self,
        run_id: str,
        to: RunState,
        *,
        actor: str = ...,
        reason: str | None = ...,
        epoch: int | None = ...,
        fields: Mapping[str, Any] | None = ...,
        conn: sa.Connection | None = ...,
    ) -> bool:
        """Move a run if its state (and ``epoch``) allows it; ``True`` iff it changed;
        RUN_STATE_CHANGED (+ RUN_FINISHED for an end)."""
        ...

    def claim_runs(
        self,
        owner: str,
        lease_until: datetime,
        *,
        limit: int = ...,
        run_ids: Iterable[str] | None = ...,
        job_ids: Iterable[str] | None = ...,
        conn: sa.Connection | None = ...,
        starting: bool = ...,
    ) -> list[RunRecord]:
        """Acquire run leases: take up to ``limit`` due QUEUED runs for ``owner``
        (``starting``: their first boundaries follow in ``conn``'s transaction, then
        ``claim_written``)."""
        ...

    def claim_written(self, conn: sa.Connection, now: datetime | None = ...) -> None:
        """A ``starting`` claim's first boundaries are written: what the claim hook held
        back is written now."""
        ...


class RunControl(Protocol):
    """What an operator decides about a run (``runs cancel / resume / abandon``)."""

    def request_cancel(self, run_id: str, by: str, *,
                       conn: sa.Connection | None = ...) -> CancelResult:
        """Cancel a QUEUED run now, or ask a RUNNING run's holder to stop it."""
        ...

    def resume_run(self, run_id: str, *, actor: str) -> RunRecord:
        """NEEDS_REVIEW -> QUEUED with fresh attempts."""
        ...

    def abandon_run(self, run_id: str, *, actor: str,
                    skip: Sequence[tuple[str, str]] = ...) -> RunRecord:
        """NEEDS_REVIEW -> FAILED, the steps after the failed one recorded SKIPPED."""
        ...


class RunLeases(Protocol):
    """A worker's hold on its runs: *extend* (:meth:`renew_run_leases`), the cancel
    requests it polls, and *reap_expired* (:meth:`reap_expired_run_leases`). *Acquire* is
    :meth:`RunQueue.claim_runs`; *release* is the run's end."""

    def renew_run_leases(self, leases: Sequence[RunLease], until: datetime, *,
                         conn: sa.Connection | None = ...) -> Renewal:
        """Extend: ``lease_until`` of every run still held at its epoch and owner, in one
        UPDATE; no event. Says which were renewed, lost or not visible yet."""
        ...

    def cancel_requests(self, run_ids: Iterable[str]) -> dict[str, str]:
        """Pending cancel requests among ``run_ids``: run id -> who asked."""
        ...

    def reap_expired_run_leases(
        self,
        *,
        now: datetime | None = ...,
        dead_owner: Callable[[str], bool] | None = ...,
        owner_like: str | None = ...,
        limit: int = ...,
        max_recoveries: int = ...,
    ) -> list[Recovered]:
        """Reap expired: RUNNING runs whose lease expired at ``now`` (or whose holder is
        dead) back to QUEUED, NEEDS_REVIEW or CANCELED, their RUNNING step runs FAILED;
        RUN_STATE_CHANGED, STEP_FAILED and RUN_RECOVERED events."""
        ...


class Resources(Protocol):
    """The pools' members (docs/pools.md): registration, health, and the state machine whose
    LEASED / RUNNING states are a run's resource lease (``lease_owner`` = the run)."""

    def upsert_resource(self, resource_id: str, pool: str, kind: str, *,
                        route_id: str | None = ..., actor: str = ...,
                        conn: sa.Connection | None = ...) -> None:
        """Register a member (AVAILABLE) or update its pool, kind and route."""
        ...

    def transition_resource(
        self,
        resource_id: str,
        to: ResourceState,
        *,
        actor: str = ...,
        reason: str | None = ...,
        fields: Mapping[str, Any] | None = ...,
        epoch: int | None = ...,
        conn: sa.Connection | None = ...,
    ) -> bool:
        """Move a resource (acquire: -> LEASED, release: -> AVAILABLE / COOLDOWN);
        ``True`` iff it changed; RESOURCE_STATE_CHANGED."""
        ...

    def update_resource_health(self, resource_id: str, fields: Mapping[str, Any], *,
                               conn: sa.Connection | None = ...) -> None:
        """Set health fields of a resource; no event."""
        ...

    def get_resource(self, resource_id: str, *,
                     conn: sa.Connection | None = ...) -> ResourceRecord | None:
        """One resource with its health."""
        ...

    def list_resources(self, pool: str | None = ..., *,
                       state: ResourceState | None = ...) -> list[ResourceRecord]:
        """Resources (of one pool, or all) with their health."""
        ...


class EventQueries(Protocol):
    """Reading the audit log."""

    def list_events(
        self,
        *,
        run_id: str | None = ...,
        resource_id: str | None = ...,
        event_type: EventType | str | None = ...,
        since: datetime | None = ...,
        limit: int = ...,
        after_id: int | None = ...,
        newest_first: bool = ...,
        before_id: int | None = ...,
        actor: str | None = ...,
    ) -> list[EventRecord]:
        """Events matching every given filter."""
        ...


class AuditLog(EventQueries, Protocol):
    """The append-only audit log (docs/store.md): append, and read back."""

    def append_event(
        self,
        event_type: EventType | str,
        message: str,
        *,
        run_id: str | None = ...,
        resource_id: str | None = ...,
        level: Level | str = ...,
        payload: Any = ...,
        actor: str = ...,
        conn: sa.Connection | None = ...,
    ) -> int:
        """Append one redacted event; its ``event_id``."""
        ...


class HistoryQueries(EventQueries, Protocol):
    """Read-only history: what ``runs list / show / logs``, ``events`` and the web UI read.
    Nothing here writes."""

    def get_run(self, run_id: str, *, conn: sa.Connection | None = ...) -> RunRecord | None:
        """One run."""
        ...

    def list_runs(
        self,
        *,
        job: str | None = ...,
        state: RunState | str | Iterable[RunState | str] | None = ...,
        limit: int = ...,
        before: str | datetime | None = ...,
        trigger: str | None = ...,
        after: str | None = ...,
    ) -> list[RunRecord]:
        """Runs, newest first, keyset-paged by ``before`` (older) or ``after`` (newer)."""
        ...

    def list_step_runs(self, run_id: str, *,
                       conn: sa.Connection | None = ...) -> list[StepRunRecord]:
        """Every attempt of every step of a run."""
        ...

    def list_logs(
        self,
        run_id: str,
        *,
        after_id: int | None = ...,
        limit: int | None = ...,
        min_level: Level | str | None = ...,
    ) -> list[LogRecord]:
        """A run's log lines in order."""
        ...

    def run_is_finished(self, run_id: str) -> bool:
        """Whether the run is in a terminal state."""
        ...


PROTOCOLS: tuple[type[Any], ...] = (
    RunQueue, RunControl, RunLeases, Resources, EventQueries, AuditLog, HistoryQueries,
)
"""Every consumer protocol (the conformance test walks them)."""


# --- the store's hooks -------------------------------------------------------------------

class ClaimHook(Protocol):
    """What else a run takes in its claim's transaction: the resource pools
    (:class:`~cadenza.resources.leasing.PoolLeaser`).

    Called with the transaction's connection, the runs just taken as ``(run_id, job_id)`` in
    admission order, and the claim's time; returns ``{run_id: why}`` for the runs that must
    not start now (they stay QUEUED with ``why`` as their wait_reason). ``steps``: run id ->
    the step whose start the claim writes too (a staged claim): that step's needs are taken
    with the run's, all or nothing. ``starting``: the caller writes the runs' first step
    starts in this transaction, then calls :meth:`flush`. Whatever it takes it takes in a
    fixed order (by resource id), all or nothing per run, so that two claims never wait on
    each other. Raising rolls the whole transaction back."""

    def __call__(self, conn: sa.Connection, taken: Sequence[tuple[str, str]], now: datetime,
                 steps: Mapping[str, str] | None = None,
                 starting: bool = False) -> Mapping[str, str]:
        ...

    def serves(self, conn: sa.Connection, job_ids: Sequence[str], now: datetime) -> bool:
        """False when none of ``job_ids`` can have what it needs now: the claim of the
        queue for those jobs is skipped (nothing to take, nothing to give back)."""
        ...

    def flush(self, conn: sa.Connection, now: datetime) -> None:
        """A claim made with ``starting`` and its first step starts are written: write what
        the hook held back (its lease events, one per member for both changes)."""
        ...


class StepLeaseHook(Protocol):
    """Called in the transaction of a batch of boundaries, before the step starts are
    written, with the boundaries that end a step or start one without ending their run:
    the resource pools return what the step that ended held and take what the starting
    step needs. Returns ``{run_id: why}`` for the runs whose step cannot start now: their
    boundary ends the run instead (QUEUED, ``wait_reason`` = why, no attempt spent).
    Raising rolls the batch back."""

    def __call__(self, conn: sa.Connection, changes: Sequence[StepChange],
                 now: datetime) -> Mapping[str, str]:
        ...


class StepStartHook(Protocol):
    """Called in the transaction of a batch of boundaries (and of a staged claim) with the
    runs ``(run_id, job_id)`` one of whose steps starts RUNNING in it: the resource pools
    move the members a run leased LEASED -> RUNNING there. Raising rolls the batch back."""

    def __call__(self, conn: sa.Connection, runs: Sequence[tuple[str, str]],
                 now: datetime) -> None:
        ...


class RunEndHook(Protocol):
    """Called in the transaction of every run end (a boundary's, the reaper's, a cancel, an
    abandon) with the runs whose execution ended: what else a run end releases (its
    resource leases), announces (a notification's outbox row) or wakes (a parent waiting
    for this child; the children of a canceled parent) is written there. Raising rolls the
    whole transaction back."""

    def __call__(self, conn: sa.Connection, ended: Sequence[EndedRun], now: datetime) -> None:
        ...


class MissedHook(Protocol):
    """Called in the transaction that records MISSED fires with the ``(run_id, job_id)`` of
    each MISSED run it inserted (the notifications' outbox)."""

    def __call__(self, conn: sa.Connection, missed: list[tuple[str, str]],
                 now: datetime) -> None:
        ...


@dataclass(frozen=True)
class StoreHooks:
    """Everything the store calls inside its own transactions, in one table, given to the
    store once (:meth:`~cadenza.store.core.StoreCore.use_hooks`). A cancel is a run end: the
    run end hooks see the runs a cancel ended (and a cancel of a parent reaches its children
    through the children's run end hook). Empty by default: a bare store (a test's, a
    backup's) writes runs and nothing else."""

    claim: ClaimHook | None = None
    step_lease: StepLeaseHook | None = None
    step_start: tuple[StepStartHook, ...] = ()
    run_end: tuple[RunEndHook, ...] = ()
    """In order: the pools release, the notifications write their outbox rows, the child
    runs wake their parent or follow its cancel."""
    missed: tuple[MissedHook, ...] = ()

    def names(self) -> dict[str, list[str]]:
        """Each hook's kind and the names of what fills it (for a test and for a log line)."""
        def name(hook: object) -> str:
            if isinstance(hook, types.MethodType):
                kind, method = type(hook.__self__), hook.__func__.__name__
            else:
                kind, method = type(hook), "__call__"
            return f"{kind.__module__}.{kind.__qualname__}.{method}"

        return {"claim": [name(self.claim)] if self.claim is not None else [],
                "step_lease": [name(self.step_lease)] if self.step_lease is not None else [],
                "step_start": [name(h) for h in self.step_start],
                "run_end": [name(h) for h in self.run_end],
                "missed": [name(h) for h in self.missed]}
