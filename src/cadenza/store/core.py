"""The store's shared machinery: transactions, the clock, redaction and the event writer.

The repositories (:mod:`~cadenza.store.runs`, :mod:`~cadenza.store.steps`,
:mod:`~cadenza.store.resources`, :mod:`~cadenza.store.events`, :mod:`~cadenza.store.users`)
are mixins over :class:`StoreCore`; :class:`cadenza.store.Store` combines them.

Transactions. :meth:`StoreCore.write` is one write transaction (``BEGIN IMMEDIATE`` on SQLite)
that commits once when the block ends; :meth:`StoreCore.read` is a read-only snapshot. Every
store method that writes takes ``conn=None``: given a connection from :meth:`write`, it joins
that transaction instead of committing its own, so a caller can make a state change, its
checkpoint and its log line one commit.

Redaction happens here, once, before anything is written (docs/security.md): event messages and log
lines through ``redact_text``, payloads and step outputs through ``redact_value``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from cadenza.clock import Clock
from cadenza.domain.errors import (
    DISK_FULL,
    IO_ERROR,
    NO_PERMISSION,
    StoreConflict,
    StoreError,
    StoreOutcomeUnknown,
    StoreWriteFailed,
    store_write_failed,
    write_failure_kind,
)
from cadenza.domain.errors import READ_ONLY as READ_ONLY_STORAGE
from cadenza.domain.events import EventType, Level
from cadenza.domain.texts import cut_redacted
from cadenza.store import later
from cadenza.store.codec import dumps, require_aware
from cadenza.store.data_version import DataVersion
from cadenza.store.engine import READ_ONLY, sqlite_path
from cadenza.store.hooks import StoreHooks
from cadenza.store.tables import event_log
from cadenza.store.wal import WalCheckpointer

if TYPE_CHECKING:
    from cadenza.store.boundary import EndedRun

_INSERT_EVENT = event_log.insert()

SQLITE_CANTOPEN = 14
CONFLICT_STATES = {"40001": "a serialization failure", "40P01": "a deadlock",
                   "55P03": "a lock wait past lock_timeout"}
"""PostgreSQL's SQLSTATEs of a transaction rolled back for a conflict (safe to write again)."""
_UNDO = "cadenza_if_not_committed"
WRITE_FAILURE_WINDOW = 60.0
"""Seconds a write failure counts as current after a later write succeeded."""


@dataclass(frozen=True)
class WriteFailure:
    """The store's last failed write: the error, when (None: the clock failed too), and
    how many writes had succeeded before it (a later success moves the count on)."""

    error: StoreWriteFailed
    at: datetime | None
    writes_before: int


def _cannot_open_kind(driver: BaseException, where: str) -> str | None:
    """Why SQLite could not open its database for writing (``SQLITE_CANTOPEN``: a WAL
    database needs to create its ``-wal`` and ``-shm`` files): read-only when the
    directory is on a read-only file system, permission denied when this user may not
    write there; None for any other error."""
    code = getattr(driver, "sqlite_errorcode", None)
    if not isinstance(code, int) or code & 0xFF != SQLITE_CANTOPEN:
        return None
    directory = str(PurePath(where).parent)
    statvfs = getattr(os, "statvfs", None)  # not on Windows
    try:
        if statvfs is not None and statvfs(directory).f_flag & os.ST_RDONLY:
            return READ_ONLY_STORAGE
        return None if os.access(directory, os.W_OK) else NO_PERMISSION
    except OSError:
        return None


def _advice(kind: str, dialect: str, where: str) -> str:
    """What a person can do about a write failure of ``kind``."""
    if dialect != "sqlite":
        return {DISK_FULL: "free space on the database server",
                READ_ONLY_STORAGE: "point [store].url at the primary, not a read-only replica",
                NO_PERMISSION: "grant the store's user write access to Cadenza's tables",
                }.get(kind, "check the database server's log")
    place = str(PurePath(where).parent)
    return {DISK_FULL: f"free space on the disk of {place}",
            READ_ONLY_STORAGE: f"make {place} writable again (remount its file system read-write)",
            NO_PERMISSION: f"give this user write access to {place} and its files",
            IO_ERROR: f"check the disk of {place}",
            }.get(kind, "check the store")


def if_not_committed(conn: sa.Connection, undo: Callable[[], None]) -> None:
    """Call ``undo`` if the write transaction of ``conn`` (from :meth:`StoreCore.write`)
    does not commit, or cannot tell that it did: it rolled back, or its COMMIT failed
    (:class:`~cadenza.domain.errors.StoreOutcomeUnknown`). What this process did for a
    change it believed made (a run held, a lease renewed) is undone there, while the
    database keeps whatever it applied."""
    undo_list = conn.info.get(_UNDO)
    if undo_list is None:
        raise RuntimeError("if_not_committed needs a connection of StoreCore.write")
    undo_list.append(undo)


def _undo(undo: list[Callable[[], None]]) -> None:
    for fn in undo:
        try:
            fn()
        except Exception:  # one undo must not stop the others or hide the write's error
            logging.getLogger("cadenza.store").exception("undoing after a failed write")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _connection_lost(exc: BaseException, driver: BaseException) -> bool:
    """Whether ``exc`` says the connection itself failed (not the statement)."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    state = getattr(driver, "sqlstate", None)
    return state is None or str(state).startswith("08")


@runtime_checkable
class Redactor(Protocol):
    """Removes secrets before anything is stored (implemented in ``cadenza.audit``)."""

    def redact_text(self, text: str) -> str:
        """``text`` with every known secret (in any encoding) and URL user-info replaced."""
        ...

    def redact_value(self, value: Any) -> Any:
        """``value`` redacted recursively over dicts and lists; keys like password are masked."""
        ...


class NoRedaction:
    """The identity redactor, for stores that are given no :class:`Redactor`."""

    def redact_text(self, text: str) -> str:
        return text

    def redact_value(self, value: Any) -> Any:
        return value


class StoreCore:
    """Engine, clock, redactor and transaction helpers shared by every repository."""

    engine: sa.Engine
    dialect: str
    clock: Clock
    redactor: Redactor

    def __init__(self, engine: sa.Engine, clock: Clock, redactor: Redactor) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.clock = clock
        self.redactor = redactor
        # SQLite has one writer at a time. Threads of this process queue on a lock instead
        # of on SQLite's busy handler, which polls with sleeps of up to 100 ms and would let
        # a few busy threads cut the write rate by orders of magnitude. Re-entrant, so that a
        # nested write() in one thread behaves as before (it waits on SQLite's own lock).
        self._write_lock: threading.RLock | None = (
            threading.RLock() if self.dialect == "sqlite" else None
        )
        if self.dialect == "postgresql":
            later.follow(engine)
        # With that lock, one connection does all of this process's SQLite writes: checking
        # a connection out of the pool and back for every transaction costs more than a
        # small transaction itself. Used only under the lock, by one thread at a time.
        self._writer: sa.Connection | None = None
        self._writer_busy = False
        self.writes_ok = 0
        """Write transactions committed (counted to tell when writes work again)."""
        self.wal: WalCheckpointer | None = (
            WalCheckpointer(engine)
            if self.dialect == "sqlite" and sqlite_path(engine.url) is not None else None)
        """A SQLite file store's background checkpoints (:mod:`cadenza.store.wal`)."""
        self.write_failure: WriteFailure | None = None
        """The last write that failed for lack of space, permission or a working disk."""
        self.hooks = StoreHooks()
        """What the store calls inside its transactions (:meth:`use_hooks`)."""

    def use_hooks(self, hooks: StoreHooks) -> None:
        """Call ``hooks`` from now on, in the transactions they belong to. Given once per
        store by :func:`cadenza.assembly.assemble` (which builds the one table of hooks for
        every kind of process); a reload changes what the hooks do, not which hooks."""
        self.hooks = hooks

    def _run_ended(self, conn: sa.Connection, ended: Sequence[EndedRun],
                   now: datetime) -> None:
        """Call every run end hook with ``ended`` in ``conn``'s transaction (nothing when
        empty): every writer of a run's end calls this (:mod:`cadenza.store.run_states`)."""
        if ended:
            for hook in self.hooks.run_end:
                hook(conn, ended, now)

    def close(self) -> None:
        """Close every pooled connection (on SQLite the last close checkpoints the WAL)."""
        if self.wal is not None:
            self.wal.close()
        lock = self._write_lock
        if lock is not None:
            with lock:
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
        self.engine.dispose()

    @contextmanager
    def write(self, connection: sa.Connection | None = None) -> Iterator[sa.Connection]:
        """One write transaction: commits when the block ends, rolls back on an exception.

        On SQLite it starts with ``BEGIN IMMEDIATE``: the write lock is taken first (waiting up
        to ``busy_timeout``), so a read-then-write inside the block never fails with "database
        is locked". Database errors that mean "unavailable" become :class:`StoreError`; a
        full disk, a read-only store, a refused permission or an I/O error become
        :class:`~cadenza.domain.errors.StoreWriteFailed` (:class:`StoreFull`,
        :class:`StoreReadOnly`), remembered for :meth:`failing_writes`.
        Threads of one process take turns on an in-process lock first (SQLite only), so they
        queue without polling; other processes still wait under ``busy_timeout``.

        ``connection`` (from ``engine.connect()``, kept by the caller) is used instead of one
        from the pool: a caller that writes often (the executor's group commit) saves the
        pool checkout and, on PostgreSQL, its liveness ping. On SQLite it is ignored: all
        writes already share one connection.
        """
        lock = self._write_lock
        undo: list[Callable[[], None]] = []
        body_done = False

        entered: list[sa.Connection] = []

        def enter(conn: sa.Connection) -> sa.Connection:
            conn.info[_UNDO] = undo
            entered.append(conn)
            return conn

        try:
            try:
                if lock is None:  # PostgreSQL: the audit and log rows go with the COMMIT
                    if connection is not None:
                        with self._kept(connection):
                            yield enter(connection)
                            body_done = True
                    else:
                        with self.engine.connect() as conn, self._kept(conn):
                            yield enter(conn)
                            body_done = True
                else:
                    with lock:
                        if self._writer_busy:  # nested in this thread: its own connection
                            with self.engine.connect() as conn, conn.begin():
                                yield enter(conn)
                                body_done = True
                        else:
                            self._writer_busy = True
                            try:
                                if self._writer is None or self._writer.closed:
                                    self._writer = self.engine.connect()
                                with self._writer.begin():
                                    yield enter(self._writer)
                                    body_done = True
                            finally:
                                self._writer_busy = False
            except BaseException:
                _undo(undo)
                raise
            finally:
                for conn in entered:
                    if not conn.invalidated and not conn.closed:
                        conn.info.pop(_UNDO, None)
        except Exception as exc:  # a driver's error: see _write_error
            failed = self._write_error(exc, at_commit=body_done)
            if failed is None:
                raise
            raise failed from exc
        self.writes_ok += 1
        if self.wal is not None:
            self.wal.committed()

    @contextmanager
    def _kept(self, conn: sa.Connection) -> Iterator[None]:
        """A transaction on ``conn`` whose ``event_log`` and ``run_logs`` INSERTs are sent
        with its COMMIT, in one round trip (:mod:`cadenza.store.later`)."""
        raw = conn.connection.driver_connection
        with conn.begin() as transaction, later.keeping(raw):
            yield
            if transaction.is_active:  # (a block that ended it itself: later.follow)
                later.commit(raw, transaction.commit)

    def _write_error(self, exc: Exception, *, at_commit: bool = False) -> StoreError | None:
        """The store's error for a failed write transaction: a driver's error, wrapped by
        SQLAlchemy or raw (the hot paths write through the DBAPI cursor). None when it is
        another error, or neither unavailability nor a write failure (a constraint, a
        bug): it is raised as is."""
        driver: BaseException
        if isinstance(exc, sa.exc.DBAPIError):
            driver = exc.orig if exc.orig is not None else exc
        elif isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith("psycopg"):
            driver = exc
        else:
            return None
        state = getattr(driver, "sqlstate", None)
        if state in CONFLICT_STATES:
            return StoreConflict(f"store write rolled back by the database for "
                                 f"{CONFLICT_STATES[state]} ({_first_line(driver)}); nothing "
                                 "of it was applied, and it may be written again")
        kind = write_failure_kind(driver)
        detail = str(driver)
        if kind is None and self.dialect == "sqlite":
            kind = _cannot_open_kind(driver, self.where)
            if kind is not None:
                detail = f"{driver}: its directory is {kind}"
        if kind is None:
            if at_commit and self.dialect != "sqlite" and _connection_lost(exc, driver):
                return StoreOutcomeUnknown(
                    f"the connection to the store was lost during a COMMIT ({driver}): the "
                    "change may or may not have been applied")
            if isinstance(exc, sa.exc.OperationalError):
                return StoreError(f"store write failed: {exc.orig}")
            return None
        failed = store_write_failed(
            kind, f"the store could not record a change: {kind} ({detail}; {self.where}); "
                  f"{_advice(kind, self.dialect, self.where)}", detail)
        try:
            at = self._now()
        except Exception:  # a broken clock must not hide the write failure
            at = None
        self.write_failure = WriteFailure(failed, at, self.writes_ok)
        return failed

    def failing_writes(self, window: float = WRITE_FAILURE_WINDOW) -> WriteFailure | None:
        """The last write failure while writes fail: no write succeeded since it, or it
        happened less than ``window`` seconds ago (a disk just full may still take a
        small write now and then). None when writes work."""
        failure = self.write_failure
        if failure is None:
            return None
        if self.writes_ok == failure.writes_before:
            return failure
        if failure.at is not None and \
                (self.clock.now() - failure.at).total_seconds() < window:
            return failure
        return None

    @property
    def where(self) -> str:
        """The store's place for messages: the SQLite file, or the URL without password."""
        url = self.engine.url
        if self.dialect == "sqlite" and url.database:
            return str(url.database)
        return url.render_as_string(hide_password=True)

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A read-only transaction (a deferred ``BEGIN`` on SQLite: a WAL snapshot, no lock)."""
        try:
            with self.engine.connect() as conn:
                conn.execution_options(**{READ_ONLY: True})
                with conn.begin():
                    yield conn
        except sa.exc.OperationalError as exc:
            raise StoreError(f"store read failed: {exc.orig}") from exc

    def data_version(self) -> DataVersion:
        """A :class:`~cadenza.store.data_version.DataVersion` of this store: whether anything
        was committed since a last look (SQLite files; on other stores its token is None, and
        every look is made). Close it when done."""
        return DataVersion(sqlite_path(self.engine.url) if self.dialect == "sqlite" else None)

    def _quick_rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of one SELECT (``?`` placeholders): :meth:`_quick_read` for one
        statement."""
        with self._quick_read() as query:
            return query(sql, params)

    @contextmanager
    def _quick_read(self, *, snapshot: bool = False
                   ) -> Iterator[Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]]:
        """A function running SELECTs (``?`` placeholders) through one pooled DBAPI
        connection, without SQLAlchemy's connection, transaction and result layers: for the
        reads of every request (credentials, a page of the history, a run's events), where
        those layers cost several times the statements. Each statement is a snapshot of its
        own (SQLite: the driver's autocommit; PostgreSQL: autocommit, so that returning the
        connection to the pool costs no ROLLBACK round trip); with ``snapshot`` they share
        one read transaction. Values come raw: SQLite timestamps as text
        (:func:`cadenza.store.codec.utc_from_raw`); compare with :meth:`_raw_time`."""
        postgres = self.dialect != "sqlite"

        def query(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            cursor = raw.cursor()
            try:
                cursor.execute(sql.replace("?", "%s") if postgres else sql, params)
                return list(cursor.fetchall())
            finally:
                cursor.close()

        try:
            raw = self.engine.raw_connection()
            try:
                if postgres and not snapshot:
                    driver: Any = raw.driver_connection
                    driver.autocommit = True
                    try:
                        yield query
                    finally:
                        driver.autocommit = False
                elif snapshot and not postgres:
                    query("BEGIN", ())  # deferred: a read transaction
                    try:
                        yield query
                    finally:
                        query("COMMIT", ())
                else:
                    yield query  # PostgreSQL's transaction: rolled back by the pool
            finally:
                raw.close()  # back to the pool
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store read failed: {exc.orig}") from exc
        except Exception as exc:
            if isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith("psycopg"):
                raise StoreError(f"store read failed: {exc}") from exc
            raise

    def _raw_time(self, value: datetime) -> Any:
        """``value`` as :meth:`_quick_rows` compares it with a timestamp column: SQLite's
        naive UTC text of fixed width, PostgreSQL's aware datetime."""
        utc = require_aware(value)
        if self.dialect == "sqlite":
            return f"{utc.replace(tzinfo=None):%Y-%m-%d %H:%M:%S.%f}"
        return utc

    @contextmanager
    def _joined(self, conn: sa.Connection | None) -> Iterator[sa.Connection]:
        """The caller's transaction when given, else a new write transaction."""
        if conn is not None:
            yield conn
        else:
            with self.write() as own:
                yield own

    @contextmanager
    def _reading(self, conn: sa.Connection | None) -> Iterator[sa.Connection]:
        if conn is not None:
            yield conn
        else:
            with self.read() as own:
                yield own

    def _now(self) -> datetime:
        return require_aware(self.clock.now(), "clock.now()")

    _time_offset: timedelta | None = None
    """Set while the node's clock is off (:meth:`LeaseClock.correct_clock`)."""

    def _creation_now(self) -> datetime:
        """The time a new run is recorded at (its id, created_at, its first event): the
        clock's, or, while the node's clock is off, the store's time (the clock minus its
        measured skew)."""
        now = self._now()
        return now if self._time_offset is None else now - self._time_offset

    def _redact_text(self, text: str | None) -> str | None:
        """``text`` redacted whole, then cut to 64 KiB (a cut before redaction could
        leave the first characters of a secret, which the redactor no longer knows)."""
        return None if text is None else cut_redacted(self.redactor.redact_text(text))

    def _insert_ignore(self, table: sa.Table, conflict: list[str]) -> Any:
        """``INSERT ... ON CONFLICT (conflict) DO NOTHING`` for this dialect.

        The result's ``rowcount`` says whether the row went in (1) or already existed (0):
        SQLAlchemy only keeps an INSERT's row count when asked (``preserve_rowcount``).
        """
        insert = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
        return (
            insert(table)
            .on_conflict_do_nothing(index_elements=conflict)
            .execution_options(preserve_rowcount=True)
        )

    def _insert_event(
        self,
        conn: sa.Connection,
        event_type: EventType | str,
        message: str,
        *,
        run_id: str | None = None,
        resource_id: str | None = None,
        level: Level | str = Level.INFO,
        payload: Mapping[str, Any] | Any = None,
        actor: str = "system",
        now: datetime | None = None,
    ) -> int:
        """Insert one redacted event into ``event_log`` on ``conn``; returns its ``event_id``."""
        payload_json = None
        if payload is not None:
            payload_json = dumps(self.redactor.redact_value(payload))
        if self.dialect == "postgresql":  # after the rows kept for the commit, in order
            later.send(conn.connection.driver_connection)
        result = conn.execute(
            _INSERT_EVENT,
            {
                "run_id": run_id,
                "resource_id": resource_id,
                "event_type": str(event_type),
                "level": str(level),
                "message": self.redactor.redact_text(message),
                "payload_json": payload_json,
                "created_at": now or self._now(),
                "actor": actor,
            },
        )
        key = result.inserted_primary_key
        if key is None:
            raise StoreError("the database returned no event_id for an appended event")
        return int(key[0])
