"""The reaper's clock check and its look at the write-ahead log (node/reaper.py,
store/maintenance.py; docs/leases.md "Whose clock decides a lease", RELIABILITY #49).

* A node whose clock differs from the store's time by more than
  ``[workers].max_clock_skew`` re-queues nothing, not even an expired lease, and says why
  once in the log and as a CLOCK_SKEW event; once its clock agrees again it reaps.
* A SQLite write-ahead log that a reader keeps from being emptied is a WAL_GROWING warning
  naming the reader's process (Linux: ``/proc/locks``), or "a reader" where the system does
  not tell.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from cadenza.clock import OffsetClock, SystemClock
from cadenza.domain.events import EventType
from cadenza.lifecycle import Lifecycle
from cadenza.node.reaper import Reaper
from cadenza.store import Store
from cadenza.store.boundary import NewRun

LEASE = timedelta(seconds=60)
SKEW = timedelta(seconds=30)


class ShiftedClock(OffsetClock):
    """An OffsetClock whose shift the test sets right again (an operator fixing NTP)."""

    def __init__(self, ahead: timedelta) -> None:
        super().__init__(datetime.now(UTC) + ahead)

    def set_ahead(self, ahead: timedelta) -> None:
        self._offset = ahead


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = Store.open(store_url, clock=SystemClock(), lease_time="database")
    yield opened
    opened.close()


def _expired_run(store: Store) -> str:
    (run_id,) = store.create_runs([NewRun("j", "manual:test")])
    store.claim_runs("host-b:1:1", store.clock.now() - timedelta(seconds=1), run_ids=[run_id])
    return run_id


def _reaper(store: Store, clock: OffsetClock) -> Reaper:
    return Reaper(store, "host-a:4242:1", Lifecycle(clock), lambda: LEASE,
                  max_skew=lambda: SKEW)


def _skew_events(store: Store) -> list[tuple[str, str]]:
    return [(e.level, e.message)
            for e in store.list_events(event_type=EventType.CLOCK_SKEW, newest_first=True)]


@pytest.mark.reliability_case(49)
def test_a_node_whose_clock_is_off_does_not_reap_and_says_why(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    run_id = _expired_run(store)
    clock = ShiftedClock(timedelta(minutes=5))
    reaper = _reaper(store, clock)
    with caplog.at_level(logging.INFO, logger="cadenza.node"):
        assert reaper.reclaim_at_start() == 0
        assert reaper.reap_once() == 0
    run = store.get_run(run_id)
    assert run is not None and run.state.value == "RUNNING"  # expired, but not taken here
    assert reaper.refused is not None and "ahead of the store's time" in reaper.refused
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "reaper not started" in errors[0]  # said once
    assert "max_clock_skew (30.0s)" in errors[0] and "5m" in errors[0]
    (event,) = _skew_events(store)
    assert event[0] == "WARNING" and "ahead of the store's time" in event[1]

    clock.set_ahead(timedelta(seconds=2))  # the clock is set right
    assert reaper.reap_once() == 1
    run = store.get_run(run_id)
    assert run is not None and run.state.value == "QUEUED"
    assert reaper.refused is None
    assert [level for level, _ in _skew_events(store)] == ["INFO", "WARNING"]


def test_a_node_behind_the_store_is_refused_too(store: Store) -> None:
    _expired_run(store)
    reaper = _reaper(store, ShiftedClock(-timedelta(minutes=2)))
    assert reaper.reap_once() == 0
    assert reaper.refused is not None and "behind the store's time" in reaper.refused


# -- the write-ahead log --------------------------------------------------------------------

READER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN")
con.execute("SELECT count(*) FROM runs").fetchone()
print("reading", flush=True)
time.sleep(120)
"""


AUTOCHECKPOINT_BYTES = 2 * 1000 * (4096 + 24)
"""A bound of the log SQLite's automatic checkpoint (1,000 pages of 4 KiB) lets grow when
no reader holds it: its pages and the frames of the transaction that passed them."""


def _fill(store: Store, runs: int) -> None:
    for _ in range(runs // 200):
        store.create_runs([NewRun("j", "manual:test", params={"pad": "x" * 400})
                           for _ in range(200)])


@pytest.mark.skipif(sys.platform == "win32", reason="a reader process holding a snapshot")
@pytest.mark.reliability_case(44)
def test_a_wal_a_reader_keeps_from_emptying_is_a_warning_naming_the_reader(
        sqlite_url: str, tmp_path: Path) -> None:
    store = Store.open(sqlite_url, lease_time="database")
    database = tmp_path / "cadenza.db"
    reader: subprocess.Popen[str] | None = None
    try:
        _fill(store, 400)
        reader = subprocess.Popen([sys.executable, "-c", READER, str(database)],
                                  stdout=subprocess.PIPE, text=True)
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        _fill(store, 4000)  # the log grows: nothing after the reader's snapshot is copied
        reaper = _reaper(store, ShiftedClock(timedelta(0)))
        warned = reaper.watch_wal(threshold=256 * 1024)
        assert warned is not None and warned.stuck
        assert warned.checkpointed < warned.frames and warned.log_bytes > 256 * 1024
        if Path("/proc/locks").exists():
            assert warned.readers is not None and any(
                f"pid {reader.pid} (" in r for r in warned.readers), warned.readers
        else:
            assert "a reader" in warned.holder
        (event,) = store.list_events(event_type=EventType.WAL_GROWING)
        assert event.level == "WARNING" and "holds an old snapshot" in event.message
        assert warned.holder in event.message
        assert reaper.watch_wal(threshold=256 * 1024) is None  # not again at once

        _stop(reader)
        reader = None
        found = store.check_wal(256 * 1024)
        assert found is not None and not found.stuck  # the checkpoint completes now
    finally:
        if reader is not None:
            _stop(reader)
        store.close()


def _stop(reader: subprocess.Popen[str]) -> None:
    reader.kill()
    reader.wait()
    if reader.stdout is not None:
        reader.stdout.close()


@pytest.mark.reliability_case(44)
def test_a_wal_below_its_threshold_is_not_looked_into(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store.open(sqlite_url) as store:
        _fill(store, 200)

        def opened() -> None:
            raise AssertionError("a WAL below its threshold was checkpointed")

        # Not looked into: no connection is taken for a checkpoint (a stat of the file
        # only), asserted as such rather than as a wall-clock bound.
        monkeypatch.setattr(store.engine, "raw_connection", opened)
        assert store.check_wal(1024 * 1024 * 1024) is None


@pytest.mark.skipif(sys.platform == "win32", reason="a reader process holding a snapshot")
@pytest.mark.reliability_case(44)
def test_a_held_wal_grows_with_the_writes_is_warned_once_and_cut_back_when_the_reader_ends(
        sqlite_url: str, tmp_path: Path) -> None:
    """What "bounded" can mean for SQLite, measured: while a reader holds an old snapshot
    the log grows with every commit (SQLite may not overwrite frames that snapshot may
    need), one warning is written, and once the reader ends the next look empties the log
    and cuts the file back to zero bytes; afterwards it stays under the threshold."""
    threshold = 256 * 1024
    store = Store.open(sqlite_url, lease_time="database")
    wal = tmp_path / "cadenza.db-wal"
    reader: subprocess.Popen[str] | None = None
    try:
        _fill(store, 400)
        store.check_wal(0)  # start from an empty log
        reader = subprocess.Popen([sys.executable, "-c", READER, str(tmp_path / "cadenza.db")],
                                  stdout=subprocess.PIPE, text=True)
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        sizes = [wal.stat().st_size]
        reaper = _reaper(store, ShiftedClock(timedelta(0)))
        warnings = []
        for _ in range(3):
            _fill(store, 2000)
            sizes.append(wal.stat().st_size)
            reaper._wal_checked = None  # look now, as a minute later
            warnings.append(reaper.watch_wal(threshold=threshold))
        growth = [b - a for a, b in pairwise(sizes)]
        # Linear growth: every round of writes adds about as much as the first one did.
        assert min(growth) > 0.8 * max(growth) > 0, sizes
        assert sizes[-1] > 3 * threshold
        assert warnings[0] is not None and warnings[1:] == [None, None]  # warned once
        assert len(store.list_events(event_type=EventType.WAL_GROWING)) == 1

        _stop(reader)
        reader = None
        reaper._wal_checked = None
        assert reaper.watch_wal(threshold=threshold) is None  # nothing stuck any more
        assert wal.stat().st_size == 0  # the emptied log is cut back
        _fill(store, 400)
        found = store.check_wal(0)
        assert found is not None and not found.stuck and found.truncated
        # The same writes as while held: SQLite's automatic checkpoint (every 1,000 pages)
        # now completes and the log restarts from its beginning, so the file stays near
        # 1,000 pages however much is written.
        _fill(store, 6000)
        assert wal.stat().st_size <= AUTOCHECKPOINT_BYTES < sizes[-1]
        assert len(store.list_events(event_type=EventType.WAL_GROWING)) == 1
    finally:
        if reader is not None:
            _stop(reader)
        store.close()
