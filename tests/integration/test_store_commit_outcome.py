"""PostgreSQL: a store write whose COMMIT loses its connection, and writes the database
rolls back for a conflict (a deadlock, a lock wait past ``lock_timeout``).

The COMMIT is made to take time on the server by a deferred constraint trigger that sleeps
(only while the test's flag table holds a row): the test sees the server process sleep inside
the COMMIT, then cuts the client's connection (a TCP proxy that resets it). Either the server
finishes the COMMIT (the change is applied, its answer never arrives), or the test ends that
server process first (nothing is applied). The writer cannot tell which; what it does must
be right in both cases: a claim applied once or not at all, no run held for ever by a node
that does not run it, a run end recorded once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from executor_home import Bench, loaded
from tests.support.tcp_proxy import TcpProxy

from cadenza.domain.errors import StoreConflict, StoreError, StoreOutcomeUnknown
from cadenza.domain.states import RunState
from cadenza.executor.group_commit import GroupCommit
from cadenza.store import Store
from cadenza.store.boundary import Boundary, RunEnd

JOBS = """
[jobs.one]
[[jobs.one.steps]]
name = "only"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
"""

STALL = """
CREATE TABLE cadenza_test_stall (state text);
CREATE FUNCTION cadenza_test_stall() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM cadenza_test_stall WHERE state = NEW.state) THEN
        PERFORM pg_sleep(3);
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER cadenza_test_stall AFTER UPDATE ON runs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION cadenza_test_stall();
"""


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    p = TcpProxy("127.0.0.1", 5432)
    yield p
    p.close()


@contextmanager
def bench(tmp_path: Path, pg_url: str, proxy: TcpProxy) -> Iterator[tuple[Bench, sa.Engine]]:
    """A home whose store is ``pg_url`` reached through ``proxy``; an admin engine."""
    through = sa.make_url(pg_url).set(port=proxy.port).render_as_string(hide_password=False)
    with loaded(tmp_path / "home", JOBS, store_url=through,
                settings='\n[workers]\nlease = "3s"\n') as b:
        admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as c:
                c.exec_driver_sql(STALL)
            yield b, admin
        finally:
            admin.dispose()


def stall_commit_of(admin: sa.Engine, state: RunState) -> None:
    with admin.connect() as c:
        c.execute(sa.text("INSERT INTO cadenza_test_stall VALUES (:s)"), {"s": state.value})


def cut_during_commit(admin: sa.Engine, proxy: TcpProxy, *, apply: bool) -> threading.Thread:
    """In a thread: wait until a server process sleeps in the deferred trigger (its COMMIT in
    flight), cut every connection of the proxy, and (``apply=False``) end that process
    before its COMMIT completes; then let connections through again."""
    def act() -> None:
        with admin.connect() as c:
            deadline = time.monotonic() + 20
            pid = None
            while pid is None and time.monotonic() < deadline:
                pid = c.exec_driver_sql(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
                    " AND datname = current_database()").scalar()
                time.sleep(0.02)
            assert pid is not None, "no COMMIT in flight"
            proxy.cut()
            if not apply:
                c.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            proxy.heal()
            c.exec_driver_sql("DELETE FROM cadenza_test_stall")

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


def claim(b: Bench) -> None:
    with b.store.write() as conn:
        b.executor.claim_and_start(conn, limit=1, lease_until=b.store.clock.now()
                                   + timedelta(seconds=3))


def wait_applied(admin: sa.Engine, run_id: str) -> None:
    """Until the COMMIT the test let finish is visible."""
    deadline = time.monotonic() + 10
    with admin.connect() as c:
        while c.execute(sa.text("SELECT state FROM runs WHERE id = :i"),
                        {"i": run_id}).scalar() == "QUEUED":
            assert time.monotonic() < deadline
            time.sleep(0.05)


@pytest.mark.reliability_case(46)
@pytest.mark.parametrize("apply", [True, False], ids=["applied", "rolled_back"])
def test_a_claim_whose_commit_loses_its_connection_is_never_held_for_ever(
        tmp_path: Path, pg_url: str, proxy: TcpProxy, apply: bool) -> None:
    with bench(tmp_path, pg_url, proxy) as (b, admin):
        run_id = b.store.create_run("one", "manual")
        assert run_id is not None
        stall_commit_of(admin, RunState.RUNNING)
        cutter = cut_during_commit(admin, proxy, apply=apply)
        with pytest.raises(StoreOutcomeUnknown, match="may or may not have been applied"):
            claim(b)
        cutter.join(20)
        # The node does not hold a run whose claim it could not confirm: its lease keeper
        # lets it go at once, so that it cannot renew the lease of a run nobody runs.
        assert run_id not in b.executor.keeper.held()
        if apply:
            wait_applied(admin, run_id)
            run = b.store.get_run(run_id)
            assert run is not None and run.state is RunState.RUNNING and run.lease_epoch == 1
            time.sleep(3.2)  # the claim's lease (3 s) runs out, nobody renewing it
            assert b.store.reap_expired_run_leases() == [run_id] or \
                b.store.get_run(run_id).state is RunState.QUEUED  # type: ignore[union-attr]
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.QUEUED
        assert (run.lease_epoch > 0) is apply  # the reaper moved an applied claim's epoch on
        outcome = b.executor.execute(run_id)  # claimed again: it runs once
        assert outcome.state is RunState.SUCCEEDED
        starts = [s for s in b.store.list_step_runs(run_id) if s.state.value == "SUCCEEDED"]
        assert len(starts) == 1


@pytest.mark.reliability_case(46)
@pytest.mark.parametrize("apply", [True, False], ids=["applied", "rolled_back"])
def test_a_run_end_whose_commit_loses_its_connection_is_recorded_once(
        tmp_path: Path, pg_url: str, proxy: TcpProxy, apply: bool) -> None:
    """The group commit writes a batch that failed again, alone: after a lost COMMIT that
    was applied, the end is refused (the run is no longer RUNNING at that epoch), never
    written twice; after one that was not, it is written then."""
    with bench(tmp_path, pg_url, proxy) as (b, admin):
        store: Store = b.store
        run_id = store.create_run("one", "manual")
        assert run_id is not None
        [run] = store.claim_runs("node-a", store.clock.now() + timedelta(minutes=5),
                                 run_ids=[run_id])
        stall_commit_of(admin, RunState.SUCCEEDED)
        cutter = cut_during_commit(admin, proxy, apply=apply)
        recorder = GroupCommit(store)
        try:
            result = recorder.record(Boundary(run_id, run.lease_epoch,
                                              run_end=RunEnd(RunState.SUCCEEDED, rows=7)))
        finally:
            recorder.close()
        cutter.join(20)
        assert result.applied is (not apply)
        ended = store.get_run(run_id)
        assert ended is not None and ended.state is RunState.SUCCEEDED and ended.rows == 7
        finished = [e for e in store.list_events(run_id=run_id)
                    if e.event_type == "RUN_FINISHED"]
        assert len(finished) == 1


@pytest.mark.reliability_case(46)
def test_a_write_rolled_back_for_a_lock_timeout_is_written_again(
        tmp_path: Path, pg_url: str, proxy: TcpProxy) -> None:
    """A database whose sessions have a ``lock_timeout`` (set by its administrator) and a
    run's row locked by another session for longer: the store says the write was rolled
    back for a conflict, and the group commit writes it again until the lock is gone."""
    with bench(tmp_path, pg_url, proxy) as (b, admin):
        store = b.store
        database = sa.make_url(pg_url).database
        with admin.connect() as c:
            c.exec_driver_sql(f'ALTER DATABASE "{database}" SET lock_timeout = \'100ms\'')
        store.engine.dispose()  # new sessions take the setting
        run_id = store.create_run("one", "manual")
        assert run_id is not None
        [run] = store.claim_runs("node-a", store.clock.now() + timedelta(minutes=5),
                                 run_ids=[run_id])
        end = Boundary(run_id, run.lease_epoch, run_end=RunEnd(RunState.SUCCEEDED))
        locker = sa.create_engine(pg_url)
        try:
            with locker.connect() as holder:
                holder.execute(sa.text("SELECT 1 FROM runs WHERE id = :i FOR UPDATE"),
                               {"i": run_id})
                with pytest.raises(StoreConflict, match=r"lock wait past lock_timeout.*"
                                   r"nothing of it was applied"):
                    store.record_boundaries([end])
                releaser = threading.Timer(0.35, holder.rollback)
                releaser.start()
                recorder = GroupCommit(store)
                try:
                    assert recorder.record(end).applied
                finally:
                    recorder.close()
                    releaser.join()
        finally:
            locker.dispose()
        done = store.get_run(run_id)
        assert done is not None and done.state is RunState.SUCCEEDED


@pytest.mark.reliability_case(46)
def test_a_deadlock_is_a_conflict_nothing_applied(pg_url: str) -> None:
    """Two transactions locking two runs in opposite orders: PostgreSQL ends one of them
    (40P01); the store says so as a conflict that may be written again."""
    with Store.open(pg_url) as store:
        a, b = (store.create_run("one", "manual"), store.create_run("one", "manual"))
        other = sa.create_engine(pg_url)
        errors: list[BaseException] = []
        both = threading.Barrier(2, timeout=10)

        def second() -> None:
            try:
                with other.begin() as c:
                    c.execute(sa.text("UPDATE runs SET priority = 1 WHERE id = :i"), {"i": b})
                    both.wait()
                    c.execute(sa.text("UPDATE runs SET priority = 1 WHERE id = :i"), {"i": a})
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        try:
            with store.write() as conn:
                conn.execute(sa.text("UPDATE runs SET priority = 2 WHERE id = :i"), {"i": a})
                both.wait()
                conn.execute(sa.text("UPDATE runs SET priority = 2 WHERE id = :i"), {"i": b})
        except StoreConflict as exc:
            assert "a deadlock" in str(exc) and "may be written again" in str(exc)
            errors.append(exc)
        finally:
            thread.join(20)
            other.dispose()
        assert len(errors) == 1  # one of the two was ended; the other committed
        priorities = {r.priority for r in (store.get_run(a), store.get_run(b)) if r}
        assert len(priorities) == 1
        assert isinstance(errors[0], (StoreError, sa.exc.DBAPIError))
