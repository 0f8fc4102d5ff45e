"""A SQLite file store copies its write-ahead log into the database on a thread of its own,
every few commits, instead of in the commit that passes ``wal_autocheckpoint``
(cadenza.store.wal): the writer's path no longer copies pages and syncs files."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cadenza.domain.events import EventType
from cadenza.store import Store
from cadenza.store.wal import CHECKPOINT_COMMITS

WAIT = 10.0
"""Seconds a test waits for the checkpoint thread (it takes milliseconds)."""


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "cadenza.db"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{db.as_posix()}")
    try:
        yield opened
    finally:
        opened.close()


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cadenza-wal-checkpoint"]


def events_in_the_database_file(db: Path) -> int:
    """The events the database file itself holds, the ``-wal`` file left unread
    (``immutable=1``): what a checkpoint copied, not what is only in the log."""
    conn = sqlite3.connect(f"file:{db.as_posix()}?mode=ro&immutable=1", uri=True)
    try:
        if conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'event_log'"
                        ).fetchone()[0] == 0:
            return 0  # not even the schema was copied yet
        return int(conn.execute(
            "SELECT count(*) FROM event_log WHERE event_type = 'RETENTION_PRUNED'"
        ).fetchone()[0])
    finally:
        conn.close()


def write_events(store: Store, n: int) -> None:
    for k in range(n):
        store.append_event(EventType.RETENTION_PRUNED, f"event {k}")


def test_every_few_commits_a_thread_copies_the_log_into_the_database_file(
        store: Store, db: Path) -> None:
    wal = store.wal
    assert wal is not None
    before = len(checkpoint_threads())
    to_go = CHECKPOINT_COMMITS - store.writes_ok % CHECKPOINT_COMMITS  # opening wrote too
    write_events(store, to_go - 1)
    # Fewer commits than a checkpoint waits for: no thread yet, and the events are only
    # in the log (far below wal_autocheckpoint's 1,000 pages, so no commit copied them).
    assert wal.attempts == 0
    assert len(checkpoint_threads()) == before
    assert events_in_the_database_file(db) == 0

    write_events(store, 1)
    assert wal.wait_for(1, WAIT)
    assert (wal.checkpoints, wal.failures) == (1, 0)
    assert len(checkpoint_threads()) == before + 1
    assert events_in_the_database_file(db) == to_go

    write_events(store, CHECKPOINT_COMMITS)
    assert wal.wait_for(2, WAIT)
    assert events_in_the_database_file(db) == to_go + CHECKPOINT_COMMITS


def test_a_store_that_only_reads_starts_no_checkpoint_thread(store: Store) -> None:
    before = len(checkpoint_threads())
    for _ in range(3 * CHECKPOINT_COMMITS):
        store.list_events(limit=1)
    assert store.wal is not None and store.wal.attempts == 0
    assert len(checkpoint_threads()) == before


def test_closing_the_store_stops_its_checkpoint_thread(db: Path) -> None:
    store = Store.open(f"sqlite:///{db.as_posix()}")
    write_events(store, CHECKPOINT_COMMITS)
    assert store.wal is not None and store.wal.wait_for(1, WAIT)
    thread = next(t for t in checkpoint_threads() if t.is_alive())
    store.close()
    thread.join(WAIT)
    assert not thread.is_alive()


def test_a_memory_store_and_postgresql_have_none(pg_url: str) -> None:
    memory = Store.open("sqlite://")
    try:
        assert memory.wal is None
    finally:
        memory.close()
    pg = Store.open(pg_url)
    try:
        assert pg.wal is None
    finally:
        pg.close()


class _Broken:
    def raw_connection(self) -> None:
        raise OSError(28, "No space left on device")


def test_a_failing_checkpoint_is_logged_once_and_no_writer_sees_it(
        store: Store, db: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    wal = store.wal
    assert wal is not None
    engine = wal.engine
    monkeypatch.setattr(wal, "engine", _Broken())
    with caplog.at_level(logging.INFO, logger="cadenza.store"):
        for tried in (1, 2, 3):  # no write raises; a wake while one runs is not queued
            write_events(store, CHECKPOINT_COMMITS - store.writes_ok % CHECKPOINT_COMMITS)
            assert wal.wait_for(tried, WAIT)
        assert (wal.checkpoints, wal.failures) == (0, 3)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "could not be copied into its database file" in warnings[0].getMessage()
        assert "No space left on device" in warnings[0].getMessage()
        assert str(db) in warnings[0].getMessage()

        monkeypatch.setattr(wal, "engine", engine)
        write_events(store, CHECKPOINT_COMMITS)
        assert wal.wait_for(4, WAIT)
        assert wal.checkpoints == 1
        assert any("in the background again" in r.getMessage() for r in caplog.records)
    written = len(store.list_events(event_type=EventType.RETENTION_PRUNED, limit=1000))
    assert written >= 3 * CHECKPOINT_COMMITS + 1
    assert events_in_the_database_file(db) == written
