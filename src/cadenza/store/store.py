"""The durable store: one object over SQLite or PostgreSQL (docs/store.md).

::

    store = Store.open("sqlite:///data/cadenza.db", clock=SystemClock(), redactor=redactor)
    run_id = store.create_run("sales-load", "manual")
    (run,) = store.claim_runs("node-1", lease_until, run_ids=[run_id])
    store.record_boundaries([Boundary(run_id, run.lease_epoch,
                                      run_end=RunEnd(RunState.SUCCEEDED))])
    store.close()

Every method's docstring says which columns it changes and which events it writes; every
state change and its events commit in one transaction (one commit per call, or none of its
own when given ``conn=`` from :meth:`Store.write`).
"""

from __future__ import annotations

import functools
from types import TracebackType
from typing import TYPE_CHECKING

import sqlalchemy as sa

from cadenza.clock import Clock, SystemClock
from cadenza.domain.errors import StoreError, StoreWriteFailed
from cadenza.store import migrate as migrations
from cadenza.store import protocols
from cadenza.store.admission import AdmissionRepository
from cadenza.store.boundaries import BoundaryWriter
from cadenza.store.checkpoints import CheckpointsRepository
from cadenza.store.children import ChildRuns
from cadenza.store.claims import RunClaims
from cadenza.store.core import NoRedaction, Redactor
from cadenza.store.cursors import CursorsRepository
from cadenza.store.engine import create_engine, describe_url
from cadenza.store.events import EventsRepository
from cadenza.store.fires import FiresRepository
from cadenza.store.lease_clock import LEASE_TIMES, LeaseTime
from cadenza.store.maintenance import MaintenanceRepository
from cadenza.store.resources import ResourcesRepository
from cadenza.store.run_leases import RunLeasesRepository
from cadenza.store.runs import RunsRepository
from cadenza.store.sessions import SessionsRepository
from cadenza.store.steps import StepRunsRepository
from cadenza.store.users import UsersRepository


class Store(
    RunsRepository,
    FiresRepository,
    StepRunsRepository,
    ResourcesRepository,
    EventsRepository,
    UsersRepository,
    CursorsRepository,
    RunClaims,
    BoundaryWriter,
    AdmissionRepository,
    RunLeasesRepository,
    CheckpointsRepository,
    MaintenanceRepository,
    SessionsRepository,
):
    """Runs, step runs, resources, logs, events and users in one database."""

    @classmethod
    def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        redactor: Redactor | None = None,
        sqlite_synchronous: str = "NORMAL",
        migrate: bool = True,
        lease_time: LeaseTime = "clock",
    ) -> Store:
        """Connect to ``url`` and check (or, with ``migrate``, upgrade) the schema.

        ``url``: ``sqlite:///path/to/cadenza.db`` or ``postgresql+psycopg://user@host/db``.
        ``clock`` gives every timestamp (default: the system clock); ``redactor`` cleans
        everything before it is written (default: none). ``sqlite_synchronous`` is NORMAL or
        FULL. ``lease_time`` says whose time decides a lease: ``"database"`` (what
        ``cadenza`` commands and servers open) or ``"clock"``, the store's clock (see
        :mod:`cadenza.store.lease_clock`). Raises :class:`StoreError` when the database
        cannot be reached, its schema is newer than this code (or, without ``migrate``, not
        current), and
        :class:`~cadenza.domain.errors.UnsafeStoreLocation` for SQLite on a network share.
        """
        if lease_time not in LEASE_TIMES:
            raise ValueError(f"lease_time must be one of {LEASE_TIMES}, got {lease_time!r}")
        engine = create_engine(url, sqlite_synchronous=sqlite_synchronous)
        # "is not None": an empty Redactor is falsy (len 0) yet learns secrets later.
        store = cls(engine, clock or SystemClock(),
                    redactor if redactor is not None else NoRedaction())
        store.lease_time = lease_time
        try:
            if migrate:
                with store.write() as conn:
                    migrations.upgrade(conn)
            else:
                with store.read() as conn:
                    migrations.require_head(conn)
        except StoreError as exc:
            engine.dispose()
            if isinstance(exc.__cause__, sa.exc.OperationalError) \
                    and not isinstance(exc, StoreWriteFailed):  # keep "disk full" a StoreFull
                raise StoreError(
                    f"cannot open the store at {describe_url(engine.url)}: {exc.__cause__.orig}"
                ) from exc.__cause__
            raise
        except BaseException:
            engine.dispose()
            raise
        return store

    @functools.cached_property
    def children(self) -> ChildRuns:
        """The parent/child queries and writes of ``call_job`` runs."""
        return ChildRuns(self)

    def ping(self) -> bool:
        """True when the database answers a trivial query (for ``/api/health``)."""
        try:
            with self.read() as conn:
                conn.execute(sa.text("SELECT 1"))
        except (StoreError, sa.exc.SQLAlchemyError):
            return False
        return True

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({describe_url(self.engine.url)!r})"


if TYPE_CHECKING:

    def _implements_every_protocol(store: Store) -> list[object]:
        """mypy checks here that :class:`Store` implements each protocol of its consumers."""
        _transactions: protocols.Transactions = store
        _run_queue: protocols.RunQueue = store
        _run_boundaries: protocols.RunBoundaries = store
        _run_commands: protocols.RunCommands = store
        _run_leases: protocols.RunLeases = store
        _run_families: protocols.RunFamilies = store
        _resources: protocols.Resources = store
        _event_queries: protocols.EventQueries = store
        _audit_log: protocols.AuditLog = store
        _history_queries: protocols.HistoryQueries = store
        _admission: protocols.Admission = store
        _schedules: protocols.Schedules = store
        _checkpoints: protocols.Checkpoints = store
        _accounts: protocols.Accounts = store
        _idempotency_keys: protocols.IdempotencyKeys = store
        _maintenance: protocols.Maintenance = store
        _hooked: protocols.Hooked = store
        _scheduler_store: protocols.SchedulerStore = store
        _dispatch_store: protocols.DispatchStore = store
        _reaper_store: protocols.ReaperStore = store
        _worker_store: protocols.WorkerStore = store
        _pool_store: protocols.PoolStore = store
        _notify_store: protocols.NotifyStore = store
        _account_store: protocols.AccountStore = store
        _history_store: protocols.HistoryStore = store
        return [_transactions, _run_queue, _run_boundaries, _run_commands, _run_leases,
                _run_families, _resources, _event_queries, _audit_log, _history_queries,
                _admission, _schedules, _checkpoints, _accounts, _idempotency_keys,
                _maintenance, _hooked, _scheduler_store, _dispatch_store, _reaper_store,
                _worker_store, _pool_store, _notify_store, _account_store,
                _history_store]
