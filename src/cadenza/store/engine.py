"""Engines for the two supported databases (docs/store.md "SQLite", "PostgreSQL").

SQLite
    WAL, ``busy_timeout`` 10 s, foreign keys on, ``synchronous`` NORMAL or FULL from the
    caller. The driver's own transaction handling is switched off (``isolation_level = None``)
    and SQLAlchemy's ``begin`` event emits the BEGIN itself: ``BEGIN IMMEDIATE`` for every
    transaction that is not explicitly read-only, so a writer takes the write lock *before* it
    reads and waits for it under ``busy_timeout`` (a deferred transaction that reads and then
    writes would get ``SQLITE_BUSY`` at once, ignoring the timeout). Read-only work opts into a
    plain deferred ``BEGIN`` through :data:`READ_ONLY` (``Store.read()`` does). A data
    directory on a network file system is refused (:mod:`cadenza.store.location`).

PostgreSQL
    psycopg 3 (``postgresql+psycopg://``; a bare ``postgresql://`` URL is taken to mean it),
    A connection taken from the pool is checked without a round trip
    (:func:`_postgresql_on_checkout`): a server that restarted or ended the session has sent
    its goodbye and closed the socket, which a zero-timeout ``select`` sees; such a connection
    is replaced before use, so a restarted server costs no failed write. (SQLAlchemy's
    ``pool_pre_ping`` did the same with a ``SELECT 1`` per checkout: two round trips per
    lease in W4, docs/benchmarks.md.) A peer that vanished without closing (a cut cable) is
    found by the first statement's error, as with a ping, which would wait the same.
"""

from __future__ import annotations

import select
import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import StaticPool

from cadenza.domain.errors import StoreError
from cadenza.store.location import ensure_local_directory

SQLITE_BUSY_TIMEOUT_MS = 10_000
SQLITE_SYNCHRONOUS = ("NORMAL", "FULL")
SQLITE_MINIMUM = (3, 35)
"""RETURNING (3.35) and UPDATE ... FROM (3.33) are used by the executor's write path."""
READ_ONLY = "cadenza_read_only"
"""Execution option: this connection's transactions only read (SQLite: deferred BEGIN)."""
SQLITE_POOL = (20, 20)
"""(connections kept open, more opened under load and closed after use) for a SQLite file.
A served node uses a connection per API request in progress (10 clients: 10) beside its
dispatcher, group commit and workers: with SQLAlchemy's default of 5 kept, every other
request opened a connection (PRAGMAs, WAL check) and read its pages into an empty cache
(W6, docs/benchmarks.md). A SQLite connection costs a few file handles and its page cache."""
POSTGRESQL_POOL = (10, 10)
"""The same for PostgreSQL (default 5 + 10): a new connection is a server process, so
keep as many as a node uses at once, with at most 20 per process (mind max_connections
when many nodes share a server)."""


def describe_url(url: sa.URL) -> str:
    """The URL without its password, for messages."""
    return url.render_as_string(hide_password=True)


def sqlite_path(url: sa.URL) -> Path | None:
    """The database file of a SQLite URL, or ``None`` for an in-memory database."""
    database = url.database
    if not database or database == ":memory:" or url.query.get("mode") == "memory":
        return None
    if database.startswith("file:"):
        database = database.removeprefix("file:").split("?", 1)[0]
    return Path(database)


def create_engine(url: str | sa.URL, *, sqlite_synchronous: str = "NORMAL") -> sa.Engine:
    """An engine for ``url`` set up as the module docstring says.

    Raises :class:`StoreError` for an unsupported URL or setting, and
    :class:`~cadenza.domain.errors.UnsafeStoreLocation` for a SQLite file on a network share.
    """
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"invalid store URL: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, sqlite_synchronous)
    if backend == "postgresql":
        return _postgresql_engine(parsed)
    raise StoreError(
        f"unsupported store URL {describe_url(parsed)}: "
        "use sqlite:///path/to/cadenza.db or postgresql+psycopg://user@host/db"
    )


def _sqlite_engine(url: sa.URL, synchronous: str) -> sa.Engine:
    level = synchronous.upper()
    if level not in SQLITE_SYNCHRONOUS:
        raise StoreError(
            f"sqlite_synchronous must be one of {', '.join(SQLITE_SYNCHRONOUS)}, "
            f"got {synchronous!r}"
        )
    if url.get_driver_name() not in ("pysqlite", ""):
        raise StoreError(f"unsupported SQLite driver in {describe_url(url)}: use sqlite:///")
    if sqlite3.sqlite_version_info < SQLITE_MINIMUM:
        raise StoreError(
            f"this Python's SQLite is {sqlite3.sqlite_version}; the store needs "
            f"{'.'.join(map(str, SQLITE_MINIMUM))} or newer (RETURNING, UPDATE ... FROM): "
            "use a newer Python build or PostgreSQL"
        )
    path = sqlite_path(url)
    kwargs: dict[str, Any] = {}
    if path is None:
        # One shared connection, or every connection would see its own empty database.
        kwargs["poolclass"] = StaticPool
    else:
        kwargs["pool_size"], kwargs["max_overflow"] = SQLITE_POOL
        ensure_local_directory(path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        **kwargs,
    )
    event.listen(engine, "connect", _sqlite_on_connect(level, wal=path is not None))
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(synchronous: str, *, wal: bool) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the driver: SQLAlchemy's "begin" event emits it (below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            if wal:
                mode = cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(f"SQLite refused WAL mode (journal_mode is {mode})")
            cursor.execute(f"PRAGMA synchronous = {synchronous}")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    return on_connect


def _sqlite_on_begin(conn: sa.Connection) -> None:
    if conn.get_execution_options().get(READ_ONLY):
        conn.exec_driver_sql("BEGIN")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _postgresql_engine(url: sa.URL) -> sa.Engine:
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    if url.get_driver_name() != "psycopg":
        raise StoreError(
            f"unsupported PostgreSQL driver in {describe_url(url)}: use postgresql+psycopg://"
        )
    connect_args = {"connect_timeout": 10, "application_name": "cadenza"}
    size, overflow = POSTGRESQL_POOL
    engine = sa.create_engine(url, connect_args=connect_args, pool_size=size,
                              max_overflow=overflow)
    event.listen(engine, "checkout", _postgresql_on_checkout)
    return engine


def _postgresql_on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Refuse a pooled psycopg connection whose server has gone (``DisconnectionError``:
    the pool discards it and hands out a new one). An idle session in the pool has nothing
    to read: the last transaction's answers were all read, and the store never LISTENs on a
    pooled connection. Anything readable is the server speaking unasked, which for an idle
    session is its FATAL before it closes (restart, ``pg_terminate_backend``, an idle
    timeout), or the closed socket itself; at worst a reconnection too many."""
    if dbapi_connection.closed or dbapi_connection.broken:
        raise sa.exc.DisconnectionError("the connection is closed")
    try:
        readable, _, _ = select.select([dbapi_connection.pgconn.socket], [], [], 0)
    except Exception as exc:  # a closed socket: gone
        raise sa.exc.DisconnectionError(f"the connection is gone: {exc}") from exc
    if readable:
        raise sa.exc.DisconnectionError("the server ended the session")
