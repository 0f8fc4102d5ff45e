"""What each consumer of the store uses: small protocols, implemented by :class:`Store`.

A consumer types its store against the protocol it needs, not against :class:`Store` (one
object with every repository), so that what it may do is visible in its signature and a test
double, or another implementation, needs only those methods:

* :class:`RunQueue`: runs created and taken (the scheduler, "run now", the dispatcher);
* :class:`RunCommands`: an operator's decisions (cancel, resume, abandon);
* :class:`RunLeases`: a worker's hold on a run (the lease keeper and the reaper);
* :class:`Resources`: the pools' members, their resource leases and health;
* :class:`AuditLog`: the append-only event log (:class:`EventQueries` reads it);
* :class:`HistoryQueries`: read-only runs, step runs, logs and events (CLI, web UI, API).

What the store calls inside its own transactions (the hooks) is declared in
:mod:`cadenza.store.hooks`.

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

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import ResourceState, RunState
from cadenza.store.boundary import NewRun
from cadenza.store.records import (
    EventRecord,
    LogCursor,
    LogRecord,
    ResourceRecord,
    RunLogEntry,
    RunRecord,
    StepRunRecord,
)

if TYPE_CHECKING:
    from collections.abc import Collection
    from contextlib import AbstractContextManager
    from datetime import timedelta
    from pathlib import Path

    from cadenza.clock import Clock
    from cadenza.domain.admission import Candidate, Load
    from cadenza.store.admission import QueueWatch
    from cadenza.store.boundary import Boundary, BoundaryResult
    from cadenza.store.checkpoints import KeyRecord
    from cadenza.store.children import ChildRuns
    from cadenza.store.claims import StagedStart
    from cadenza.store.core import Redactor, WriteFailure
    from cadenza.store.cursors import CursorKey
    from cadenza.store.data_version import DataVersion
    from cadenza.store.fires import NewFire
    from cadenza.store.hooks import StoreHooks
    from cadenza.store.lease_clock import LeaseTime
    from cadenza.store.maintenance import BackupReport, PruneReport, WalCheck
    from cadenza.store.records import CheckpointRecord, UserRecord
    from cadenza.store.run_leases import CancelResult, Recovered, Renewal, RunLease
    from cadenza.store.sessions import (
        Credential,
        IdempotentRun,
        LoginFailures,
        SessionRecord,
        TokenRecord,
    )


class Transactions(Protocol):
    """The store's transactions, and what every consumer reads off it: the engine, the
    dialect's name, the clock that gives every timestamp and the redactor."""

    engine: sa.Engine
    dialect: str
    clock: Clock
    redactor: Redactor
    lease_time: LeaseTime

    def read(self) -> AbstractContextManager[sa.Connection]:
        """A connection for reads, in a transaction rolled back at the end."""
        ...

    def write(self, connection: sa.Connection | None = ...
              ) -> AbstractContextManager[sa.Connection]:
        """A write transaction, committed at the end (rolled back on an exception)."""
        ...

    def close(self) -> None:
        """Dispose of the engine's connections."""
        ...

    def data_version(self) -> DataVersion:
        """Whether anything was committed since a last look (SQLite files; elsewhere its
        token is None, and every look is made). Close it when done."""
        ...


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

    def stage_start(
        self,
        boundary: Boundary,
        job_id: str,
        owner: str,
        lease_until: datetime,
    ) -> StagedStart | None:
        """Encode the claim of a fresh run (epoch 0 -> 1) and ``boundary``, its first boundary,
        ahead of time (a staged burst: executor/staging.py)."""
        ...

    def claim_staged(
        self,
        conn: sa.Connection,
        staged: Sequence[StagedStart],
        owner: str,
        lease_until: datetime,
        *,
        now: datetime | None = ...,
    ) -> dict[str, int]:
        """Claim the runs of ``staged`` still QUEUED, fresh (epoch 0) and due, and write their
        first start as encoded ahead, in ``conn``'s transaction, at ``now`` (default: the
        store's clock); returns ``{run_id: first step run id}`` of the runs claimed (the ..."""
        ...

    def runs_version(self, conn: sa.Connection) -> int | None:
        """SQLite: the runs' version counter, read in ``conn``'s write transaction (see the
        module docstring: equal readings in two transactions mean that no run was queued,
        changed state, moved its due time or priority, or was deleted in between)."""
        ...


class RunBoundaries(Protocol):
    """A worker's step boundaries (a step's start and end, a run's end), written in batches
    by the group commit (:mod:`cadenza.store.boundaries`)."""

    def record_boundaries(
        self,
        boundaries: Sequence[Boundary],
        *,
        conn: sa.Connection | None = ...,
    ) -> list[BoundaryResult]:
        """Apply each boundary whose run is RUNNING at its ``epoch``; refuse the others."""
        ...


class RunCommands(Protocol):
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


class RunLeases(Transactions, Protocol):
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

    def has_running_runs(self) -> bool:
        """Whether any run is RUNNING: one indexed read, outside any transaction."""
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

    def held_by_run(self, run_id: str) -> list[tuple[str, str, str, str | None]]:
        """What ``run_id`` holds now (LEASED or RUNNING), by id: (resource_id, pool, kind,
        route_id) each."""
        ...

    def resource_keys(self) -> dict[str, tuple[str, str, str | None, str]]:
        """Every member: resource_id -> (pool, kind, route_id, state), without health."""
        ...

    def remove_resource(self, resource_id: str, *, conn: sa.Connection) -> bool:
        """Delete the member ``resource_id`` unless a run holds it (LEASED, RUNNING: it goes
        when released); True when deleted. The caller writes the event, in ``conn``'s
        transaction."""
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
        resources_only: bool = ...,
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

    def run_log(
        self,
        run_id: str,
        *,
        after: LogCursor | None = ...,
        limit: int | None = ...,
        min_level: Level | str | None = ...,
    ) -> list[RunLogEntry]:
        """A run's log lines and its audit events, merged by time."""
        ...

    def run_is_finished(self, run_id: str) -> bool:
        """Whether the run is in a terminal state."""
        ...


class RunFamilies(Protocol):
    """The runs a ``call_job`` step starts and their parents (:mod:`cadenza.store.children`)."""

    @property
    def children(self) -> ChildRuns:
        """The parent/child queries and writes."""
        ...


class Admission(Protocol):
    """What the dispatcher and a staged burst read to decide which queued run may start now
    (:mod:`cadenza.store.admission`)."""

    def admission_load(
        self,
        now: datetime,
        *,
        budget_jobs: Collection[str] | None = ...,
        conn: sa.Connection | None = ...,
        running: Mapping[str, int] | None = ...,
    ) -> Load:
        """RUNNING runs on every node (in total and per job) and recent starts per job."""
        ...

    def open_decision(
        self, conn: sa.Connection, now: datetime, limit: int
    ) -> tuple[list[Candidate], dict[str, int] | None]:
        """:meth:`lock_admission`, :meth:`queued_candidates` and (PostgreSQL) the RUNNING
        runs per job, in one round trip."""
        ...

    def lock_admission(self, conn: sa.Connection) -> None:
        """Take the admission lock for the rest of ``conn``'s transaction (from :meth:`write`)."""
        ...

    def has_queued_runs(self) -> bool:
        """Whether any run is QUEUED (one indexed read, no transaction): an idle node's
        poll."""
        ...

    def queue_watch(self, on_queued: Callable[[], None] | None = None,
                    on_change: Callable[[], None] | None = None) -> QueueWatch:
        """An idle node's poll, which skips the read while nothing was committed (SQLite)
        or signalled (PostgreSQL, which also calls ``on_queued()`` when a run is queued).
        On a SQLite file, ``on_change()`` is called by a poll that finds something was
        committed since the last poll."""
        ...

    def queued_candidates(
        self,
        now: datetime,
        limit: int = ...,
        *,
        conn: sa.Connection | None = ...,
    ) -> list[Candidate]:
        """QUEUED runs in admission order: priority DESC, scheduled time ASC, id ASC."""
        ...

    def set_wait_reasons(
        self,
        reasons: Mapping[str, str | None],
        *,
        actor: str = ...,
        conn: sa.Connection | None = ...,
    ) -> int:
        """Set ``wait_reason`` of QUEUED runs (``None`` clears it); one transaction."""
        ...

    def due_queued_ids(self, at: datetime, *, conn: sa.Connection | None = ...) -> set[str]:
        """The ids of the QUEUED runs that may start at ``at`` (``not_before`` passed or
        unset). Changes nothing."""
        ...

    def fresh_queued_runs(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs of ``run_ids`` that are QUEUED and were never claimed (epoch 0), in the
        order given. Changes nothing."""
        ...


class Schedules(Protocol):
    """The scheduler's cursors and fires (:mod:`cadenza.store.cursors`,
    :mod:`cadenza.store.fires`)."""

    def init_cursors(
        self,
        keys: Iterable[CursorKey],
        at: datetime,
        *,
        conn: sa.Connection | None = ...,
    ) -> int:
        """Create the cursors ``keys`` that do not exist yet, with ``last_fire = at``."""
        ...

    def get_cursors(
        self,
        keys: Iterable[CursorKey] | None = ...,
        *,
        conn: sa.Connection | None = ...,
    ) -> dict[CursorKey, datetime | None]:
        """The ``last_fire`` of each existing cursor among ``keys`` (all cursors when None)."""
        ...

    def lock_cursors(
        self,
        keys: Iterable[CursorKey],
        *,
        conn: sa.Connection,
    ) -> dict[CursorKey, datetime | None]:
        """Read the cursors ``keys`` inside the caller's write transaction, locking them."""
        ...

    def advance_cursors(
        self,
        targets: Mapping[CursorKey, datetime],
        *,
        create: bool = ...,
        conn: sa.Connection | None = ...,
    ) -> None:
        """Move each cursor of ``targets`` forward to its instant (never backwards)."""
        ...

    def create_fires(
        self,
        fires: Sequence[NewFire],
        *,
        actor: str = ...,
        conn: sa.Connection | None = ...,
    ) -> list[str | None]:
        """Record each fire not recorded yet as a new run; the others change nothing."""
        ...

    def fires_ahead(
        self,
        keys: Iterable[tuple[str, str]],
        after: datetime,
        *,
        conn: sa.Connection | None = ...,
    ) -> list[tuple[str, str, str, datetime]]:
        """Fires recorded ahead of their time and not due at ``after``: the QUEUED, never
        started runs of trigger ``scheduled`` of the schedules ``keys`` (job_id, schedule)
        with ``scheduled_for > after``, as (run_id, job_id, schedule, scheduled_for) in time ..."""
        ...

    def stale_fires_ahead(
        self,
        due_before: datetime,
        *,
        conn: sa.Connection | None = ...,
    ) -> list[tuple[str, str, str, datetime]]:
        """Fires recorded ahead of their time that never started although their time passed
        before ``due_before``: QUEUED, never claimed runs of trigger ``scheduled`` created
        before their ``scheduled_for``."""
        ...

    def count_active_runs(
        self,
        job_ids: Iterable[str],
        *,
        conn: sa.Connection | None = ...,
    ) -> dict[str, int]:
        """How many runs of each job are QUEUED or RUNNING (jobs with none are absent)."""
        ...


class Checkpoints(Protocol):
    """What a running step keeps across attempts and crashes: its state, its operation keys
    and its run's checkpoint (docs/exactly-once.md)."""

    def run_is_held(self, run_id: str, epoch: int) -> bool:
        """Whether ``run_id`` is still RUNNING at ``epoch`` (a read, no lock)."""
        ...

    def load_step_state(self, run_id: str, step: str) -> Any:
        """The state ``step`` of ``run_id`` saved last (decoded), or None (none saved, or saved
        by another step)."""
        ...

    def save_step_state(self, run_id: str, epoch: int, step: str, state_json: str) -> bool:
        """Upsert the step state of ``run_id`` (``state_json``: the JSON of the step's state,
        already checked by the caller) if the run is RUNNING at ``epoch``."""
        ...

    def find_operation_key(self, job_id: str, key: str) -> KeyRecord | None:
        """The record of ``key`` for ``job_id``, or None when the effect was not recorded."""
        ...

    def record_operation_key(
        self,
        job_id: str,
        key: str,
        result_json: str,
        run_id: str,
        epoch: int | None,
    ) -> KeyRecord | None:
        """Record ``key`` for ``job_id`` with its result (``result_json``), fenced on the run's
        ``epoch`` (None: unfenced, for a key whose effect already committed elsewhere, e.g.
        the mirror of ``ctx.once(..., connection=)``)."""
        ...

    def get_run_checkpoint(
        self,
        run_id: str,
        *,
        conn: sa.Connection | None = ...,
    ) -> CheckpointRecord | None:
        """The step-level checkpoint of ``run_id`` (written with its step boundaries)."""
        ...


class Accounts(Protocol):
    """Users, sessions, API tokens and failed logins (:mod:`cadenza.store.users`,
    :mod:`cadenza.store.sessions`)."""

    def add_user(
        self,
        username: str,
        password_hash: str,
        roles: Iterable[str],
        *,
        email: str | None = ...,
        display_name: str | None = ...,
        actor: str = ...,
        conn: sa.Connection | None = ...,
    ) -> None:
        """Create a user. A taken username raises :class:`StoreError` and changes nothing."""
        ...

    def get_user(self, username: str, *, conn: sa.Connection | None = ...) -> UserRecord | None:
        """The user ``username`` (with its password hash, hidden from ``repr``), or ``None``."""
        ...

    def update_user(
        self,
        username: str,
        *,
        password_hash: str | None = ...,
        roles: Iterable[str] | None = ...,
        email: str | None = ...,
        display_name: str | None = ...,
        disabled: bool | None = ...,
        language: str | None = ...,
        timezone: str | None = ...,
        actor: str = ...,
        conn: sa.Connection | None = ...,
    ) -> bool:
        """Change the given fields of a user (``None`` = unchanged; ``""`` clears a
        ``language`` or ``timezone``); ``False`` if no such user."""
        ...

    def list_users(self) -> list[UserRecord]:
        """Every user, by username."""
        ...

    def create_session(
        self,
        session_hash: str,
        username: str,
        csrf_token: str,
        expires_at: datetime,
        *,
        address: str,
        actor: str,
    ) -> None:
        """Record a session and a USER_LOGIN event (outcome "ok", the address)."""
        ...

    def list_sessions(self, username: str) -> list[SessionRecord]:
        """The live sessions of ``username``, newest first (ids are hashes)."""
        ...

    def session_credential(self, session_hash: str) -> Credential | None:
        """The live (not revoked, not expired) session with that id and its user, in one
        statement (every request with a session cookie)."""
        ...

    def revoke_session(self, session_hash: str, *, username: str | None = ...) -> bool:
        """Revoke one live session (of ``username`` when given); ``True`` if it was live."""
        ...

    def revoke_user_sessions(self, username: str, *, conn: sa.Connection | None = ...) -> int:
        """Revoke every live session of ``username`` (a password, role or disabled change); how
        many."""
        ...

    def add_token(
        self,
        name: str,
        token_hash: str,
        roles: list[str],
        *,
        username: str | None,
        actor: str,
    ) -> None:
        """Record a token; a taken name raises :class:`StoreError`. USER_CHANGED names the
        token and its roles, never the token."""
        ...

    def list_tokens(self, username: str | None = ..., *, every: bool = ...) -> list[TokenRecord]:
        """Tokens (revoked ones too) of ``username`` (``None``: tokens of no user), or all with
        ``every``; by name."""
        ...

    def token_credential(self, token_hash: str) -> Credential | None:
        """The live token with that hash and its user, in one statement (every request with a
        bearer token); its ``last_used_at`` set to now at most once a minute."""
        ...

    def revoke_token(
        self,
        name: str,
        *,
        username: str | None = ...,
        every: bool = ...,
        actor: str,
    ) -> bool:
        """Revoke the live token ``name`` (of ``username``, unless ``every``); ``True`` if it
        was live. USER_CHANGED names it."""
        ...

    def revoke_user_tokens(
        self,
        username: str,
        *,
        reason: str,
        actor: str,
        conn: sa.Connection | None = ...,
    ) -> list[str]:
        """Revoke every live token of ``username`` (a password reset, the user disabled): the
        names revoked, one USER_CHANGED ``token_revoked`` event each with ``reason``.
        Revoked for good: enabling the user again does not bring them back."""
        ...

    def record_login_failure(
        self,
        username: str,
        address: str,
        *,
        reason: str,
        counted: bool = ...,
    ) -> None:
        """Count a failed login (unless ``counted`` is false: an attempt refused by the
        throttle, which must not push its own delay further) and write USER_LOGIN (outcome
        "failed", never the password)."""
        ...

    def login_failures_of(self, username: str, address: str, since: datetime) -> LoginFailures:
        """Failed logins since ``since`` for this user name from this address, from this
        address, and for this user name: each a count and its latest time (three indexed
        reads)."""
        ...

    def forget_login_failures(self, before: datetime) -> int:
        """Delete the failures older than ``before`` (out of every throttling window)."""
        ...

    def unlock_user_logins(self, username: str, *, actor: str) -> int:
        """Forget every failed login of ``username`` (from any address), which ends its
        throttling; USER_CHANGED (action "unlocked", how many were forgotten)."""
        ...


class IdempotencyKeys(Protocol):
    """The API's idempotency keys (``Idempotency-Key`` of a POST)."""

    def reserve_idempotency_key(
        self,
        principal: str,
        key: str,
        job_id: str,
        body_hash: str,
    ) -> tuple[bool, IdempotentRun]:
        """Insert the key's row unless it exists: ``(True, row)`` for the first request,
        ``(False, existing row)`` for the others. The primary key decides, so this holds
        across threads, processes and nodes."""
        ...

    def get_idempotency_key(self, principal: str, key: str) -> IdempotentRun | None:
        """The key's row, or ``None``."""
        ...

    def complete_idempotency_key(self, principal: str, key: str, run_id: str) -> None:
        """Attach the created run to the key."""
        ...

    def release_idempotency_key(self, principal: str, key: str) -> None:
        """Forget a key whose run could not be created (the client may try again)."""
        ...


class Maintenance(Transactions, Protocol):
    """The store's health and upkeep: reachability, failing writes, clock skew, the SQLite
    write-ahead log, retention."""

    def ping(self) -> bool:
        """True when the database answers a trivial query (for ``/api/health``)."""
        ...

    @property
    def where(self) -> str:
        """The store's place for messages: the SQLite file, or the URL without password."""
        ...

    def failing_writes(self, window: float = ...) -> WriteFailure | None:
        """The last write failure while writes fail: no write succeeded since it, or it
        happened less than ``window`` seconds ago (a disk just full may still take a small
        write now and then). None when writes work."""
        ...

    def clock_skew(self, clock: Clock) -> timedelta:
        """How far ``clock`` (a node's) runs ahead of :meth:`_store_time` (negative: behind),
        read around one look at the store's time (half the look's duration is the error)."""
        ...

    def correct_clock(self, skew: timedelta | None) -> None:
        """While set, the runs the store records carry the store's time (the clock minus
        ``skew``); None: the clock's."""
        ...

    def check_wal(self, threshold: int) -> WalCheck | None:
        """SQLite file stores whose ``-wal`` file is larger than ``threshold`` bytes (one
        ``stat`` otherwise): a PASSIVE checkpoint (it waits for nobody and copies what it
        can), whose result says whether a reader keeps the log from being emptied, and who ..."""
        ...

    def report_wal(self, found: WalCheck, *, actor: str = ...) -> int:
        """The WAL_GROWING warning event of a stuck log (:meth:`check_wal`)."""
        ...

    def checkpoint_wal(self) -> None:
        """SQLite: copy the write-ahead log into the database now (PASSIVE: waits for nobody),
        so that the writes of a coming burst do not pay for it (a commit that finds the log
        past ``wal_autocheckpoint`` pages checkpoints it itself)."""
        ...

    def prune(
        self,
        *,
        days: int,
        keep_last: int,
        now: datetime | None = ...,
        dry_run: bool = ...,
        batch_size: int = ...,
        actor: str = ...,
    ) -> PruneReport:
        """Delete old finished runs (with their step runs, logs, checkpoints) and old events."""
        ...

    def backup_sqlite(self, target: Path, *, force: bool = ...) -> BackupReport:
        """Write a consistent, integrity-checked copy of the live SQLite store to
        ``target``."""
        ...


PROTOCOLS: tuple[type[Any], ...] = (
    Transactions, RunQueue, RunBoundaries, RunCommands, RunLeases, RunFamilies, Resources,
    EventQueries,
    AuditLog, HistoryQueries, Admission, Schedules, Checkpoints, Accounts, IdempotencyKeys,
    Maintenance,
)
"""Every consumer protocol (the conformance test walks them)."""


# --- what each consumer holds ---------------------------------------------------------------


class Hooked(Protocol):
    """A store given its hooks (:func:`cadenza.assembly.assemble`): the pools' leaser is read
    off its claim hook (:func:`cadenza.resources.pools.leaser_of`)."""

    hooks: StoreHooks


class SchedulerStore(Schedules, RunQueue, AuditLog, Transactions, Protocol):
    """The scheduler: cursors, fires and the runs they queue, and its leadership's events
    (:mod:`cadenza.scheduler`)."""


class DispatchStore(Admission, Maintenance, Transactions, Hooked, Protocol):
    """The dispatcher: which queued runs may start (:mod:`cadenza.node.dispatcher`)."""


class ReaperStore(RunLeases, Maintenance, AuditLog, Transactions, Protocol):
    """The reaper and the lease keeper: run leases, the clock check, the WAL
    (:mod:`cadenza.node.reaper`, :mod:`cadenza.executor.lease_keeper`)."""


class WorkerStore(RunQueue, RunBoundaries, RunLeases, Admission, Checkpoints, HistoryQueries,
                  RunFamilies, Resources, AuditLog, Transactions, Hooked, Protocol):
    """A worker: claims, boundaries, checkpoints and what a step reads of its run
    (:mod:`cadenza.executor`)."""


class PoolStore(Resources, AuditLog, Transactions, Hooked, Protocol):
    """The pools: members, their health and cooldowns (:mod:`cadenza.resources`)."""


class NotifyStore(HistoryQueries, AuditLog, Transactions, Protocol):
    """The notifications: the rules, the sender, the child runs' calls
    (:mod:`cadenza.notify`)."""


class AccountStore(Accounts, IdempotencyKeys, Transactions, Protocol):
    """Users, sessions, tokens and idempotency keys: the web's and the account services'."""


class HistoryStore(HistoryQueries, RunFamilies, Protocol):
    """What the history pages and commands read: runs, logs, events and run families
    (:mod:`cadenza.services.history`)."""
