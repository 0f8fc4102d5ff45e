"""The run log keeps at most run_log_lines lines of step code; the executor's own are kept."""

from __future__ import annotations

from datetime import UTC, datetime

from cadenza.executor.runlog import RunLog
from cadenza.store.boundary import LogLine

NOW = datetime(2027, 3, 1, tzinfo=UTC)


def test_lines_of_step_code_past_the_cap_are_counted_not_kept() -> None:
    log = RunLog("INFO", lambda: NOW, max_lines=100)
    ctx_log = log.logger("talk")
    for i in range(250):
        ctx_log.info("line %d", i)
    log.add_line(LogLine(NOW, "INFO", "talk", "from a child"))  # a child's line counts too
    log.add("INFO", "succeeded: in 0.01s", "talk")  # the executor's own: always kept
    lines, _ = log.take()
    assert [line.message for line in lines[:100]] == [f"line {i}" for i in range(100)]
    assert [line.message for line in lines[100:]] == ["succeeded: in 0.01s"]
    assert log.take_dropped() == 151
    assert log.take_dropped() == 0


def test_lines_below_the_level_do_not_count() -> None:
    log = RunLog("WARNING", lambda: NOW, max_lines=100)
    for i in range(500):
        log.logger("talk").info("quiet %d", i)
    log.logger("talk").warning("loud")
    lines, _ = log.take()
    assert [line.message for line in lines] == ["loud"]
    assert log.dropped == 0
