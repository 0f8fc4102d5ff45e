"""The route score and what a probe does to a route (cadenza.domain.health, SPEC §8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cadenza.domain.health import TIMEOUT, Previous, ProbeOutcome, due_at, judge, score
from cadenza.domain.states import RESOURCE_TRANSITIONS, ResourceState

X = ResourceState
NOW = datetime(2027, 1, 1, 12, 0, tzinfo=UTC)
COOL = timedelta(seconds=30)
OK = ProbeOutcome(True, 40.0, egress_ip="127.0.0.2", egress_region="FR")
SLOW_OK = ProbeOutcome(True, 1500.0)
TIMED_OUT = ProbeOutcome(False, 0.0, 2, TIMEOUT, "no answer in time")
REFUSED = ProbeOutcome(False, 1.0, 1, "connect", "Connection refused")


@pytest.mark.parametrize(("latency", "failures", "timeouts", "expected"), [
    (0, 0, 0, 100.0),
    (None, 0, 0, 100.0),
    (20, 0, 0, 99.0),
    (200, 0, 0, 90.0),
    (1000, 0, 0, 50.0),
    (1000, 1, 0, 35.0),
    (0, 2, 0, 70.0),
    (0, 0, 3, 70.0),
    (100, 1, 1, 70.0),
    (450, 1, 2, 42.5),
    (5000, 1, 1, 0.0),     # 100 - 250 - 15 - 10 = -175: never below 0
    (2000, 0, 0, 0.0),
    (1990, 0, 0, 0.5),
    (30, 0, 0, 98.5),
])
def test_score_follows_the_formula(latency: float | None, failures: int, timeouts: int,
                                   expected: float) -> None:
    assert score(latency, failures, timeouts) == expected


def _judge(state: ResourceState, outcome: ProbeOutcome, *, failures: int = 0,
           timeouts: int = 0, threshold: float = 50, disable_after: int = 5,
           cooldown_until: datetime | None = None) -> tuple[dict[str, object], list[X]]:
    verdict = judge(state, Previous(consecutive_failures=failures,
                                    cooldown_until=cooldown_until), outcome,
                    recent_timeouts=timeouts, now=NOW, timeout=timedelta(seconds=5),
                    threshold=threshold, cooldown=COOL, disable_after=disable_after)
    return verdict.fields, [to for to, _ in verdict.transitions]


@pytest.mark.parametrize(("state", "outcome", "failures", "timeouts", "moves"), [
    (X.AVAILABLE, OK, 0, 0, []),
    (X.AVAILABLE, REFUSED, 0, 0, []),                     # 100 - 15 = 85: still usable
    (X.AVAILABLE, REFUSED, 3, 0, [X.COOLDOWN]),           # 4th failure: 40 < 50
    (X.AVAILABLE, TIMED_OUT, 0, 1, [X.COOLDOWN]),         # counts the 5 s timeout
    (X.AVAILABLE, SLOW_OK, 0, 0, [X.COOLDOWN]),           # passes, but 25 < 50
    (X.COOLDOWN, OK, 2, 2, [X.AVAILABLE]),                # passes: 100 - 2 - 20
    (X.COOLDOWN, SLOW_OK, 0, 0, []),                      # passes too slowly: stays
    (X.COOLDOWN, TIMED_OUT, 1, 2, []),
    (X.FAULT, OK, 1, 0, [X.AVAILABLE]),
    (X.FAULT, SLOW_OK, 1, 0, [X.AVAILABLE, X.COOLDOWN]),
    (X.FAULT, REFUSED, 1, 0, []),
    (X.FAULT, REFUSED, 4, 0, [X.DISABLED]),               # 5th consecutive failure
    (X.COOLDOWN, TIMED_OUT, 4, 5, [X.DISABLED]),
    (X.AVAILABLE, TIMED_OUT, 4, 5, [X.DISABLED]),
])
def test_transitions_of_a_probe(state: X, outcome: ProbeOutcome, failures: int,
                                timeouts: int, moves: list[X]) -> None:
    _, got = _judge(state, outcome, failures=failures, timeouts=timeouts)
    assert got == moves
    current = state
    for to in got:  # every move is one the resource machine allows
        assert to in RESOURCE_TRANSITIONS[current]
        current = to


def test_cooldown_until_and_counters() -> None:
    fields, _ = _judge(X.AVAILABLE, TIMED_OUT, timeouts=1)
    assert fields["cooldown_until"] == NOW + COOL
    assert fields["latency_ms"] == 5000.0
    assert fields["consecutive_failures"] == 1
    assert fields["consecutive_successes"] == 0
    assert fields["last_error_type"] == TIMEOUT
    assert fields["score"] == 0.0
    fields, _ = _judge(X.COOLDOWN, OK, failures=2, cooldown_until=NOW)
    assert fields["cooldown_until"] is None
    assert fields["consecutive_failures"] == 0
    assert fields["consecutive_successes"] == 1
    assert (fields["egress_ip"], fields["egress_region"]) == ("127.0.0.2", "FR")


def test_disabled_says_why() -> None:
    verdict = judge(X.FAULT, Previous(consecutive_failures=2), REFUSED, recent_timeouts=0,
                    now=NOW, timeout=timedelta(seconds=5), threshold=50, cooldown=COOL,
                    disable_after=3)
    [(to, reason)] = verdict.transitions
    assert to is X.DISABLED
    assert "3 consecutive failed health checks" in reason
    assert "connect: Connection refused" in reason


def test_when_a_route_is_due() -> None:
    minute = timedelta(seconds=60)
    assert due_at(X.AVAILABLE, None, None, minute, NOW) == NOW
    assert due_at(X.AVAILABLE, NOW, None, minute, NOW) == NOW + minute
    assert due_at(X.FAULT, NOW, None, minute, NOW) == NOW + minute
    assert due_at(X.COOLDOWN, NOW, NOW + COOL, minute, NOW) == NOW + COOL
    for state in (X.LEASED, X.RUNNING, X.DISABLED):
        assert due_at(state, NOW, None, minute, NOW) is None


@pytest.mark.reliability_case(30)
def test_a_flapping_route_stays_out_until_its_timeouts_age() -> None:
    """Hysteresis (RELIABILITY 30): a proxy that times out on every other probe comes back
    a few times, then stays in COOLDOWN even when it answers, until its timeouts are more
    than an hour old."""
    state, before, now = X.AVAILABLE, Previous(), NOW
    timeouts: list[datetime] = []
    returns = 0
    for probe in range(40):  # one probe every cooldown (30 s): 20 minutes
        outcome = TIMED_OUT if probe % 2 == 0 else OK
        if outcome is TIMED_OUT:
            timeouts.append(now)
        recent = sum(1 for t in timeouts if t > now - timedelta(hours=1))
        verdict = judge(state, before, outcome, recent_timeouts=recent, now=now,
                        timeout=timedelta(seconds=5), threshold=50, cooldown=COOL,
                        disable_after=5)
        for to, _ in verdict.transitions:
            returns += to is X.AVAILABLE
            state = to
        before = Previous(**{k: verdict.fields[k] for k in (  # type: ignore[arg-type]
            "consecutive_successes", "consecutive_failures", "cooldown_until")})
        now += COOL
    assert state is X.COOLDOWN
    assert returns == 4  # passes with 1..4 recent timeouts; from the 5th on it stays out
    # An hour after the last timeout, one passing probe brings it back.
    verdict = judge(state, before, OK, recent_timeouts=0, now=now + timedelta(hours=1),
                    timeout=timedelta(seconds=5), threshold=50, cooldown=COOL,
                    disable_after=5)
    assert [to for to, _ in verdict.transitions] == [X.AVAILABLE]
