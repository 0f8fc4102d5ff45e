"""A PostgreSQL server that ended the store's pooled sessions (a restart, an idle timeout,
``pg_terminate_backend``) costs no failed read or write: the pool sees the closed socket at
checkout, without a round trip, and hands out a new connection (store/engine.py)."""

from __future__ import annotations

import time

import sqlalchemy as sa

from cadenza.store import Store


def _end_sessions(admin: sa.Engine, database: str) -> int:
    with admin.connect() as c:
        ended = c.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = :db AND pid <> pg_backend_pid()"), {"db": database}).scalar_one()
        deadline = time.monotonic() + 10
        while c.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :db"
                                " AND pid <> pg_backend_pid()"),
                        {"db": database}).scalar_one():
            assert time.monotonic() < deadline, "the sessions did not end"
            time.sleep(0.05)
    return int(ended)


def test_ended_sessions_are_replaced_without_a_failed_statement(
        pg_url: str, _pg_admin: sa.Engine) -> None:
    store = Store.open(pg_url)
    try:
        database = sa.make_url(pg_url).database
        assert database
        pids = set()
        with store.write() as a, store.read() as b:  # two pooled connections
            pids.add(a.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
            pids.add(b.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
        assert _end_sessions(_pg_admin, database) >= 2
        for _ in range(3):  # each pooled connection is found gone and replaced
            with store.write() as conn:
                pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
                assert pid not in pids
            with store.read() as conn:
                assert conn.exec_driver_sql("SELECT 1").scalar_one() == 1
        assert store.list_runs(limit=1) == []
    finally:
        store.close()


def test_a_good_pooled_connection_is_kept(pg_url: str) -> None:
    """No ping and no reconnect for a live session: the same server process serves the
    next checkout."""
    store = Store.open(pg_url)
    try:
        with store.read() as conn:
            first = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        with store.read() as conn:
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() == first
        assert store.engine.pool._pre_ping is False  # the check above replaces the ping
    finally:
        store.close()
