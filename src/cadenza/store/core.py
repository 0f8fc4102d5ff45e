"""The store's shared machinery: transactions, the clock, redaction and the event writer.

The repositories (:mod:`~cadenza.store.runs`, :mod:`~cadenza.store.steps`,
:mod:`~cadenza.store.resources`, :mod:`~cadenza.store.events`, :mod:`~cadenza.store.users`)
are mixins over :class:`StoreCore`; :class:`cadenza.store.Store` combines them.

Transactions. :meth:`StoreCore.write` is one write transaction (``BEGIN IMMEDIATE`` on SQLite)
that commits once when the block ends; :meth:`StoreCore.read` is a read-only snapshot. Every
store method that writes takes ``conn=None``: given a connection from :meth:`write`, it joins
that transaction instead of committing its own, so a caller can make a state change, its
checkpoint and its log line one commit.

Redaction happens here, once, before anything is written (SPEC §10): event messages and log
lines through ``redact_text``, payloads and step outputs through ``redact_value``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from cadenza.clock import Clock
from cadenza.domain.errors import StoreError
from cadenza.domain.events import EventType, Level
from cadenza.store.codec import dumps, require_aware
from cadenza.store.engine import READ_ONLY
from cadenza.store.tables import event_log

_INSERT_EVENT = event_log.insert()


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
        # With that lock, one connection does all of this process's SQLite writes: checking
        # a connection out of the pool and back for every transaction costs more than a
        # small transaction itself. Used only under the lock, by one thread at a time.
        self._writer: sa.Connection | None = None
        self._writer_busy = False

    def close(self) -> None:
        """Close every pooled connection (on SQLite the last close checkpoints the WAL)."""
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
        is locked". Database errors that mean "unavailable" become :class:`StoreError`.
        Threads of one process take turns on an in-process lock first (SQLite only), so they
        queue without polling; other processes still wait under ``busy_timeout``.

        ``connection`` (from ``engine.connect()``, kept by the caller) is used instead of one
        from the pool: a caller that writes often (the executor's group commit) saves the
        pool checkout and, on PostgreSQL, its liveness ping. On SQLite it is ignored: all
        writes already share one connection.
        """
        lock = self._write_lock
        if lock is None:
            try:
                if connection is not None:
                    with connection.begin():
                        yield connection
                else:
                    with self.engine.connect() as conn, conn.begin():
                        yield conn
            except sa.exc.OperationalError as exc:
                raise StoreError(f"store write failed: {exc.orig}") from exc
            return
        with lock:
            if self._writer_busy:  # nested in this thread: a connection of its own, as before
                try:
                    with self.engine.connect() as conn, conn.begin():
                        yield conn
                except sa.exc.OperationalError as exc:
                    raise StoreError(f"store write failed: {exc.orig}") from exc
                return
            self._writer_busy = True
            try:
                if self._writer is None or self._writer.closed:
                    self._writer = self.engine.connect()
                with self._writer.begin():
                    yield self._writer
            except sa.exc.OperationalError as exc:
                raise StoreError(f"store write failed: {exc.orig}") from exc
            finally:
                self._writer_busy = False

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

    def _redact_text(self, text: str | None) -> str | None:
        return None if text is None else self.redactor.redact_text(text)

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
