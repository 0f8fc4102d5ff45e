"""What happens after a failed step (docs/retries.md), as pure functions.

:func:`backoff_delay` is the wait before the next try of a retryable error:

* ``exponential``: ``min(base * 2^n, max)`` where ``n`` is the number of attempts spent
  before the one that just failed (0 after the first failure: the first wait is ``base``);
* ``fixed``: ``base`` (also capped by ``max``);
* then ``± jitter``, a fraction of the delay: ``delay * (1 + jitter * (2u - 1))`` with ``u``
  uniform in [0, 1) from the given random source (deterministic in tests), never below 0.

:func:`decide` turns a step's error class into the run's next move:

=============  =========================================================================
class          decision
=============  =========================================================================
``fatal``      FAIL at once
``retryable``  RETRY after the backoff, spending one attempt; REVIEW (NEEDS_REVIEW) once
               the policy's ``attempts`` are spent
``deferred``   RETRY at ``until`` (now + :data:`DEFAULT_DEFER` when not given), spending
               no attempt
``resource``   RETRY after the policy's first delay, spending no attempt (the resource
               engine moves the run to another member)
=============  =========================================================================

A retry (of any class) whose time falls after the run's deadline (its timeout) FAILs with
"run timeout" instead: deferrals are bounded by the run's timeout, so nothing waits forever.
Any other class (e.g. ``lost``) is treated as retryable.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

DEFAULT_DEFER = timedelta(seconds=60)
"""How long a :class:`~cadenza.domain.errors.Deferred` without ``until`` waits."""


class RetryPolicy(Protocol):
    """What this module reads of a policy (:class:`cadenza.config.types.RetryPolicy`)."""

    @property
    def attempts(self) -> int: ...
    @property
    def backoff(self) -> str: ...
    @property
    def base_seconds(self) -> float: ...
    @property
    def max_seconds(self) -> float: ...
    @property
    def jitter(self) -> float: ...


class Action(StrEnum):
    RETRY = "retry"
    """Back to QUEUED with ``not_before``; resume at the failed step."""
    REVIEW = "review"
    """NEEDS_REVIEW: the attempts are spent; an operator resumes or abandons."""
    FAIL = "fail"
    """FAILED at once."""


@dataclass(frozen=True)
class Decision:
    """The run's next move after a failed step.

    ``spent``: the attempts spent once this failure is counted (unchanged by deferrals);
    ``not_before``: when the next try may start (RETRY only); ``why``: why it fails (FAIL)."""

    action: Action
    spent: int
    not_before: datetime | None = None
    delay: float = 0.0
    why: str | None = None


def backoff_delay(policy: RetryPolicy, spent_before: int,
                  rand: Callable[[], float] | None = None) -> float:
    """Seconds to wait before the next try, ``spent_before`` attempts having been spent
    before the one that just failed (see the module docstring). ``rand`` returns floats in
    [0, 1) (default: :func:`random.random`)."""
    base, cap = policy.base_seconds, max(policy.max_seconds, policy.base_seconds)
    if policy.backoff == "fixed":
        delay = min(base, cap)
    else:
        exponent = min(max(spent_before, 0), 62)  # 2^62 * base is past any cap already
        delay = min(base * (2 ** exponent), cap)
    if policy.jitter > 0 and delay > 0:
        u = (rand or random.random)()
        delay *= 1 + policy.jitter * (2 * u - 1)
    return max(delay, 0.0)


def decide(
    error_class: str | None,
    policy: RetryPolicy,
    *,
    spent: int,
    now: datetime,
    deadline: datetime | None = None,
    until: datetime | None = None,
    rand: Callable[[], float] | None = None,
) -> Decision:
    """The decision for a step that failed with ``error_class`` (see the module docstring).

    ``spent``: attempts spent on this step before this failure (since the last operator
    resume); ``deadline``: the end of the run's timeout; ``until``: a deferral's time."""
    if error_class == "fatal":
        return Decision(Action.FAIL, spent)
    if error_class == "deferred":
        when = max(until, now) if until is not None else now + DEFAULT_DEFER
        return _bounded(Decision(Action.RETRY, spent, when, (when - now).total_seconds()),
                        deadline)
    if error_class == "resource":
        delay = backoff_delay(policy, 0, rand)
        return _bounded(Decision(Action.RETRY, spent, now + timedelta(seconds=delay), delay),
                        deadline)
    spent += 1
    if spent >= policy.attempts:
        return Decision(Action.REVIEW, spent)
    delay = backoff_delay(policy, spent - 1, rand)
    return _bounded(Decision(Action.RETRY, spent, now + timedelta(seconds=delay), delay),
                    deadline)


def _bounded(decision: Decision, deadline: datetime | None) -> Decision:
    if deadline is None or decision.not_before is None or decision.not_before <= deadline:
        return decision
    return Decision(Action.FAIL, decision.spent,
                    why=f"run timeout: the next try ({decision.not_before.isoformat()}) would "
                        f"start after the run's deadline ({deadline.isoformat()})")
