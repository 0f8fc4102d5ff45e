"""Route health: the score and what a probe's outcome does to a route (docs/health-checks.md).

Pure: no I/O, no clock; ``now`` is an argument. The health checker
(:mod:`cadenza.resources.health`) probes, then asks :func:`judge` what to record and which
transitions to make, and writes both in one transaction.

* ``score = 100 - latency_ms/20 - consecutive_failures*15 - recent_timeouts*10``, never
  below 0 (a route at 0 is as unusable as one at -175; the order of routes is unchanged);
* a probe that failed by timing out counts its latency as at least the timeout (it waited
  that long; a clock that did not move, as a FakeClock, cannot make it look fast);
* AVAILABLE with a score below ``threshold`` → COOLDOWN until ``now + cooldown``;
* COOLDOWN: probed again once ``cooldown_until`` passed; a passing probe with a score at
  or above the threshold → AVAILABLE, else it stays, until a new ``cooldown_until``;
* FAULT (a step met a proxy error): a passing probe → AVAILABLE (and COOLDOWN at once when
  the score is still below the threshold); a failing one leaves it FAULT;
* ``disable_after`` consecutive failed probes, from any state probed → DISABLED, with the
  reason. Only an operator brings a DISABLED route back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cadenza.domain.states import ResourceState

TIMEOUT = "timeout"
"""The ``error_type`` of a probe that ran out of time (counted in ``recent_timeouts``)."""
ERROR_TYPES = ("connect", TIMEOUT, "proxy_auth", "tunnel", "status", "echo",
               "region_mismatch", "error")
"""Why a probe fails: the proxy refused the TCP connection; a phase ran out of time; the
proxy wants (other) credentials (407); the proxy could not reach the target (CONNECT or
SOCKS refused, 5xx of the proxy); the probe URL answered outside 2xx; the IP-echo answer is
not JSON with the expected keys; the egress region differs from the member's; anything
else (an unreadable URL...), named by its exception."""
RECENT = timedelta(hours=1)
"""The window of ``recent_timeouts``."""
PROBED_STATES = frozenset({ResourceState.AVAILABLE, ResourceState.COOLDOWN,
                           ResourceState.FAULT})
"""States in which a route is probed (not LEASED, RUNNING: a run uses it; not DISABLED)."""


def score(latency_ms: float | None, consecutive_failures: int, recent_timeouts: int) -> float:
    """``100 - latency_ms/20 - consecutive_failures*15 - recent_timeouts*10``, at least 0
    (``latency_ms`` None counts as 0), rounded to 0.1."""
    value = (100.0 - (latency_ms or 0.0) / 20.0 - consecutive_failures * 15
             - recent_timeouts * 10)
    return round(max(0.0, value), 1)


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """What one probe found: ``ok``, ``latency_ms`` (of the probe URL through the proxy,
    else of the TCP connect; for a failure the time until it failed), the failing
    ``phase`` (1 connect, 2 probe URL, 3 IP echo) with ``error_type`` (one of
    :data:`ERROR_TYPES`) and ``error`` (a message without credentials), and the egress
    seen by the IP echo."""

    ok: bool
    latency_ms: float | None
    phase: int | None = None
    error_type: str | None = None
    error: str | None = None
    egress_ip: str | None = None
    egress_region: str | None = None


@dataclass(frozen=True, slots=True)
class Previous:
    """The health a route had before this probe (zeros for a route never checked)."""

    consecutive_successes: int = 0
    consecutive_failures: int = 0
    cooldown_until: datetime | None = None
    egress_ip: str | None = None
    egress_region: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to record: the health fields and the transitions, in order, each
    (to state, reason)."""

    fields: dict[str, object]
    transitions: tuple[tuple[ResourceState, str], ...]


def judge(state: ResourceState, before: Previous, outcome: ProbeOutcome, *,
          recent_timeouts: int, now: datetime, timeout: timedelta, threshold: float,
          cooldown: timedelta, disable_after: int) -> Verdict:
    """The health fields and transitions a probe's ``outcome`` gives a route in ``state``.
    ``recent_timeouts`` counts this probe's own timeout already."""
    latency = outcome.latency_ms
    if outcome.error_type == TIMEOUT:
        latency = max(latency or 0.0, timeout.total_seconds() * 1000)
    successes = before.consecutive_successes + 1 if outcome.ok else 0
    failures = 0 if outcome.ok else before.consecutive_failures + 1
    value = score(latency, failures, recent_timeouts)
    cooldown_until = before.cooldown_until
    moves: list[tuple[ResourceState, str]] = []
    low = value < threshold
    why_low = f"score {value:g} below threshold {threshold:g}"
    if not outcome.ok:
        why_low += f" ({outcome.error_type}: {outcome.error})"
    if not outcome.ok and failures >= disable_after:
        moves.append((ResourceState.DISABLED,
                      f"{failures} consecutive failed health checks (disable_after = "
                      f"{disable_after}); last: {outcome.error_type}: {outcome.error}"))
        cooldown_until = None
    elif state is ResourceState.AVAILABLE and low:
        cooldown_until = now + cooldown
        moves.append((ResourceState.COOLDOWN, why_low))
    elif state is ResourceState.COOLDOWN:
        if outcome.ok and not low:
            cooldown_until = None
            moves.append((ResourceState.AVAILABLE, f"health check passed, score {value:g}"))
        else:
            cooldown_until = now + cooldown  # stays cooling down; probed again after it
    elif state is ResourceState.FAULT and outcome.ok:
        moves.append((ResourceState.AVAILABLE, f"health check passed, score {value:g}"))
        if low:
            cooldown_until = now + cooldown
            moves.append((ResourceState.COOLDOWN, why_low))
    elif not low:
        cooldown_until = None
    fields: dict[str, object] = {
        "last_checked_at": now,
        "latency_ms": None if latency is None else round(latency, 1),
        "consecutive_successes": successes,
        "consecutive_failures": failures,
        "recent_timeouts": recent_timeouts,
        "last_error_type": outcome.error_type,
        "cooldown_until": cooldown_until,
        "score": value,
        "egress_ip": outcome.egress_ip if outcome.egress_ip is not None else before.egress_ip,
        "egress_region": (outcome.egress_region if outcome.egress_region is not None
                          else before.egress_region),
    }
    return Verdict(fields, tuple(moves))


def due_at(state: ResourceState, last_checked_at: datetime | None,
           cooldown_until: datetime | None, interval: timedelta, now: datetime
           ) -> datetime | None:
    """When a route in ``state`` is next probed: None when it is not probed (LEASED,
    RUNNING, DISABLED); ``now`` for a route never checked; a COOLDOWN route once its
    cooldown ends (an interval after its last check when no cooldown is known); others an
    interval after their last check."""
    if state not in PROBED_STATES:
        return None
    if state is ResourceState.COOLDOWN and cooldown_until is not None:
        return cooldown_until
    if last_checked_at is None:
        return now
    return last_checked_at + interval
