"""Leader election on PostgreSQL: a lease judged by the database's clock, with terms that
fence the leader's writes (docs/scheduling.md, "Who fires").

The lease's end is the database's ``clock_timestamp()``, which a test cannot move: the tests
that let a lease run out use a one-second lease and wait for it (about a second each).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.errors import LeadershipLost
from cadenza.scheduler.leader import leadership_for
from cadenza.scheduler.service import Scheduler
from cadenza.store import Store
from cadenza.store.leadership import LeaseLeadership

SHORT = timedelta(seconds=1)


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    opened = Store.open(pg_url)
    yield opened
    opened.close()


@pytest.fixture
def contenders(store: Store, pg_url: str) -> Iterator[tuple[LeaseLeadership, LeaseLeadership]]:
    first = LeaseLeadership(pg_url, lease=SHORT, holder="node-a")
    second = LeaseLeadership(pg_url, lease=SHORT, holder="node-b")
    yield first, second
    first.close()
    second.close()


def _row(store: Store) -> tuple[str, int]:
    with store.read() as conn:
        row = conn.execute(sa.text("SELECT holder, epoch FROM leadership")).one()
    return str(row.holder), int(row.epoch)


def _run_out(seconds: float = 1.15) -> None:
    """Wait for a one-second lease to end on the database's clock."""
    time.sleep(seconds)


def test_one_leader_at_a_time(contenders: tuple[LeaseLeadership, LeaseLeadership],
                              store: Store) -> None:
    first, second = contenders
    assert first.acquire() and first.acquire()  # renews its own term
    assert first.epoch == 1 and _row(store) == ("node-a", 1)
    assert not second.acquire() and not second.is_leader
    first.release()
    assert not first.is_leader
    assert second.acquire() and second.epoch == 2  # a release hands over at once
    assert not first.acquire()
    assert _row(store) == ("node-b", 2)


def test_a_leader_that_does_not_renew_loses_its_term(
        contenders: tuple[LeaseLeadership, LeaseLeadership], store: Store) -> None:
    """A stopped leader (here: one that does not call acquire) keeps nothing: once its
    lease has run out, another node takes the next term, and the former leader knows it
    without asking (its own monotonic clock) and cannot renew."""
    first, second = contenders
    assert first.acquire()
    _run_out()
    assert not first.is_leader  # counted down locally
    assert second.acquire() and second.epoch == 2
    assert not first.acquire()  # its renewal is refused: the term is another's
    assert _row(store) == ("node-b", 2)


def test_a_former_leaders_late_write_is_refused(
        contenders: tuple[LeaseLeadership, LeaseLeadership], store: Store) -> None:
    first, second = contenders
    assert first.acquire()
    with store.write() as conn:  # a write inside the term goes through
        first.fence(conn)
    # The database's end of the lease passes (the node was cut off) while the node's own
    # countdown has not: the database refuses.
    with store.write() as conn:
        conn.execute(sa.text("UPDATE leadership SET until = clock_timestamp()"))
    assert second.acquire() and second.epoch == 2
    assert first.is_leader  # it does not know yet
    with pytest.raises(LeadershipLost, match="term 1"), store.write() as conn:
        first.fence(conn)
        conn.execute(sa.text("CREATE TABLE never_written (x int)"))
    with store.read() as conn:
        assert conn.execute(sa.text("SELECT to_regclass('never_written')")).scalar() is None
    assert not first.is_leader
    with pytest.raises(LeadershipLost, match="no longer leads"), store.write() as conn:
        first.fence(conn)


@pytest.mark.reliability_case(46)
def test_a_takeover_waits_for_the_leaders_fenced_transaction(
        contenders: tuple[LeaseLeadership, LeaseLeadership], store: Store) -> None:
    """A write fenced inside its term commits inside it: a takeover that comes while the
    transaction is still working waits for its end (here it gives up after its lock wait
    and takes the term at its next look)."""
    first, second = contenders
    assert first.acquire()
    lease_over = threading.Event()

    def leader_transaction() -> None:
        with store.write() as conn:
            first.fence(conn)
            conn.execute(sa.text("SELECT pg_sleep(1.15)"))  # working, not idle
            lease_over.set()
            conn.execute(sa.text("SELECT pg_sleep(1.5)"))  # while the takeover waits
            conn.execute(sa.text("CREATE TABLE written_in_term (x int)"))

    worker = threading.Thread(target=leader_transaction)
    worker.start()
    try:
        assert lease_over.wait(10)
        started = time.monotonic()
        assert not second.acquire()  # blocked by the fenced transaction, then gives up
        assert time.monotonic() - started >= 0.9
    finally:
        worker.join(10)
    assert second.acquire() and second.epoch == 2
    with store.read() as conn:
        assert conn.execute(sa.text("SELECT to_regclass('written_in_term')")).scalar()


def test_a_stalled_fenced_transaction_is_ended_by_the_database(
        contenders: tuple[LeaseLeadership, LeaseLeadership], store: Store) -> None:
    """A leader stopped in the middle of a fenced write holds no lock for ever: its
    transaction, idle for one lease, is ended by PostgreSQL, and its write is lost."""
    first, second = contenders
    assert first.acquire()
    with pytest.raises(sa.exc.SQLAlchemyError), store.write() as conn:
        first.fence(conn)
        _run_out(1.5)  # idle in transaction past the lease
        conn.execute(sa.text("CREATE TABLE never_written (x int)"))
    assert second.acquire() and second.epoch == 2


def test_a_dead_leaders_connection_changes_nothing_until_its_lease_ends(
        contenders: tuple[LeaseLeadership, LeaseLeadership], pg_url: str) -> None:
    """The lease, not the session, decides: a leader whose connection was killed still
    leads until its lease ends (it reconnects to renew), and another node waits."""
    first, second = contenders
    assert first.acquire()
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"))
    finally:
        admin.dispose()
    assert not second.acquire()
    assert first.acquire()  # reconnects and renews (or, the first time, keeps its term)
    assert first.acquire() and first.epoch == 1


def test_leadership_for_postgresql(store: Store) -> None:
    leader = leadership_for(store.engine, lease=timedelta(seconds=5))
    try:
        assert isinstance(leader, LeaseLeadership)
        assert leader.renew_every == 1.25
        assert leader.acquire()
    finally:
        leader.close()


def _nightly() -> dict[str, JobConfig]:
    job = JobConfig.model_validate({"id": "nightly", "timezone": "UTC",
                                    "schedule": "0 2 * * *"})
    return {"nightly": job}


def test_a_former_leaders_tick_records_no_fire(pg_url: str) -> None:
    clock = FakeClock("2027-03-01T01:00:00+00:00")
    store = Store.open(pg_url, clock=clock)
    first = LeaseLeadership(pg_url, lease=SHORT, holder="node-a")
    second = LeaseLeadership(pg_url, lease=SHORT, holder="node-b")
    try:
        scheduler = Scheduler(store, _nightly(), clock=clock, leader=first,
                              default_zone=ZoneInfo("UTC"))
        assert scheduler.try_lead()
        scheduler.tick(clock.now())  # reads (creates) the cursor, inside the term
        clock.set(datetime.fromisoformat("2027-03-01T02:00:01+00:00"))  # the fire is due
        with store.write() as conn:  # the term ends on the database's clock (cut off)
            conn.execute(sa.text("UPDATE leadership SET until = clock_timestamp()"))
        assert second.acquire()
        with pytest.raises(LeadershipLost):
            scheduler.tick(clock.now())
        assert store.list_runs() == []  # the former leader wrote nothing
        # The new leader's scheduler records the fire once.
        other = Scheduler(store, _nightly(), clock=clock, leader=second,
                          default_zone=ZoneInfo("UTC"))
        assert [r.job_id for r in other.tick(clock.now()).created] == ["nightly"]
    finally:
        first.close()
        second.close()
        store.close()


class _Deposed:
    """A leadership that grants the role but whose term the database no longer knows: the
    state of a leader that wakes up between its renewal and its write."""

    is_leader = True
    epoch = 7
    holder = "node-a"
    renew_every = 0.01

    def acquire(self) -> bool:
        return True

    def fence(self, conn: sa.Connection) -> None:
        raise LeadershipLost("term 7 of the scheduler's leadership ended or was taken over")

    def release(self) -> None:
        return None

    def close(self) -> None:
        return None


def test_a_refused_write_is_logged_and_recorded(pg_url: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock("2027-03-01T02:00:01+00:00")
    store = Store.open(pg_url, clock=clock)
    stop = threading.Event()
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) >= 2:
            stop.set()

    try:
        scheduler = Scheduler(store, _nightly(), clock=clock, leader=_Deposed(),
                              default_zone=ZoneInfo("UTC"))
        with caplog.at_level(logging.WARNING, logger="cadenza.scheduler"):
            scheduler.run_forever(stop, clock, wait=wait)
        assert store.list_runs() == []
        events = store.list_events(event_type="LEADERSHIP")
        assert "node-a leads the scheduler (term 7)" in [e.message for e in events]
        refused = [e for e in events if e.level == "WARNING"]
        assert refused and "former leader was refused" in refused[0].message
        assert refused[0].payload["holder"] == "node-a"
        assert any("no longer leads" in r.getMessage() for r in caplog.records)
    finally:
        store.close()


def test_a_node_whose_clock_is_off_gives_up_the_leadership(
        contenders: tuple[LeaseLeadership, LeaseLeadership], store: Store) -> None:
    first, second = contenders
    clock_off = False
    scheduler = Scheduler(store, _nightly(), leader=first, default_zone=ZoneInfo("UTC"),
                          may_lead=lambda: not clock_off)
    assert scheduler.try_lead() and first.is_leader
    clock_off = True
    assert not scheduler.try_lead() and not first.is_leader  # released at once
    assert second.acquire()  # another node leads without waiting for the lease
    clock_off = False
    assert not scheduler.try_lead()  # may lead again, once the other's lease ends
