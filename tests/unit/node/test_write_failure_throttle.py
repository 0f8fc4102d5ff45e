"""A node's log during a full disk: one line a minute per kind of write failure, on the
node's clock (a FakeClock here: no real minute passes)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreFull, StoreReadOnly
from cadenza.node.throttle import WriteFailureThrottle


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, Lines, FakeClock, WriteFailureThrottle]]:
    clock = FakeClock()
    handler = Lines()
    throttle = WriteFailureThrottle(clock)
    handler.addFilter(throttle)
    logger = logging.getLogger("cadenza.test-throttle")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, handler, clock, throttle
    logger.removeHandler(handler)


FULL = StoreFull("the store could not record a change: disk full (database or disk is full; "
                 "/h/data/cadenza.db); free space on the disk of /h/data",
                 detail="database or disk is full")


def fail_like_the_loops(logger: logging.Logger, times: int) -> None:
    """What the node's loops log at each failed round."""
    for _ in range(times):
        try:
            raise FULL
        except StoreFull:
            logger.exception("dispatch failed (retrying in %.0fs)", 1.0)
        logger.warning("renewing %d run lease(s) failed: %s", 2, FULL)
        try:
            raise RuntimeError("reaping") from FULL
        except RuntimeError:
            logger.exception("reaping expired leases failed")


def test_one_line_a_minute_without_traceback(logged: tuple[
        logging.Logger, Lines, FakeClock, WriteFailureThrottle]) -> None:
    logger, handler, clock, throttle = logged
    fail_like_the_loops(logger, 100)
    assert len(handler.lines) == 1
    (line,) = handler.lines
    assert line.startswith("ERROR dispatch failed (retrying in 1s): the store could not record")
    assert "Traceback" not in line and "\n" not in line
    assert "logged at most once every 60s" in line
    assert throttle.held == 299

    clock.advance(59)
    fail_like_the_loops(logger, 10)
    assert len(handler.lines) == 1
    clock.advance(1)
    fail_like_the_loops(logger, 1)
    assert len(handler.lines) == 2
    assert "(329 more line(s) like it held back since the last one)" in handler.lines[1]


def test_other_lines_and_other_kinds_pass(logged: tuple[
        logging.Logger, Lines, FakeClock, WriteFailureThrottle]) -> None:
    logger, handler, _clock, _throttle = logged
    fail_like_the_loops(logger, 3)
    logger.info("run %s of %s ended %s", "r1", "job", "SUCCEEDED")
    logger.warning("renewing %d run lease(s) failed: %s", 1, StoreReadOnly("read-only store"))
    logger.warning("renewing %d run lease(s) failed: %s", 1, StoreReadOnly("read-only store"))
    try:
        raise ValueError("a bug")
    except ValueError:
        logger.exception("dispatch failed (retrying in %.0fs)", 1.0)
    assert len(handler.lines) == 4
    assert handler.lines[1] == "INFO run r1 of job ended SUCCEEDED"
    assert handler.lines[2].startswith("WARNING renewing 1 run lease(s) failed: read-only store")
    assert "Traceback" in handler.lines[3]  # not a write failure: told as before
