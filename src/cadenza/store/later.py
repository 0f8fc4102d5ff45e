"""PostgreSQL: the audit and log rows of a write transaction, sent with its COMMIT.

A run's boundaries end with INSERTs into ``event_log`` and ``run_logs`` whose answers
nothing waits for. Sent when written, each is a round trip of its own; kept until the
commit, they go with the COMMIT in one pipeline (psycopg, libpq 14 or later): one round
trip fewer per write transaction.

:meth:`~cadenza.store.core.StoreCore.write` keeps them (:func:`keeping`) for a transaction
on PostgreSQL; :func:`~cadenza.store.hotsql.insert_rows` into those two tables, with no
RETURNING, appends to the list (:func:`keep`) instead of executing; whatever must see them
first sends them (:func:`send`): an INSERT that returns the row's id (one event written
through SQLAlchemy) goes after them, so that the log keeps the order things happened in.
Nothing in a write transaction reads those tables after writing them. An error in one of
them is raised by the commit, which then rolls everything back, as it would have been
raised earlier. A block that ends its transaction itself sends them just before its COMMIT,
or drops them with its ROLLBACK (:func:`follow`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

KEPT_TABLES = frozenset({"event_log", "run_logs"})

_kept: dict[int, list[tuple[str, list[Any]]]] = {}
"""id(psycopg connection) -> its transaction's INSERTs not sent yet."""
_lock = threading.Lock()


def pipelines() -> bool:
    """Whether psycopg's pipeline mode is there (libpq 14 or later; the binary wheels
    bring one)."""
    try:
        import psycopg
    except ImportError:  # SQLite only
        return False
    return bool(psycopg.Pipeline.is_supported())


PIPELINE = pipelines()


@contextmanager
def keeping(raw: Any) -> Iterator[None]:
    """Keep the INSERTs of ``raw``'s transaction for :func:`commit` (PostgreSQL, with a
    pipeline; otherwise nothing is kept)."""
    if not PIPELINE or raw is None:
        yield
        return
    with _lock:
        _kept[id(raw)] = []
    try:
        yield
    finally:
        with _lock:
            _kept.pop(id(raw), None)


def numbered_cursor(raw: Any) -> Any:
    """A cursor of ``raw`` (a psycopg connection) for statements with numbered parameters
    (``$1``; :meth:`~cadenza.store.hotsql.Dialect.numbered_insert`), sent as they are."""
    import psycopg

    return psycopg.RawCursor(raw)


def keep(cursor: Any, sql: str, params: list[Any]) -> bool:
    """Keep ``sql`` (numbered parameters) for the commit of ``cursor``'s transaction; False
    when it is not kept (not in :func:`keeping`): the caller executes it."""
    found = _kept.get(id(cursor.connection))
    if found is None:
        return False
    found.append((sql, params))
    return True


def follow(engine: Any) -> None:
    """A block that ends its transaction itself (a commit or a rollback through
    SQLAlchemy, before :func:`commit`): what it kept is sent just before its COMMIT (on
    its own, in order), or dropped with its ROLLBACK."""
    from sqlalchemy import event

    if event.contains(engine, "commit", _before_commit):
        return
    event.listen(engine, "commit", _before_commit)
    event.listen(engine, "rollback", _on_rollback)


def _before_commit(conn: Any) -> None:
    send(conn.connection.driver_connection)


def _on_rollback(conn: Any) -> None:
    found = _kept.get(id(conn.connection.driver_connection))
    if found:
        found.clear()


def send(raw: Any) -> None:
    """Execute what ``raw``'s transaction kept, now (what comes next must follow it)."""
    found = _kept.get(id(raw))
    if found:
        kept = list(found)
        found.clear()
        with numbered_cursor(raw) as cursor:
            for sql, params in kept:
                cursor.execute(sql, params)


def commit(raw: Any, commit: Any) -> None:
    """Call ``commit`` (the transaction's) with what ``raw``'s transaction kept sent
    before it in one pipeline: one round trip for all of them and the COMMIT (sent as a
    statement of the pipeline, whose end is its only sync: psycopg's ``commit()`` in a
    pipeline syncs, and the pipeline's end then once more; the transaction's own commit
    then finds nothing to do)."""
    found = _kept.get(id(raw))
    if not found:
        commit()
        return
    kept = list(found)
    found.clear()
    with raw.pipeline(), numbered_cursor(raw) as cursor:
        for sql, params in kept:
            cursor.execute(sql, params)
        cursor.execute("COMMIT")
    commit()

