"""Leader election on PostgreSQL: one advisory-lock holder; a dead session frees the lock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from cadenza.scheduler.leader import leadership_for
from cadenza.store import Store
from cadenza.store.leadership import ADVISORY_KEY, PostgresLeadership


@pytest.fixture
def contenders(pg_url: str) -> Iterator[tuple[PostgresLeadership, PostgresLeadership]]:
    Store.open(pg_url).close()
    first, second = PostgresLeadership(pg_url), PostgresLeadership(pg_url)
    yield first, second
    first.close()
    second.close()


def test_one_leader_at_a_time(contenders: tuple[PostgresLeadership, PostgresLeadership]) -> None:
    first, second = contenders
    assert first.acquire() and first.acquire()  # re-checks its session, stays leader
    assert not second.acquire() and not second.is_leader
    first.release()
    assert not first.is_leader
    assert second.acquire()
    assert not first.acquire()


def test_a_dead_session_loses_leadership(
    contenders: tuple[PostgresLeadership, PostgresLeadership], pg_url: str
) -> None:
    first, second = contenders
    assert first.acquire()
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks "
                    "WHERE locktype = 'advisory' AND granted AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database()) "
                    "AND ((classid::bigint << 32) | objid::bigint) = :key"
                ),
                {"key": ADVISORY_KEY & 0xFFFFFFFFFFFFFFFF},
            ).all()
    finally:
        admin.dispose()
    assert killed == [(True,)]
    assert second.acquire()  # the lock died with the session
    assert not first.acquire()  # notices its session is gone and cannot take it back
    assert not first.is_leader


def test_leadership_for_postgresql(pg_url: str) -> None:
    store = Store.open(pg_url)
    try:
        leader = leadership_for(store.engine)
        assert isinstance(leader, PostgresLeadership)
        assert leader.acquire()
        leader.close()
    finally:
        store.close()
