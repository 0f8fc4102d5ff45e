"""Whose clock decides a lease, on SQLite and PostgreSQL (store/lease_clock.py;
docs/leases.md "Whose clock decides a lease").

Two stores on one database stand for two nodes: one whose clock is right, one whose clock
runs five minutes ahead (an ``OffsetClock``, what ``CADENZA_FAKE_NOW`` gives a process).
Judged by the database's time, the fast node neither takes the healthy node's live run nor
writes leases five minutes long; judged by the store's clock (tests), a ``FakeClock`` still
decides alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from cadenza.clock import FakeClock, OffsetClock, SystemClock
from cadenza.store import Store
from cadenza.store.boundary import Boundary, NewRun, StepStart
from cadenza.store.run_leases import RunLease

LEASE = timedelta(seconds=60)
AHEAD = timedelta(minutes=5)
SLACK = timedelta(seconds=5)
"""How far a lease end may sit from the database's now + LEASE (a test on a busy machine)."""


def _fast() -> OffsetClock:
    return OffsetClock(datetime.now(UTC) + AHEAD)


@pytest.fixture
def nodes(store_url: str) -> Iterator[tuple[Store, Store]]:
    """The healthy node's store and the fast node's, both judging leases by the database."""
    healthy = Store.open(store_url, clock=SystemClock(), lease_time="database")
    fast = Store.open(store_url, clock=_fast(), migrate=False, lease_time="database")
    yield healthy, fast
    fast.close()
    healthy.close()


def _claim(store: Store, owner: str, lease: timedelta = LEASE) -> RunLease:
    (run_id,) = store.create_runs([NewRun("j", "manual:test")])
    (run,) = store.claim_runs(owner, store.clock.now() + lease, run_ids=[run_id])
    store.record_boundaries([Boundary(run.id, run.lease_epoch,
                                      starts=[StepStart("s1", "python")])])
    return RunLease(run.id, run.lease_epoch, owner)


def _lease_until(store: Store, run_id: str) -> datetime:
    run = store.get_run(run_id)
    assert run is not None and run.lease_until is not None
    return run.lease_until


def _near(value: datetime, expected: datetime) -> bool:
    return abs(value - expected) < SLACK


@pytest.mark.reliability_case(49)
def test_a_node_whose_clock_runs_ahead_does_not_reap_a_live_run(
        nodes: tuple[Store, Store]) -> None:
    healthy, fast = nodes
    held = _claim(healthy, "host-a:1:1")
    assert fast.reap_expired_run_leases() == []  # its own clock says the lease ended
    run = healthy.get_run(held.run_id)
    assert run is not None and (run.state.value, run.lease_epoch) == ("RUNNING", held.epoch)
    assert healthy.renew_run_leases([held], healthy.clock.now() + LEASE).renewed == {
        held.run_id}


@pytest.mark.reliability_case(49)
def test_lease_ends_are_the_databases_time_whoever_writes_them(
        nodes: tuple[Store, Store]) -> None:
    healthy, fast = nodes
    mine = _claim(healthy, "host-a:1:1")
    theirs = _claim(fast, "host-b:1:1")
    truth = healthy._store_time()
    assert _near(_lease_until(healthy, mine.run_id), truth + LEASE)
    assert _near(_lease_until(fast, theirs.run_id), truth + LEASE)  # not 5 minutes more
    assert fast.renew_run_leases([theirs], fast.clock.now() + LEASE).renewed == {
        theirs.run_id}
    assert _near(_lease_until(fast, theirs.run_id), fast._store_time() + LEASE)


def test_a_staged_claim_of_the_fast_node_is_on_the_databases_time(
        nodes: tuple[Store, Store]) -> None:
    healthy, fast = nodes
    (run_id,) = fast.create_runs([NewRun("j", "manual:test")])
    due = fast.clock.now()
    start = fast.stage_start(Boundary(run_id, 1, starts=[StepStart("s1", "python")]), "j",
                             "host-b:1:1", due + LEASE)
    assert start is not None
    with fast.write() as conn:
        assert set(fast.claim_staged(conn, [start], "host-b:1:1", due + LEASE,
                                     now=due)) == {run_id}
    assert _near(_lease_until(fast, run_id), healthy._store_time() + LEASE)


def test_an_expired_lease_is_reaped_by_any_node_on_the_databases_time(
        nodes: tuple[Store, Store]) -> None:
    healthy, fast = nodes
    gone = _claim(fast, "host-b:1:1", lease=-timedelta(seconds=1))  # ended a second ago
    live = _claim(fast, "host-b:1:1")
    taken = healthy.reap_expired_run_leases()
    assert [r.run_id for r in taken] == [gone.run_id]
    run = healthy.get_run(live.run_id)
    assert run is not None and run.state.value == "RUNNING"


def test_the_skew_of_a_nodes_clock_is_measured_against_the_databases_time(
        nodes: tuple[Store, Store]) -> None:
    healthy, fast = nodes
    assert abs(healthy.clock_skew(SystemClock())) < SLACK
    assert _near(datetime.now(UTC) + healthy.clock_skew(fast.clock), datetime.now(UTC) + AHEAD)
    assert abs(fast.clock_skew(SystemClock())) < SLACK  # the store's time, not its clock


def test_a_store_judged_by_its_clock_lets_a_fake_clock_decide(store_url: str) -> None:
    clock = FakeClock("2027-03-01T08:00:00+00:00")
    with Store.open(store_url, clock=clock) as store:
        held = _claim(store, "host-a:1:1")
        assert _lease_until(store, held.run_id) == clock.now() + LEASE
        assert store.clock_skew(clock) == timedelta(0)
        assert store.reap_expired_run_leases() == []
        clock.advance(LEASE + timedelta(seconds=1))
        assert [r.run_id for r in store.reap_expired_run_leases()] == [held.run_id]


def test_an_unknown_lease_time_is_refused(sqlite_url: str) -> None:
    with pytest.raises(ValueError, match="lease_time"):
        Store.open(sqlite_url, lease_time="node")  # type: ignore[arg-type]
