"""``WebContext.read``: the hot reads of the API and the runs page run on the event loop on
SQLite (no hand-off to a worker thread, docs/api.md) and in a worker thread on PostgreSQL
(whose round trips must not hold the loop)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

from cadenza.clock import FakeClock
from cadenza.web.auth import WebContext


def _thread_of_read(dialect: str) -> tuple[int, int]:
    store: Any = SimpleNamespace(dialect=dialect)
    web = WebContext(store, None, FakeClock("2027-01-01T00:00:00+00:00"))

    async def main() -> tuple[int, int]:
        return threading.get_ident(), await web.read(threading.get_ident)

    return asyncio.run(main())


def test_sqlite_reads_on_the_event_loop() -> None:
    loop_thread, read_thread = _thread_of_read("sqlite")
    assert read_thread == loop_thread


def test_postgresql_reads_in_a_worker_thread() -> None:
    loop_thread, read_thread = _thread_of_read("postgresql")
    assert read_thread != loop_thread
