"""Run leases in the store, on SQLite and PostgreSQL: one-statement renewals with per-run
epochs, cancel requests, and the reaper (store/run_leases.py; docs/leases.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from tests.support.statements import statement_kinds

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.store import Store
from cadenza.store.boundary import Boundary, NewRun, StepStart
from cadenza.store.run_leases import LOST_ERROR, REAP_BATCH, RunLease, owner_parts

OWNER = "host-a:4242:1"
LEASE = timedelta(seconds=60)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-05-01T10:00:00+00:00")


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Store:
    s = Store.open(store_url, clock=clock)
    yield s  # type: ignore[misc]
    s.close()


def _running(store: Store, n: int, owner: str = OWNER, job: str = "j") -> list[RunLease]:
    """``n`` runs claimed by ``owner``, each with a RUNNING first step."""
    ids = store.create_runs([NewRun(job, "manual:test") for _ in range(n)])
    until = store.clock.now() + LEASE
    claimed = store.claim_runs(owner, until, limit=n, run_ids=ids)
    store.record_boundaries([Boundary(r.id, r.lease_epoch, starts=[StepStart("s1", "python")])
                             for r in claimed])
    return [RunLease(r.id, r.lease_epoch, owner) for r in claimed]


def test_one_update_renews_64_runs_each_at_its_own_epoch(store: Store) -> None:
    held = _running(store, 64)
    # Give the runs different epochs: requeue and claim half of them again.
    with store.engine.begin() as c:
        c.execute(sa.text("UPDATE runs SET lease_epoch = lease_epoch + 5 WHERE id IN "
                          "(SELECT id FROM runs ORDER BY id LIMIT 32)"))
    epochs = {r.id: r.lease_epoch for r in store.list_runs(limit=100)}
    held = [RunLease(h.run_id, epochs[h.run_id], OWNER) for h in held]
    seen = statement_kinds(store)
    until = store.clock.now() + timedelta(minutes=5)
    result = store.renew_run_leases(held, until)
    assert result.renewed == {h.run_id for h in held} and not result.lost
    writes = [s for s in seen if s in ("UPDATE", "INSERT", "DELETE")]
    assert writes == ["UPDATE"], seen  # one statement for the whole round
    assert len(seen) <= 3, seen  # measured: ~2 ms on SQLite, ~3 ms on PostgreSQL (bench, not here)
    assert {r.lease_until for r in store.list_runs(limit=100)} == {until}


def test_a_renewal_tells_lost_runs_and_reads_cancel_requests(store: Store) -> None:
    a, b, c = _running(store, 3)
    with store.engine.begin() as conn:  # another node took b over
        conn.execute(sa.text("UPDATE runs SET lease_epoch = lease_epoch + 1, "
                             "lease_owner = 'host-b:1:1' WHERE id = :id"), {"id": b.run_id})
    store.request_cancel(c.run_id, "alice")
    result = store.renew_run_leases([a, b, c], store.clock.now() + LEASE)
    assert result.renewed == {a.run_id, c.run_id}
    assert result.cancels == {c.run_id: "alice"}
    assert "another holder" in result.lost[b.run_id]
    assert store.cancel_requests([a.run_id, b.run_id, c.run_id]) == {c.run_id: "alice"}


def test_a_claim_not_yet_visible_is_not_called_lost(store: Store) -> None:
    (a,) = _running(store, 1)
    ahead = RunLease(a.run_id, a.epoch + 1, OWNER)  # as if our claim had not committed yet
    result = store.renew_run_leases([ahead], store.clock.now() + LEASE)
    assert result.unseen == {a.run_id} and not result.lost and not result.renewed


def test_cancel_of_a_queued_run_cancels_it_at_once(store: Store) -> None:
    (run_id,) = store.create_runs([NewRun("j", "manual:test")])
    done = store.request_cancel(run_id, "bob")
    assert done.canceled and done.state is RunState.CANCELED
    run = store.get_run(run_id)
    assert run is not None and run.state is RunState.CANCELED
    assert run.reason == "canceled by bob" and run.finished_at is not None
    again = store.request_cancel(run_id, "bob")
    assert not again.canceled and "nothing to cancel" in again.message


def test_the_reaper_requeues_expired_runs_and_fences_the_old_holder(
        store: Store, clock: FakeClock) -> None:
    (a,) = _running(store, 1)
    (fresh,) = _running(store, 1, owner="host-b:7:1")
    clock.advance(30)
    store.renew_run_leases([fresh], clock.now() + LEASE)  # b renews, a does not
    clock.advance(31)
    reaped = store.reap_expired_run_leases()
    assert [(r.run_id, r.state, r.old_owner, r.old_epoch, r.steps_ended) for r in reaped] == [
        (a.run_id, RunState.QUEUED, OWNER, a.epoch, 1)]
    run = store.get_run(a.run_id)
    assert run is not None and run.state is RunState.QUEUED
    assert (run.lease_owner, run.lease_until, run.not_before) == (None, None, None)
    assert run.lease_epoch == a.epoch + 1
    (step,) = store.list_step_runs(a.run_id)
    assert (step.state, step.error, step.error_class) == (StepState.FAILED, LOST_ERROR, "lost")
    assert (step.reason, step.finished_at) == (LOST_ERROR, clock.now())
    (ended,) = store.list_events(run_id=a.run_id, event_type="STEP_FAILED")
    assert ended.actor == "reaper" and ended.message == (
        f"step s1 (attempt 1) RUNNING -> FAILED: {LOST_ERROR}")
    assert {k: ended.payload[k] for k in ("step_run_id", "from", "to", "error_class")} == {
        "step_run_id": step.id, "from": "RUNNING", "to": "FAILED", "error_class": "lost"}
    # The old holder's late write is refused by the epoch.
    late = store.record_boundaries([Boundary(a.run_id, a.epoch,
                                             starts=[StepStart("s2", "python")])])[0]
    assert not late.applied
    # Its renewal says it lost the run.
    assert a.run_id in store.renew_run_leases([a], clock.now() + LEASE).lost
    events = [e.event_type for e in store.list_events(run_id=a.run_id)]
    assert "RUN_RECOVERED" in events and "STEP_FAILED" in events
    b_run = store.get_run(fresh.run_id)
    assert b_run is not None and b_run.state is RunState.RUNNING


def test_a_run_recovered_too_often_needs_review(store: Store, clock: FakeClock) -> None:
    (a,) = _running(store, 1)
    for k in range(3):
        clock.advance(LEASE + timedelta(seconds=1))
        (got,) = store.reap_expired_run_leases()
        assert got.state is RunState.QUEUED, k
        (_again,) = store.claim_runs(OWNER, clock.now() + LEASE, run_ids=[a.run_id])
    clock.advance(LEASE + timedelta(seconds=1))
    (last,) = store.reap_expired_run_leases()
    assert last.state is RunState.NEEDS_REVIEW
    run = store.get_run(a.run_id)
    assert run is not None and run.state is RunState.NEEDS_REVIEW
    assert run.error is not None and "lost 4 times" in run.error


@pytest.mark.reliability_case(41)
def test_a_run_that_never_had_a_lease_is_reaped(store: Store) -> None:
    (a,) = _running(store, 1)
    with store.engine.begin() as c:  # Airflow #66773: NULL < t is NULL
        c.execute(sa.text("UPDATE runs SET lease_until = NULL"))
    (got,) = store.reap_expired_run_leases()
    assert got.run_id == a.run_id and got.state is RunState.QUEUED


def test_a_pending_cancel_makes_the_reaper_cancel(store: Store, clock: FakeClock) -> None:
    (a,) = _running(store, 1)
    store.request_cancel(a.run_id, "carol")
    clock.advance(LEASE + timedelta(seconds=1))
    (got,) = store.reap_expired_run_leases()
    assert got.state is RunState.CANCELED
    run = store.get_run(a.run_id)
    assert run is not None and run.reason == "canceled by carol"


def test_dead_owners_are_reclaimed_before_their_lease_expires(store: Store) -> None:
    (dead,) = _running(store, 1, owner="me:111:1")
    (alive,) = _running(store, 1, owner="me:222:1")
    (other,) = _running(store, 1, owner="other:111:1")
    got = store.reap_expired_run_leases(owner_like="me:%",
                                    dead_owner=lambda o: owner_parts(o)[1] == 111)
    assert [r.run_id for r in got] == [dead.run_id]
    assert {r.id: r.state for r in store.list_runs(limit=10)} == {
        dead.run_id: RunState.QUEUED, alive.run_id: RunState.RUNNING,
        other.run_id: RunState.RUNNING}


def test_owner_parts() -> None:
    assert owner_parts("my-host.local:123:140000") == ("my-host.local", 123)
    assert owner_parts(None) == ("", None)
    assert owner_parts("odd") == ("odd", None)


@pytest.mark.reliability_case(42)
def test_hundreds_of_expired_leases_are_taken_back_in_bounded_batches(
        store: Store, clock: FakeClock) -> None:
    """A restart after a crash of a busy node: 1,200 runs whose leases expired are taken
    back in transactions of at most REAP_BATCH runs (no transaction holds them all, no herd
    of writes), each exactly once, QUEUED for admission to start again under its caps."""
    held = [lease for _ in range(3) for lease in _running(store, 400)]
    clock.advance(LEASE.total_seconds() + 1)
    batches: list[int] = []
    while True:
        batch = store.reap_expired_run_leases()
        batches.append(len(batch))
        if len(batch) < REAP_BATCH:
            break
    assert sum(batches) == len(held) == 1200
    assert max(batches) <= REAP_BATCH and len(batches) == 3
    assert store.reap_expired_run_leases() == []  # nothing left, nothing taken twice
    recovered = store.list_events(event_type="RUN_RECOVERED", limit=5000)
    assert sorted(e.run_id for e in recovered) == sorted(h.run_id for h in held)
    assert {r.state for r in store.list_runs(limit=2000)} == {RunState.QUEUED}
