"""Races on one store: threads and separate processes; exactly one wins each time (SPEC §19).

Processes are real interpreters started with ``subprocess`` (the same on Windows), each with
its own engine and pool, so SQLite file locks and PostgreSQL row locks do the arbitration.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from tests.support.line_worker import LineWorker

from cadenza.clock import FakeClock
from cadenza.domain.events import EventType
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store import migrate as migrations

WORKER = Path(__file__).with_name("store_race_worker.py")
ROUNDS = 20


class Worker(LineWorker):
    """One store_race_worker.py process, spoken to line by line."""

    def __init__(self, url: str) -> None:
        super().__init__([sys.executable, str(WORKER), url])


def _start(url: str, count: int) -> list[Worker]:
    workers: list[Worker] = []
    try:
        workers.extend(Worker(url) for _ in range(count))
        for worker in workers:
            assert worker.answer() == "ready"
    except BaseException:
        for worker in workers:
            worker.close()
        raise
    return workers


@pytest.mark.reliability_case(46)
def test_processes_race_for_one_claim_and_one_fire(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    workers = _start(store_url, 3)
    try:
        for _ in range(ROUNDS):
            run_id = store.create_run("race", "manual")
            assert run_id
            for worker in workers:
                worker.send(f"claim {run_id}")
            answers = [worker.answer() for worker in workers]
            assert answers.count("1") == 1, answers
            run = store.get_run(run_id)
            assert run is not None and (run.state, run.lease_epoch) == (RunState.RUNNING, 1)
            changes = store.list_events(run_id=run_id, event_type=EventType.RUN_STATE_CHANGED)
            assert len(changes) == 1
        for n in range(ROUNDS):
            at = clock.now() + timedelta(minutes=n)
            for worker in workers:
                worker.send(f"fire nightly {at.isoformat()}")
            answers = [worker.answer() for worker in workers]
            assert sum(answer != "-" for answer in answers) == 1, answers
    finally:
        for worker in workers:
            worker.close()
    assert len(store.list_runs(job="nightly", limit=100)) == ROUNDS
    assert len(store.list_events(event_type=EventType.RUN_CREATED, limit=10_000)) == 2 * ROUNDS


@pytest.mark.reliability_case(56)
def test_processes_opening_a_fresh_database_together_migrate_once(store_url: str) -> None:
    workers = _start(store_url, 3)
    for worker in workers:
        worker.close()
    store = Store.open(store_url, migrate=False)
    try:
        with store.read() as conn:
            assert migrations.current_revisions(conn) == (migrations.head_revision(),)
    finally:
        store.close()


@pytest.mark.reliability_case(46)
def test_threads_race_for_one_claim_one_cancel_and_one_fire(store: Store,
                                                             clock: FakeClock) -> None:
    threads = 6
    run_ids = [store.create_run("race", "manual") for _ in range(ROUNDS)]
    to_cancel = [store.create_run("cancel", "manual") for _ in range(ROUNDS)]
    fires = [clock.now() + timedelta(minutes=n) for n in range(ROUNDS)]
    barrier = threading.Barrier(threads)
    until = clock.now() + timedelta(minutes=5)

    def contender(n: int) -> tuple[list[bool], list[bool], list[bool]]:
        won, canceled, created = [], [], []
        for run_id in run_ids:
            assert run_id
            barrier.wait(timeout=30)
            won.append(bool(store.claim_runs(f"thread-{n}", until, run_ids=[run_id])))
        for run_id in to_cancel:
            assert run_id
            barrier.wait(timeout=30)
            canceled.append(store.transition_run(run_id, RunState.CANCELED, actor=f"t{n}"))
        for at in fires:
            barrier.wait(timeout=30)
            created.append(
                store.create_run("nightly", "scheduled", schedule="main", scheduled_for=at)
                is not None
            )
        return won, canceled, created

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(contender, range(threads)))
    for n in range(ROUNDS):
        assert sum(won[n] for won, _, _ in results) == 1
        assert sum(canceled[n] for _, canceled, _ in results) == 1
        assert sum(created[n] for _, _, created in results) == 1
    for run_id in to_cancel:
        assert run_id
        assert len(store.list_events(run_id=run_id, event_type=EventType.RUN_FINISHED)) == 1
    assert all(r.lease_epoch == 1 for r in store.list_runs(job="race", limit=100))
