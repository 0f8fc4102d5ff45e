from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cadenza.clock import Clock, FakeClock, SystemClock


def test_fake_clock_sleep_advances_without_blocking() -> None:
    clock = FakeClock("2027-03-28T00:59:00+00:00")
    m0 = clock.monotonic()
    clock.sleep(90)
    assert clock.now() == datetime(2027, 3, 28, 1, 0, 30, tzinfo=UTC)
    assert clock.monotonic() - m0 == 90
    assert clock.sleeps == [90]


def test_fake_clock_wall_jump_keeps_monotonic() -> None:
    clock = FakeClock()
    m0 = clock.monotonic()
    clock.set(clock.now() - timedelta(hours=1))
    assert clock.monotonic() == m0
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        FakeClock(datetime(2027, 1, 1))


def test_both_clocks_satisfy_the_protocol() -> None:
    assert isinstance(SystemClock(), Clock)
    assert isinstance(FakeClock(), Clock)
    assert SystemClock().now().tzinfo is not None
