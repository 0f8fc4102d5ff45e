"""A run's log as a reader sees it: the lines it wrote and its audit events, merged by time,
read in pages with a cursor that never skips nor repeats (``Store.run_log``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from tests.support.store_helpers import append_log

from cadenza.audit import Redactor
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.records import LogCursor


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-03-01T08:00:00+00:00")


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[Store]:
    opened = Store.open(store_url, clock=clock, redactor=Redactor(["s3cr3t-value"]))
    yield opened
    opened.close()


def _a_run_with_lines_and_events(store: Store, clock: FakeClock) -> str:
    run_id = store.create_run("job", "manual:test")  # RUN_CREATED at 08:00:00
    assert run_id is not None
    for k in range(5):
        clock.advance(timedelta(seconds=1))
        append_log(store, run_id, "DEBUG" if k % 2 else "INFO", f"line {k} s3cr3t-value")
    clock.advance(timedelta(seconds=1))
    store.transition_run(run_id, RunState.CANCELED, reason="stopped")  # RUN_FINISHED
    return run_id


def test_lines_and_events_merge_by_time(store: Store, clock: FakeClock) -> None:
    run_id = _a_run_with_lines_and_events(store, clock)
    log = store.run_log(run_id)
    assert [line.event or line.message for line in log] == [
        "RUN_CREATED", "line 0 ***", "line 1 ***", "line 2 ***", "line 3 ***", "line 4 ***",
        "RUN_FINISHED"]
    assert [line.ts for line in log] == sorted(line.ts for line in log)
    assert log[-1].message == "run of job finished CANCELED: stopped"
    # The level filter applies to both; each entry's cursor covers what came before it.
    assert [line.event or line.message
            for line in store.run_log(run_id, min_level="INFO")] == [
        "RUN_CREATED", "line 0 ***", "line 2 ***", "line 4 ***", "RUN_FINISHED"]
    assert str(log[0].cursor) == log[0].id and log[0].cursor.line == 0
    assert log[-1].cursor.line == log[-2].cursor.line


@pytest.mark.parametrize("page", [1, 2, 3])
def test_pages_from_each_cursor_miss_nothing_and_repeat_nothing(store: Store,
                                                               clock: FakeClock,
                                                               page: int) -> None:
    run_id = _a_run_with_lines_and_events(store, clock)
    whole = [(line.event, line.message) for line in store.run_log(run_id)]
    read: list[tuple[str | None, str]] = []
    after = None
    for _ in range(50):
        got = store.run_log(run_id, after=after, limit=page)
        if not got:
            break
        read += [(line.event, line.message) for line in got]
        after = got[-1].cursor
    assert read == whole


def test_a_cursor_reads_from_its_text() -> None:
    assert LogCursor.parse("12.40") == LogCursor(12, 40)
    assert LogCursor.parse("7") == LogCursor(7, 0)  # a page opened before the merge
    for bad in ("", "x", "1.2.3", "-1", "1." + "9" * 19, None):
        assert LogCursor.parse(bad) == LogCursor()
    assert str(LogCursor(3, 9)) == "3.9"
