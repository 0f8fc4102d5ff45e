"""One writer of a run's state (cadenza.store.run_states): every path that ends or moves a
run (a step boundary's end, a cancel, the reaper, an abandon, a resume) writes the same
events with the same payload, on every database; the reaper counts recoveries in a column."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.boundary import Boundary, NewRun, RunEnd
from cadenza.store.run_states import RunChanged, RunFinished, RunRecovery
from cadenza.store.tables import runs

OWNER = "node:1:1"
SRC = Path(__file__).resolve().parents[2] / "src" / "cadenza"


def _claimed(store: Store, clock: FakeClock, job: str = "a") -> str:
    (run_id,) = store.create_runs([NewRun(job, "manual")])
    (claimed,) = store.claim_runs(OWNER, clock.now() + timedelta(minutes=5), run_ids=[run_id])
    assert claimed.id == run_id
    return run_id


def _needs_review(store: Store, clock: FakeClock) -> str:
    run_id = _claimed(store, clock)
    clock.advance(3)
    store.record_boundaries([Boundary(run_id, 1, run_end=RunEnd(
        RunState.NEEDS_REVIEW, error="boom", reason="attempts spent"))])
    return run_id


def _payloads(store: Store, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in store.list_events(run_id=run_id, event_type=kind)]


def _one_type_per_key(payloads: list[dict[str, Any]]) -> bool:
    """Each key holds values of one type across ``payloads`` (None aside)."""
    types: dict[str, set[str]] = {}
    for payload in payloads:
        for key, value in payload.items():
            if value is not None:
                types.setdefault(key, set()).add(type(value).__name__)
    return all(len(found) == 1 for found in types.values())


def test_every_path_writes_the_same_events(store: Store, clock: FakeClock) -> None:
    finished: dict[str, dict[str, Any]] = {}
    changed: dict[str, dict[str, Any]] = {}

    # a step boundary's end (the group commit, run --local)
    ended = _claimed(store, clock)
    clock.advance(2)
    store.record_boundaries([Boundary(ended, 1, run_end=RunEnd(RunState.SUCCEEDED, rows=4))])
    # runs cancel of a QUEUED run
    (queued,) = store.create_runs([NewRun("a", "manual")])
    assert store.request_cancel(queued, "alice").canceled
    # the reaper, of a run whose cancel was asked and whose worker was lost
    reaped = _claimed(store, clock)
    assert store.request_cancel(reaped, "bob").requested
    clock.advance(600)
    (recovered,) = store.reap_expired_run_leases()
    assert recovered.run_id == reaped and recovered.state is RunState.CANCELED
    # runs abandon and runs resume of NEEDS_REVIEW runs
    abandoned = _needs_review(store, clock)
    store.abandon_run(abandoned, actor="carol")
    resumed = _needs_review(store, clock)
    store.resume_run(resumed, actor="dave")

    for path, run_id in (("end", ended), ("cancel", queued), ("reap", reaped),
                         ("abandon", abandoned)):
        (finished[path],) = _payloads(store, run_id, "RUN_FINISHED")
        # the change into a final state is said by RUN_FINISHED alone
        assert all(p["to"] not in ("SUCCEEDED", "FAILED", "CANCELED")
                   for p in _payloads(store, run_id, "RUN_STATE_CHANGED")), path
    changed["resume"] = _payloads(store, resumed, "RUN_STATE_CHANGED")[-1]
    changed["review"] = _payloads(store, resumed, "RUN_STATE_CHANGED")[-2]
    assert _payloads(store, resumed, "RUN_FINISHED") == []

    keys = {"job_id", "from", "state", "reason", "epoch", "fields", "started_at",
            "finished_at", "duration_s"}
    assert {path: set(p) for path, p in finished.items()} == dict.fromkeys(finished, keys)
    assert finished["end"]["duration_s"] == 2.0
    assert finished["reap"]["started_at"] is not None  # the reaper's lacked it before
    assert finished["reap"]["duration_s"] == 600.0
    assert finished["cancel"]["started_at"] is None and finished["cancel"]["duration_s"] is None
    assert _one_type_per_key(list(finished.values()))
    assert {path: (p["from"], p["state"]) for path, p in finished.items()} == {
        "end": ("RUNNING", "SUCCEEDED"), "cancel": ("QUEUED", "CANCELED"),
        "reap": ("RUNNING", "CANCELED"), "abandon": ("NEEDS_REVIEW", "FAILED")}

    change_keys = {"job_id", "from", "to", "reason", "epoch", "fields"}
    assert all(set(p) == change_keys for p in changed.values()), changed
    assert {path: (p["from"], p["to"]) for path, p in changed.items()} == {
        "review": ("RUNNING", "NEEDS_REVIEW"), "resume": ("NEEDS_REVIEW", "QUEUED")}
    assert _one_type_per_key(list(changed.values()))

    (recovery,) = _payloads(store, reaped, "RUN_RECOVERED")
    assert set(recovery) == {"job_id", "old_owner", "old_epoch", "lease_until", "why", "to",
                             "recoveries", "steps_ended"}
    assert recovery["recoveries"] == 1


def test_recoveries_are_a_column_not_a_count_of_events(store: Store, clock: FakeClock) -> None:
    run_id = _claimed(store, clock)
    clock.advance(600)
    (first,) = store.reap_expired_run_leases(max_recoveries=3)
    assert first.state is RunState.QUEUED
    with store.read() as conn:
        assert conn.execute(sa.select(runs.c.recoveries).where(
            runs.c.id == run_id)).scalar_one() == 1
    # a run recovered twice already (say before this store's events were pruned): the
    # column decides, not the one RUN_RECOVERED event in the log
    with store.write() as conn:
        conn.execute(sa.update(runs).where(runs.c.id == run_id).values(recoveries=3))
    store.claim_runs(OWNER, clock.now() + timedelta(minutes=5), run_ids=[run_id])
    clock.advance(600)
    (second,) = store.reap_expired_run_leases(max_recoveries=3)
    assert second.state is RunState.NEEDS_REVIEW
    run = store.get_run(run_id)
    assert run is not None and "recovered 3 times already" in (run.reason or "")
    assert len(store.list_events(run_id=run_id, event_type="RUN_RECOVERED")) == 2


def test_the_run_events_are_built_in_one_module() -> None:
    """grep: the payloads of RUN_STATE_CHANGED, RUN_FINISHED and RUN_RECOVERED, and every
    SQL text that sets a run's state (the claim, its give-back, the batch end), are written
    in cadenza/store/run_states.py only."""
    wanted = re.compile(r"EventType\.(RUN_STATE_CHANGED|RUN_FINISHED|RUN_RECOVERED)\b"
                        r"|UPDATE runs SET state = ")
    found = sorted(str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
                   if wanted.search(path.read_text(encoding="utf-8")))
    assert found == ["store/run_states.py"], found
    assert {RunChanged, RunFinished, RunRecovery}  # the one dataclass per event type
