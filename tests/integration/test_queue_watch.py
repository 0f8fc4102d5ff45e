"""An idle node's poll (``Store.queue_watch``): on a SQLite file it skips the read of the
queue while nothing was committed since the read that found no queued run, and reads again
after any commit, of this process or another; on PostgreSQL every poll reads."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from cadenza.clock import FakeClock
from cadenza.store import Store
from cadenza.store.admission import QueueWatch
from cadenza.store.boundary import NewRun
from cadenza.store.engine import sqlite_path


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store.open(store_url, clock=FakeClock("2027-01-01T00:00:00+00:00"))
    yield s
    s.close()


def _counted(store: Store) -> tuple[QueueWatch, list[int]]:
    looks = [0]

    def look() -> bool:
        looks[0] += 1
        return store.has_queued_runs()

    path = sqlite_path(store.engine.url) if store.dialect == "sqlite" else None
    return QueueWatch(look, path), looks


def test_the_poll_reads_the_queue_only_after_a_commit(store: Store) -> None:
    watch, looks = _counted(store)
    sqlite = store.dialect == "sqlite"
    try:
        assert watch.any_queued() is False and looks == [1]
        for _ in range(3):
            assert watch.any_queued() is False
        assert looks == [1 if sqlite else 4]  # nothing committed: no read on SQLite

        (run_id,) = store.create_runs([NewRun("j", "manual:test")])
        assert watch.any_queued() is True
        assert watch.any_queued() is True  # while a run is queued, every poll reads
        seen = looks[0]
        store.request_cancel(run_id, "test")
        assert watch.any_queued() is False and looks[0] == seen + 1
        assert watch.any_queued() is False and looks[0] == seen + (1 if sqlite else 2)
    finally:
        watch.close()


def test_a_run_queued_by_another_process_is_seen_at_the_next_poll(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    watch = store.queue_watch()
    try:
        assert watch.any_queued() is False and watch.any_queued() is False
        code = ("import sys; from cadenza.store import Store; "
                "from cadenza.store.boundary import NewRun; s = Store.open(sys.argv[1]); "
                "s.create_runs([NewRun('j', 'manual:cli')]); s.close()")
        subprocess.run([sys.executable, "-c", code, sqlite_url], check=True, timeout=60)
        assert watch.any_queued() is True
    finally:
        watch.close()
        store.close()


def test_an_in_memory_store_reads_at_every_poll() -> None:
    looks: list[bool] = []

    def look() -> bool:
        looks.append(False)
        return False

    watch = QueueWatch(look, None)
    assert watch.any_queued() is False and watch.any_queued() is False
    assert len(looks) == 2
    watch.close()
