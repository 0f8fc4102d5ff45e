"""An idle reaper on a SQLite file reads the store once, then only after a commit: while
nothing was committed since a look that found no run RUNNING, none can be RUNNING, nor
expire. A run RUNNING keeps every round looking, so that time alone expires its lease. On
PostgreSQL every round reads."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.lifecycle import Lifecycle
from cadenza.node.reaper import Reaper
from cadenza.store import Store
from cadenza.store.boundary import NewRun

LEASE = timedelta(seconds=60)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-02-01T10:00:00+00:00")


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[Store]:
    opened = Store.open(store_url, clock=clock)
    yield opened
    opened.close()


def test_an_idle_reaper_reads_only_after_a_commit(store: Store, clock: FakeClock,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    looks = [0]
    real = store.has_running_runs

    def counting() -> bool:
        looks[0] += 1
        return real()

    monkeypatch.setattr(store, "has_running_runs", counting)
    reaper = Reaper(store, "host-a:4242:1", Lifecycle(clock), lambda: LEASE)
    sqlite = store.dialect == "sqlite"
    for _ in range(3):
        assert reaper.reap_once() == 0
    assert looks == [1 if sqlite else 3]

    # Another node claims a run: the commit makes the next round look, and the run RUNNING
    # keeps every round looking until time alone expires its lease.
    (run_id,) = store.create_runs([NewRun("j", "manual:test")])
    store.claim_runs("host-b:1:1", clock.now() + timedelta(seconds=30), run_ids=[run_id])
    assert reaper.reap_once() == 0
    clock.advance(timedelta(seconds=31))
    assert reaper.reap_once() == 1
    run = store.get_run(run_id)
    assert run is not None and run.state == RunState.QUEUED
