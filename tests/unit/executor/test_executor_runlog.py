"""The buffered run log: levels kept at the source, formatting, abandoned steps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cadenza.executor.runlog import RunLog, format_message, level_rank
from cadenza.store.boundary import EventSpec

NOW = datetime(2027, 1, 1, tzinfo=UTC)


def _log(level: str) -> RunLog:
    return RunLog(level, lambda: NOW)


@pytest.mark.parametrize(("level", "kept"), [
    ("DEBUG", ["DEBUG", "INFO", "WARNING", "ERROR"]),
    ("INFO", ["INFO", "WARNING", "ERROR"]),
    ("WARNING", ["WARNING", "ERROR"]),
])
def test_the_run_level_decides_what_is_kept(level: str, kept: list[str]) -> None:
    log = _log(level)
    ctx_log = log.logger("step")
    ctx_log.debug("d")
    ctx_log.info("i")
    ctx_log.warning("w")
    ctx_log.error("e")
    lines, _ = log.take()
    assert [line.level for line in lines] == kept
    assert all(line.step == "step" and line.ts == NOW for line in lines)
    assert log.take() == ([], [])


def test_messages_format_like_logging_and_never_fail() -> None:
    assert format_message("%s rows in %.1fs", (3, 0.25)) == "3 rows in 0.2s"
    assert format_message("100% done", ()) == "100% done"
    assert format_message("%d items", ("x",)) == "%d items ('x',)"
    # Not cut here: the store cuts after redaction (a cut here could split a secret).
    assert format_message("x" * 70_000, ()) == "x" * 70_000
    # Past 1 MiB, cut at the next blank (never inside a word that may be a secret).
    huge = "y" * (1 << 20) + "Kq7-Zx91-Lm3P-w8Rt tail " + "z" * 100
    cut = format_message(huge, ())
    assert cut == "y" * (1 << 20) + "Kq7-Zx91-Lm3P-w8Rt... [cut: 1048700 characters]"


def test_a_closed_step_writes_nothing_more() -> None:
    log = _log("INFO")
    log.logger("slow").info("before")
    log.close_step("slow")
    log.logger("slow").info("after the deadline")
    log.event(EventSpec("HTTP_REQUEST", "late"), "slow")
    log.logger(None).info("the run goes on")
    lines, events = log.take()
    assert [line.message for line in lines] == ["before", "the run goes on"]
    assert events == []


def test_restore_puts_lines_back_first() -> None:
    log = _log("INFO")
    log.add("INFO", "one")
    taken = log.take()
    log.add("INFO", "two")
    log.restore(*taken)
    assert [line.message for line in log.take()[0]] == ["one", "two"]


def test_levels_and_is_enabled_for() -> None:
    assert level_rank("debug") < level_rank("INFO") < level_rank("WARNING")
    with pytest.raises(ValueError, match="unknown log level"):
        level_rank("LOUD")
    ctx_log = _log("WARNING").logger("s")
    assert ctx_log.isEnabledFor(30) and not ctx_log.isEnabledFor("INFO")
