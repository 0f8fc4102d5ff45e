"""The claimer process writes a staged burst's chunks after the node's first (SQLite files).

A real child process (``multiprocessing`` spawn, executor/claimer.py) with its own
connection to the test's SQLite file; the node on a FakeClock. These tests show that the
chunks it writes are the node's (same rows, events and log lines, each run claimed and
entered once), that it stops as soon as anything changed since the node's previous chunk
(and the node then checks everything again), and that a node whose claimer is gone claims
in-process. Two nodes with claimer processes racing for one due time: in
test_staged_burst.py (its two-node test, parametrized).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from test_staged_burst import (
    FIRE,
    _job,
    assert_canceled_and_rest_ran,
    assert_claimed_at_fire_and_ran,
    assert_ran_once,
    drain,
    node_home,
    record_ahead,
    running_node,
    spy_claims,
    stage_now,
)
from tests.support.store_helpers import claims

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.executor import staging
from cadenza.executor.claimer import Chunk, Claimer, Stopped
from cadenza.executor.staging import Stage
from cadenza.node import Node
from cadenza.node.dispatcher import Dispatcher
from cadenza.store import Store
from cadenza.store.boundary import NewRun

JOBS = 60  # the node's first chunk (16), then the claimer's: 32 and 12


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "calls.txt"
    path.touch()
    monkeypatch.setenv("CZ_STAGED_CALLS", str(path))
    return path


@contextmanager
def staged(tmp_path: Path, sqlite_url: str) -> Iterator[tuple[Node, Store, FakeClock, Stage]]:
    """A node with a ready claimer process whose fires of FIRE (JOBS of them) are staged and
    handed to the claimer."""
    home = node_home(tmp_path, sqlite_url, jobs=JOBS)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=JOBS, claimer=True) as (node, store):
        assert node.claimer is not None
        record_ahead(node, clock, JOBS)
        stage = stage_now(node)
        assert stage.token != 0 and len(stage) == JOBS
        yield node, store, clock, stage


def test_the_claimer_writes_the_chunks_after_the_first_as_the_node_would(
    tmp_path: Path, sqlite_url: str, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with staged(tmp_path, sqlite_url) as (node, store, clock, stage):
        assert node.claimer is not None
        sizes = spy_claims(monkeypatch, store)  # the node's own chunks

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert node.dispatcher._stage is None and stage.dropped is None
        assert stage.claimed == JOBS and stage.chunks == 3
        assert sizes == [staging.CHUNKS[0]]  # the first chunk in the node...
        assert node.claimer.chunks == 2  # ...then 32 and 12 in the claimer
        runs = assert_claimed_at_fire_and_ran(node, store, clock, calls, JOBS)
        for run in runs:  # the claimer's rows are the node's: owner, step run id
            (step,) = store.list_step_runs(run.id)
            claim = claims(store, run.id)
            assert [e.payload["fields"]["lease_owner"] for e in claim] == [node.owner]
            (started,) = store.list_events(run_id=run.id, event_type="STEP_STARTED")
            assert started.payload["step_run_id"] == step.id


def test_a_cancel_after_the_first_chunk_stops_the_claimer_and_the_node_checks_again(
    tmp_path: Path, sqlite_url: str, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with staged(tmp_path, sqlite_url) as (node, store, clock, stage):
        assert node.claimer is not None
        victim = stage.order[staging.CHUNKS[0]].run_id  # the first of the claimer's chunk
        real = Dispatcher._claim_remote

        def cancel_first(self: Dispatcher, stage: Any, limit: int) -> Any:
            # Another writer (`cadenza runs cancel`), after the node's first chunk and
            # before the claimer's.
            assert store.request_cancel(victim, "tester").canceled
            return real(self, stage, limit)

        monkeypatch.setattr(Dispatcher, "_claim_remote", cancel_first)
        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert node.claimer.chunks == 0  # the runs' version moved: it wrote nothing
        assert node.claimer.broken is None  # and stays usable
        assert stage.claimed == staging.CHUNKS[0]
        assert stage.dropped == "the runs due changed since they were staged (0 more, 1 gone)"
        assert_canceled_and_rest_ran(node, store, clock, calls, victim, JOBS - 1)


def test_a_change_that_writes_no_event_still_stops_the_claimer(
    tmp_path: Path, sqlite_url: str, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staged claim's check is the runs' version counter (bumped by triggers), not the
    audit log: a write to a run that records no event is noticed all the same."""
    with staged(tmp_path, sqlite_url) as (node, store, clock, stage):
        assert node.claimer is not None
        other = stage.order[-1].run_id
        real = Dispatcher._claim_remote
        checks: list[int] = []
        due = store.due_queued_ids

        def counted(*args: Any, **kwargs: Any) -> Any:
            checks.append(1)
            return due(*args, **kwargs)

        def touch(self: Dispatcher, stage: Any, limit: int) -> Any:
            logged = store.list_events(run_id=other)
            with store.write() as conn:  # a raw write of a column admission reads
                conn.execute(sa.text("UPDATE runs SET priority = priority WHERE id = :id"),
                             {"id": other})
            assert store.list_events(run_id=other) == logged  # no event
            monkeypatch.setattr(store, "due_queued_ids", counted)
            return real(self, stage, limit)

        monkeypatch.setattr(Dispatcher, "_claim_remote", touch)
        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert node.claimer.chunks == 0 and node.claimer.broken is None
        assert checks  # the node's next chunk read the runs due again...
        assert stage.dropped is None and stage.claimed == JOBS  # ...found them unchanged
        runs = drain([node], store, clock)
        assert len(runs) == JOBS
        assert_ran_once(store, runs, calls)


def test_a_node_whose_claimer_died_claims_in_process(
    tmp_path: Path, sqlite_url: str, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with staged(tmp_path, sqlite_url) as (node, store, clock, stage):
        claimer = node.claimer
        assert claimer is not None
        claimer._process.kill()  # killed (a crash, the OOM killer) before the due time
        claimer._process.join(10)
        sizes = spy_claims(monkeypatch, store)

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert claimer.broken is not None and claimer.chunks == 0
        assert stage.dropped is None and stage.claimed == JOBS
        assert sizes == [16, 32, 12]  # all in the node
        runs = drain([node], store, clock)
        assert len(runs) == JOBS
        assert_ran_once(store, runs, calls)
        # Given up for good: the next stages are not handed to it.
        assert claimer.submit([], node.owner, FIRE) == 0


def test_the_claimer_claims_nothing_when_the_mark_is_not_the_one_given(
    tmp_path: Path, sqlite_url: str
) -> None:
    """Driven directly: a stage handed over, then claimed with a stale version, a wrong
    token, and the right version."""
    home = node_home(tmp_path, sqlite_url, jobs=0, extra=_job("solo", schedule=False))
    clock = FakeClock(FIRE)
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    claimer = Claimer(sqlite_url, "NORMAL")
    claimer.start()
    try:
        assert claimer.ready(60), claimer.broken
        node = Node(home, config, store, clock=clock, workers=4, scheduler=False,
                    claimer=False)
        executor = node.holder.current.executor
        ids = store.create_runs([NewRun("solo", "manual:test", not_before=FIRE)
                                 for _ in range(3)])
        runs = store.fresh_queued_runs(ids)
        until = FIRE + timedelta(minutes=5)
        staged = [executor.stage(run, FIRE, until) for run in runs]
        starts = [s.start for s in staged if s is not None]
        assert len(starts) == 3
        token = claimer.submit(starts, executor.owner, until)
        with store.write() as conn:
            version = store.runs_version(conn)
        assert version is not None

        def claim(token: int, version: int) -> list[Chunk | Stopped]:
            return list(claimer.claim(token, ids, version, 10, [2], clock))

        (stopped,) = claim(token, version - 1)
        assert isinstance(stopped, Stopped) and "changed" in stopped.why
        (stopped,) = claim(token + 1, version)
        assert isinstance(stopped, Stopped)
        assert {r.state for r in store.list_runs(limit=10)} == {RunState.QUEUED}

        first, second = claim(token, version)
        assert isinstance(first, Chunk) and isinstance(second, Chunk)
        assert (first.size, second.size) == (2, 1)
        assert set(first.taken) | set(second.taken) == set(ids)
        assert first.at == FIRE and second.version > first.version > version
        for run in store.list_runs(limit=10):
            assert (run.state, run.lease_epoch, run.lease_owner) == (
                RunState.RUNNING, 1, executor.owner)
        # Claimed already: a second go takes nothing (the claim stays conditional).
        (again, stopped) = claim(token, second.version)
        assert isinstance(again, Chunk) and again.taken == {}
        assert isinstance(stopped, Stopped) and "changed before their claim" in stopped.why

        # A claim whose reports were not read to the end: the next claim skips them.
        more = store.create_runs([NewRun("solo", "manual:test", not_before=FIRE)
                                  for _ in range(3)])
        fresh = [executor.stage(run, FIRE, until) for run in store.fresh_queued_runs(more)]
        token = claimer.submit([s.start for s in fresh if s is not None], executor.owner,
                               until)
        with store.write() as conn:
            version = store.runs_version(conn)
        assert version is not None
        reports = claimer.claim(token, more, version, 10, [2], clock)
        first = next(reports)
        assert isinstance(first, Chunk) and first.size == 2
        del reports  # its second chunk and its end are left unread in the pipe
        (stopped,) = list(claimer.claim(token, more, version, 10, [2], clock))
        assert isinstance(stopped, Stopped) and "changed" in stopped.why
        assert {r.state for r in store.list_runs(limit=10)} == {RunState.RUNNING}
        node.stop(timeout=5)
    finally:
        claimer.close()
        store.close()


def test_a_node_has_a_claimer_only_on_a_sqlite_file_with_many_workers(
    tmp_path: Path, sqlite_url: str
) -> None:
    home = node_home(tmp_path, sqlite_url, jobs=1)
    config = home.load_config()
    store = home.open_store(config)
    try:
        def claimer_of(workers: int, wanted: bool | None = None) -> object:
            node = Node(home, config, store, clock=FakeClock(FIRE), workers=workers,
                        scheduler=False, claimer=wanted)
            return node.claimer

        assert claimer_of(4) is None  # the default [workers] count
        assert claimer_of(64) is not None
        assert claimer_of(64, False) is None
        assert claimer_of(4, True) is not None
    finally:
        store.close()
    memory = Store.open("sqlite://")
    try:
        node = Node(home, config, memory, clock=FakeClock(FIRE), workers=64,
                    scheduler=False, claimer=True)
        assert node.claimer is None  # another process cannot see an in-memory database
    finally:
        memory.close()

