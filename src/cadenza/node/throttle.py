"""Write failures in a node's log: one line a minute, not one per attempt.

When the disk under the store is full (or the store is read-only), every loop of a node
fails at each round: the dispatcher's claims, the lease keeper's renewals, the reaper, the
scheduler's ticks, the workers' boundaries. Each would log its failure, most with a
traceback, several times a second. :class:`WriteFailureThrottle` is a :class:`logging.Filter`
on the node's log handler that lets through the first line of each kind of write failure
(``disk full``, ``read-only``, ...; see :func:`cadenza.domain.errors.write_failure_kind`)
and then at most one a minute while it lasts, without its traceback (the message says all:
what failed, where, what to do). The next line that passes says how many were held back.

A record is a write failure when its exception (``exc_info``) or an exception among its
arguments (``log.warning("... %s", exc)``) is one, or was caused by one. Other records pass
untouched. The minute is measured on the node's :class:`~cadenza.clock.Clock`, so a test
drives it with a :class:`~cadenza.clock.FakeClock`.
"""

from __future__ import annotations

import logging
import threading

from cadenza.clock import Clock
from cadenza.domain.errors import write_failure_kind

EVERY_SECONDS = 60.0
"""At most one line per kind of write failure in this many seconds."""


class WriteFailureThrottle(logging.Filter):
    """Lets one log line per kind of write failure through every ``every`` seconds of
    ``clock`` (see the module docstring); thread-safe."""

    def __init__(self, clock: Clock, every: float = EVERY_SECONDS) -> None:
        super().__init__()
        self.clock = clock
        self.every = every
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self.held = 0
        """Lines held back since the start (for tests and curious people)."""

    def filter(self, record: logging.LogRecord) -> bool:
        failure = _failure_of(record)
        if failure is None:
            return True
        kind, exc = failure
        now = self.clock.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.every:
                self._held[kind] = self._held.get(kind, 0) + 1
                self.held += 1
                return False
            self._last[kind] = now
            held = self._held.pop(kind, 0)
        text = record.getMessage()
        told = str(exc)
        if told and told not in text:
            text = f"{text}: {told}"
        if held:
            text += f" ({held} more line(s) like it held back since the last one)"
        text += f" [store write failures are logged at most once every {self.every:.0f}s]"
        record.msg, record.args = text, ()
        # One line: the message says what failed and what to do; a traceback per minute
        # of a full disk would only bury it.
        record.exc_info, record.exc_text = None, None
        return True


def _failure_of(record: logging.LogRecord) -> tuple[str, BaseException] | None:
    """The kind of write failure a record reports and its exception, or None."""
    candidates: list[BaseException] = []
    if record.exc_info and record.exc_info[1] is not None:
        candidates.append(record.exc_info[1])
    args = record.args
    if isinstance(args, tuple):
        candidates += [a for a in args if isinstance(a, BaseException)]
    elif isinstance(args, dict):
        candidates += [a for a in args.values() if isinstance(a, BaseException)]
    for exc in candidates:
        kind = write_failure_kind(exc)
        if kind is not None:
            return kind, exc
    return None
