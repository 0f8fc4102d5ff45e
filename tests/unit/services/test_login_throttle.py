"""The login throttle's arithmetic: free failures, a doubling wait, the window as its cap,
and the user name's count from every address slowing only addresses that failed."""

from __future__ import annotations

from datetime import datetime, timedelta

from cadenza.services.auth import (
    FIRST_DELAY,
    FREE_FAILURES_PER_PAIR,
    FREE_FAILURES_PER_USER,
    THROTTLE_WINDOW,
    retry_after,
    throttle_delay,
)
from cadenza.store.sessions import FailureCount, LoginFailures

NOW = datetime.fromisoformat("2027-03-10T09:00:00+00:00")
NONE = FailureCount()


def test_the_wait_doubles_past_the_free_failures_up_to_the_window() -> None:
    free = FREE_FAILURES_PER_PAIR
    assert throttle_delay(free - 1, free) == timedelta(0)
    assert [throttle_delay(free + k, free) for k in range(3)] \
        == [FIRST_DELAY, 2 * FIRST_DELAY, 4 * FIRST_DELAY]
    assert throttle_delay(free + 40, free) == THROTTLE_WINDOW
    assert throttle_delay(10**9, free) == THROTTLE_WINDOW


def test_the_users_count_slows_only_an_address_that_failed() -> None:
    many = FailureCount(FREE_FAILURES_PER_USER + 5, NOW)
    clean = LoginFailures(pair=NONE, address=NONE, user=many)
    assert retry_after(clean, NOW) == 0
    failed_once = LoginFailures(pair=NONE, address=FailureCount(1, NOW), user=many)
    assert retry_after(failed_once, NOW) == int((FIRST_DELAY * 32).total_seconds())


def test_the_wait_is_counted_from_the_latest_failure_and_rounded_up() -> None:
    last = NOW - timedelta(seconds=1, milliseconds=500)
    pair = FailureCount(FREE_FAILURES_PER_PAIR, last)
    failures = LoginFailures(pair=pair, address=FailureCount(FREE_FAILURES_PER_PAIR, last),
                             user=pair)
    assert retry_after(failures, NOW) == 4  # 5 s after the failure, 1.5 s ago: 3.5 -> 4
    assert retry_after(failures, last + FIRST_DELAY) == 0
