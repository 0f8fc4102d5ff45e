"""The one claim and the one run end, on every database: the claim hook (what a run takes in
its claim's transaction: resource leases from the pools on) can refuse a run without undoing
the others; the run end hook runs with the ends in their transaction; on SQLite the runs'
version counter moves with every change a staged claim must notice, event or not."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.boundary import Boundary, EndedRun, NewRun, RunEnd, StepStart
from cadenza.store.hooks import StoreHooks
from cadenza.store.run_leases import RunLease

OWNER = "node:1:1"


class Refuse:
    """A claim hook that refuses the runs of ``jobs`` (as a pool without a free member
    would) and writes a row in the claim's transaction for each run it lets start."""

    def __init__(self, *jobs: str) -> None:
        self.jobs = set(jobs)
        self.seen: list[list[tuple[str, str]]] = []

    def __call__(self, conn: sa.Connection, taken: Sequence[tuple[str, str]], now: datetime,
                 steps: Mapping[str, str] | None = None,
                 starting: bool = False) -> Mapping[str, str]:
        self.seen.append(list(taken))
        for run_id, job in taken:
            if job not in self.jobs:
                conn.execute(sa.text(
                    "INSERT INTO cursors_probe (run_id) VALUES (:r)"), {"r": run_id})
        return {run_id: "waiting for a free member of pool p"
                for run_id, job in taken if job in self.jobs}

    def serves(self, conn: sa.Connection, job_ids: Sequence[str], now: datetime) -> bool:
        return True

    def flush(self, conn: sa.Connection, now: datetime) -> None:
        return None


class Broken(Refuse):
    """A claim hook whose table cannot be read."""

    def __call__(self, conn: sa.Connection, taken: Sequence[tuple[str, str]], now: datetime,
                 steps: Mapping[str, str] | None = None,
                 starting: bool = False) -> Mapping[str, str]:
        raise RuntimeError("pool table unreadable")


@pytest.fixture
def probe(store: Store) -> None:
    """A scratch table the hook writes to: what it writes commits with the claim."""
    with store.write() as conn:
        conn.execute(sa.text("CREATE TABLE cursors_probe (run_id VARCHAR(26))"))


def _probed(store: Store) -> set[str]:
    with store.read() as conn:
        return {row[0] for row in conn.execute(sa.text("SELECT run_id FROM cursors_probe"))}


def test_a_refused_run_stays_queued_and_the_other_claims_stand(
    store: Store, clock: FakeClock, probe: None
) -> None:
    ok, held, ok2 = store.create_runs([NewRun("a", "manual"), NewRun("b", "manual", priority=1),
                                       NewRun("a", "manual")])
    hook = Refuse("b")
    store.use_hooks(StoreHooks(claim=hook))
    until = clock.now() + timedelta(minutes=5)
    claimed = store.claim_runs(OWNER, until, limit=3)
    assert [r.id for r in claimed] == [ok, ok2]
    assert hook.seen == [[(held, "b"), (ok, "a"), (ok2, "a")]]  # admission order
    assert _probed(store) == {ok, ok2}
    run = store.get_run(held)
    assert run is not None
    assert (run.state, run.lease_epoch, run.lease_owner, run.lease_until, run.started_at) == (
        RunState.QUEUED, 0, None, None, None)
    assert run.wait_reason == "waiting for a free member of pool p"
    assert [e.event_type for e in store.list_events(run_id=held)] == ["RUN_CREATED"]
    for run_id in (ok, ok2):
        got = store.get_run(run_id)
        assert got is not None and (got.state, got.lease_epoch) == (RunState.RUNNING, 1)
    # Refused again on the next claim; taken once the hook lets it.
    assert store.claim_runs(OWNER, until, limit=3) == []
    store.use_hooks(StoreHooks())
    (again,) = store.claim_runs(OWNER, until, limit=3)
    assert (again.id, again.lease_epoch, again.wait_reason) == (held, 1, None)


def test_the_staged_claim_asks_the_same_hook(store: Store, clock: FakeClock,
                                              probe: None) -> None:
    ok, held = store.create_runs([NewRun("a", "manual"), NewRun("b", "manual")])
    until = clock.now() + timedelta(minutes=5)
    starts = [store.stage_start(Boundary(run_id, 1, starts=[StepStart("s1", "python")]),
                                job, OWNER, until) for run_id, job in ((ok, "a"), (held, "b"))]
    assert all(s is not None for s in starts)
    store.use_hooks(StoreHooks(claim=Refuse("b")))
    with store.write() as conn:
        ids = store.claim_staged(conn, [s for s in starts if s is not None], OWNER, until)
    assert set(ids) == {ok}
    assert _probed(store) == {ok}
    run = store.get_run(held)
    assert run is not None and (run.state, run.lease_epoch) == (RunState.QUEUED, 0)
    assert store.list_step_runs(held) == []
    assert [s.step for s in store.list_step_runs(ok)] == ["s1"]


def test_a_hook_that_raises_rolls_the_whole_claim_back(store: Store, clock: FakeClock) -> None:
    store.create_runs([NewRun("a", "manual"), NewRun("a", "manual")])
    store.use_hooks(StoreHooks(claim=Broken()))
    with pytest.raises(RuntimeError):
        store.claim_runs(OWNER, clock.now() + timedelta(minutes=5), limit=2)
    assert {r.state for r in store.list_runs(limit=10)} == {RunState.QUEUED}


def test_a_re_claimed_run_refused_keeps_its_first_start(store: Store, clock: FakeClock) -> None:
    (run_id,) = store.create_runs([NewRun("b", "manual")])
    until = clock.now() + timedelta(minutes=5)
    (first,) = store.claim_runs(OWNER, until)
    store.record_boundaries([Boundary(run_id, 1, run_end=RunEnd(RunState.QUEUED))])
    clock.advance(60)
    store.use_hooks(StoreHooks(claim=Refuse("b")))
    assert store.claim_runs(OWNER, until) == []
    run = store.get_run(run_id)
    assert run is not None
    assert (run.state, run.lease_epoch, run.started_at) == (RunState.QUEUED, 1,
                                                            first.started_at)


def test_the_run_end_hook_sees_the_ends_in_their_transaction(store: Store,
                                                             clock: FakeClock) -> None:
    a, b = store.create_runs([NewRun("a", "manual"), NewRun("b", "manual")])
    store.claim_runs(OWNER, clock.now() + timedelta(minutes=5), limit=2)
    seen: list[list[EndedRun]] = []

    def hook(conn: sa.Connection, ended: Sequence[EndedRun], now: datetime) -> None:
        seen.append(list(ended))
        states = dict(conn.execute(sa.text("SELECT id, state FROM runs")).all())
        assert all(states[e.run_id] == e.state.value for e in ended)  # the ends are written
        if any(e.job_id == "b" for e in ended):
            raise RuntimeError("outbox full")

    store.use_hooks(StoreHooks(run_end=(hook,)))
    store.record_boundaries([Boundary(a, 1, run_end=RunEnd(RunState.SUCCEEDED, rows=3))])
    assert seen == [[EndedRun(a, "a", RunState.SUCCEEDED, 1, child=False)]]
    with pytest.raises(RuntimeError):
        store.record_boundaries([Boundary(b, 1, run_end=RunEnd(RunState.FAILED))])
    run = store.get_run(b)
    assert run is not None and run.state is RunState.RUNNING  # rolled back with the hook
    # A boundary that ends no run does not call it.
    store.record_boundaries([Boundary(b, 1, starts=[StepStart("s1", "python")])])
    assert len(seen) == 2


def _version(store: Store) -> Any:
    with store.write() as conn:
        return store.runs_version(conn)


def test_the_runs_version_moves_with_every_change_a_staged_claim_must_see(
    store: Store, clock: FakeClock
) -> None:
    if store.dialect != "sqlite":
        assert _version(store) is None  # every chunk checks everything there
        return
    v0 = _version(store)
    a, b, c = store.create_runs([NewRun("a", "manual") for _ in range(3)])
    v1 = _version(store)
    assert v1 == v0 + 3
    # A change that writes no event (a raw UPDATE, as a tool or a future path might) moves it.
    for sql in ("UPDATE runs SET state = 'CANCELED' WHERE id = :id",
                "UPDATE runs SET not_before = '2030-01-01 00:00:00.000000' WHERE id = :id",
                "UPDATE runs SET priority = 7 WHERE id = :id"):
        before = _version(store)
        with store.write() as conn:
            conn.execute(sa.text(sql), {"id": b})
        assert _version(store) == before + 1, sql
    (claimed,) = store.claim_runs(OWNER, clock.now() + timedelta(minutes=5), run_ids=[a])
    v2 = _version(store)
    assert v2 > v1
    # What admission does not read leaves it alone: a lease renewal, a wait reason.
    store.renew_run_leases([RunLease(a, claimed.lease_epoch, OWNER)],
                       clock.now() + timedelta(minutes=10))
    with store.write() as conn:
        conn.execute(sa.text("UPDATE runs SET wait_reason = 'x' WHERE id = :id"), {"id": c})
    assert _version(store) == v2
    store.record_boundaries([Boundary(a, claimed.lease_epoch,
                                      run_end=RunEnd(RunState.SUCCEEDED))])
    assert _version(store) == v2 + 1
