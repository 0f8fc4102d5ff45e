"""SQLite specifics (SPEC §18, RELIABILITY #43, #45): pragmas, BEGIN IMMEDIATE, busy writers,
and the refusal of a network file system."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.domain.errors import UnsafeStoreLocation
from cadenza.store import Store, location
from cadenza.store.engine import sqlite_path
from cadenza.store.location import MountEntry


def _file(url: str) -> Path:
    path = sqlite_path(sa.make_url(url))
    assert path is not None
    return path


@pytest.mark.parametrize(("sync", "code"), [("NORMAL", 1), ("FULL", 2), ("full", 2)])
@pytest.mark.reliability_case(43)
def test_pragmas_are_set_on_every_connection(sqlite_url: str, sync: str, code: int) -> None:
    store = Store.open(sqlite_url, sqlite_synchronous=sync)
    try:
        for open_transaction in (store.write, store.read):
            with open_transaction() as conn:
                pragma = {
                    name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                    for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
                }
            assert pragma == {
                "journal_mode": "wal",
                "synchronous": code,
                "foreign_keys": 1,
                "busy_timeout": 10_000,
            }
    finally:
        store.close()


@pytest.mark.reliability_case(43)
def test_writes_begin_immediate_and_reads_begin_deferred(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", record)
    other = sqlite3.connect(_file(sqlite_url), timeout=0, isolation_level=None)
    try:
        with store.write():
            # The lock is taken by BEGIN itself, before the block has written anything:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        with store.read() as conn:
            conn.exec_driver_sql("SELECT 1")
            other.execute("BEGIN IMMEDIATE")  # a reader does not block a writer (WAL)
            other.execute("ROLLBACK")
    finally:
        other.close()
        sa.event.remove(store.engine, "before_cursor_execute", record)
        store.close()
    assert statements[0] == "BEGIN IMMEDIATE"
    assert statements[1:3] == ["BEGIN", "SELECT 1"]


@pytest.mark.reliability_case(43)
def test_two_writers_wait_for_each_other_instead_of_failing(
    sqlite_url: str, clock: FakeClock
) -> None:
    store = Store.open(sqlite_url, clock=clock)
    holding = threading.Event()

    def slow_writer() -> None:
        with store.write() as conn:
            store.append_event("CONFIG_CHANGED", "slow", conn=conn)
            holding.set()
            time.sleep(1.0)  # hold the write lock well past any deferred-BEGIN failure

    def fast_writers(n: int) -> int:
        holding.wait(timeout=10)
        run_id = store.create_run(f"job-{n}", "manual")
        for i in range(50):
            store.append_event("CONFIG_CHANGED", f"{n}-{i}")
        return 0 if run_id is None else 1

    try:
        with ThreadPoolExecutor(5) as pool:
            slow = pool.submit(slow_writer)
            created = sum(pool.map(fast_writers, range(4)))
            slow.result()
        assert created == 4
        assert len(store.list_events(limit=10_000)) == 1 + 4 * (1 + 50)
    finally:
        store.close()


@pytest.mark.reliability_case(43)
def test_a_second_process_style_connection_waits_too(sqlite_url: str) -> None:
    """A writer outside this engine (e.g. `cadenza backup`) holds the lock: we wait, not fail."""
    store = Store.open(sqlite_url)
    other = sqlite3.connect(_file(sqlite_url), isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.5, lambda: other.execute("COMMIT"))
        release.start()
        started = time.monotonic()
        assert store.create_run("j", "manual")
        assert time.monotonic() - started >= 0.4
        release.join()
    finally:
        other.close()
        store.close()


@pytest.mark.reliability_case(45)
def test_a_network_data_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No NFS server here: the mount table is replaced to say the data dir is on nfs4."""
    (tmp_path / "share").mkdir()
    data = tmp_path / "share" / "data"
    mounts = [
        MountEntry("/dev/vda", "/", "ext4"),
        MountEntry("nas:/export", (tmp_path / "share").as_posix(), "nfs4"),
    ]
    monkeypatch.setattr(location, "_read_mount_table", lambda: mounts)
    with pytest.raises(UnsafeStoreLocation, match="nfs4 nas:/export"):
        Store.open(f"sqlite:///{(data / 'cadenza.db').as_posix()}")
    assert not data.exists()
    Store.open(f"sqlite:///{(tmp_path / 'local' / 'cadenza.db').as_posix()}").close()


def test_an_in_memory_store_works(clock: FakeClock) -> None:
    store = Store.open("sqlite://", clock=clock)
    try:
        run_id = store.create_run("j", "manual")
        assert run_id and store.get_run(run_id) is not None
    finally:
        store.close()
