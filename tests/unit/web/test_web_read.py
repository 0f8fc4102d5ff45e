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


def _at_read(dialect: str, *, allowed: bool) -> tuple[int, list[int], Any]:
    """An AtRead's check and reader: the threads they ran on, and the outcome."""
    from fastapi import HTTPException

    from cadenza.web.auth import AtRead

    store: Any = SimpleNamespace(dialect=dialect)
    web = WebContext(store, None, FakeClock("2027-01-01T00:00:00+00:00"))
    request: Any = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(cadenza=web)))
    threads: list[int] = []

    def check(_: Any) -> Any:
        threads.append(threading.get_ident())
        if not allowed:
            raise HTTPException(403, "this needs the viewer role")
        return "principal"

    def reader(principal: Any) -> Any:
        threads.append(threading.get_ident())
        return principal

    async def main() -> tuple[int, Any]:
        try:
            outcome: Any = await AtRead(request, check).read(reader)
        except HTTPException as exc:
            outcome = exc.status_code
        return threading.get_ident(), outcome

    loop_thread, outcome = asyncio.run(main())
    return loop_thread, threads, outcome


def test_at_read_checks_then_reads_in_one_worker_thread_on_postgresql() -> None:
    loop_thread, threads, outcome = _at_read("postgresql", allowed=True)
    assert outcome == "principal"  # the reader gets what the check returned
    assert len(threads) == 2 and threads[0] == threads[1] != loop_thread


def test_at_read_checks_then_reads_on_the_event_loop_on_sqlite() -> None:
    loop_thread, threads, outcome = _at_read("sqlite", allowed=True)
    assert outcome == "principal" and threads == [loop_thread, loop_thread]


def test_a_refused_check_never_reads() -> None:
    for dialect in ("sqlite", "postgresql"):
        _, threads, outcome = _at_read(dialect, allowed=False)
        assert outcome == 403
        assert len(threads) == 1  # the check ran, the reader did not
