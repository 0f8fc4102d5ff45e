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


@pytest.mark.reliability_case(48)
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


def test_fake_clock_wait_returns_when_advanced_past_timeout_or_set() -> None:
    import threading

    from cadenza.clock import FakeClock

    clock = FakeClock()
    event = threading.Event()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(clock.wait(event, 5)))
    waiter.start()
    assert clock.wait_for_waiters(1)
    clock.advance(4.9)
    waiter.join(0.05)
    assert waiter.is_alive(), "4.9 s of a 5 s wait: still waiting"
    clock.advance(0.1)
    waiter.join(5)
    assert results == [False]
    waiter = threading.Thread(target=lambda: results.append(clock.wait(event, None)))
    waiter.start()
    assert clock.wait_for_waiters(1)
    event.set()
    waiter.join(5)
    assert results == [False, True]
    assert clock.waiting == 0


def test_system_clock_wait_is_the_event_wait() -> None:
    import threading

    from cadenza.clock import SystemClock

    event = threading.Event()
    event.set()
    assert SystemClock().wait(event, 10) is True
    assert SystemClock().wait(threading.Event(), 0) is False
