"""The retry policy's delays and the decision after a failed step (SPEC §7, domain/retry.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cadenza.config.types import RetryPolicy
from cadenza.domain.retry import DEFAULT_DEFER, Action, backoff_delay, decide

NOW = datetime(2027, 1, 1, 10, 0, tzinfo=UTC)


def policy(**values: object) -> RetryPolicy:
    return RetryPolicy.model_validate({"jitter": 0, **values})


@pytest.mark.parametrize(("spent", "expected"), [(0, 10), (1, 20), (2, 40), (3, 80),
                                                 (4, 100), (40, 100)])
def test_exponential_doubles_up_to_the_cap(spent: int, expected: float) -> None:
    assert backoff_delay(policy(base_seconds=10, max_seconds=100), spent) == expected


def test_fixed_is_always_base() -> None:
    fixed = policy(backoff="fixed", base_seconds=7, max_seconds=100)
    assert [backoff_delay(fixed, n) for n in range(4)] == [7, 7, 7, 7]


@pytest.mark.parametrize(("u", "expected"), [(0.0, 8.0), (0.5, 10.0), (0.999999, 12.0)])
def test_jitter_is_a_fraction_either_way_and_deterministic(u: float, expected: float) -> None:
    jittered = policy(base_seconds=10, max_seconds=100, jitter=0.2)
    assert backoff_delay(jittered, 0, lambda: u) == pytest.approx(expected, abs=1e-4)


def test_jitter_from_the_default_source_stays_in_bounds() -> None:
    jittered = policy(base_seconds=10, max_seconds=100, jitter=0.5)
    assert all(5 <= backoff_delay(jittered, 0) <= 15 for _ in range(200))


def test_fatal_fails_at_once() -> None:
    d = decide("fatal", policy(), spent=0, now=NOW)
    assert d.action is Action.FAIL and d.spent == 0


def test_retryable_spends_attempts_then_needs_review() -> None:
    p = policy(attempts=3, base_seconds=10, max_seconds=100)
    first = decide("retryable", p, spent=0, now=NOW)
    assert (first.action, first.spent, first.not_before) == (
        Action.RETRY, 1, NOW + timedelta(seconds=10))
    second = decide("retryable", p, spent=1, now=NOW)
    assert (second.action, second.spent, second.not_before) == (
        Action.RETRY, 2, NOW + timedelta(seconds=20))
    third = decide("retryable", p, spent=2, now=NOW)
    assert (third.action, third.spent, third.not_before) == (Action.REVIEW, 3, None)


def test_one_attempt_means_no_retry() -> None:
    assert decide("retryable", policy(attempts=1), spent=0, now=NOW).action is Action.REVIEW


def test_unknown_classes_count_as_retryable() -> None:
    assert decide("lost", policy(attempts=3), spent=0, now=NOW).spent == 1


def test_deferred_waits_until_its_time_without_spending() -> None:
    until = NOW + timedelta(seconds=2)
    d = decide("deferred", policy(attempts=1), spent=0, now=NOW, until=until)
    assert (d.action, d.spent, d.not_before, d.delay) == (Action.RETRY, 0, until, 2.0)
    default = decide("deferred", policy(), spent=2, now=NOW)
    assert default.not_before == NOW + DEFAULT_DEFER and default.spent == 2
    past = decide("deferred", policy(), spent=0, now=NOW, until=NOW - timedelta(hours=1))
    assert past.not_before == NOW


def test_resource_faults_retry_without_spending() -> None:
    d = decide("resource", policy(attempts=1, base_seconds=5), spent=0, now=NOW)
    assert (d.action, d.spent, d.not_before) == (Action.RETRY, 0, NOW + timedelta(seconds=5))


def test_a_next_try_past_the_run_deadline_fails_with_run_timeout() -> None:
    deadline = NOW + timedelta(minutes=1)
    late = decide("deferred", policy(), spent=0, now=NOW, deadline=deadline,
                  until=NOW + timedelta(minutes=5))
    assert late.action is Action.FAIL and late.why is not None
    assert late.why.startswith("run timeout")
    retry = decide("retryable", policy(base_seconds=120), spent=0, now=NOW, deadline=deadline)
    assert retry.action is Action.FAIL
    inside = decide("retryable", policy(base_seconds=30), spent=0, now=NOW, deadline=deadline)
    assert inside.action is Action.RETRY
