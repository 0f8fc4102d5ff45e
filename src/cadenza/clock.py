"""Time, injected.

Services receive a :class:`Clock`; pure functions receive ``now`` as an argument.
Wall time (``now``) decides schedules; monotonic time paces loops and timeouts.
Tests use :class:`FakeClock` and never sleep for real.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """What every service reads time from."""

    def now(self) -> datetime:
        """The current wall time, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the caller for ``seconds`` of this clock's time."""
        ...

    def wait(self, event: threading.Event, timeout: float | None = None) -> bool:
        """Block until ``event`` is set or ``timeout`` seconds of this clock's time have
        passed (``None``: no timeout); returns whether the event is set. Every loop of a
        service paces itself with this, so that a :class:`FakeClock` can drive it."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float | None = None) -> bool:
        return event.wait(None if timeout is None else max(timeout, 0.0))


class OffsetClock(SystemClock):
    """The system clock shifted so that it reads ``start`` at creation, then runs in real time.

    For end-to-end tests and demos of schedules (``CADENZA_FAKE_NOW`` for ``cadenza serve``):
    a real process believes it is 01:55 on a chosen night without touching the OS clock.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("OffsetClock needs a timezone-aware start time")
        self._offset = start.astimezone(UTC) - datetime.now(UTC)

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset


FAKE_NOW_ENV = "CADENZA_FAKE_NOW"


def clock_from_env(environ: dict[str, str] | None = None) -> Clock:
    """``OffsetClock`` when ``$CADENZA_FAKE_NOW`` holds an ISO time with offset, else the
    system clock. Raises ValueError naming the variable when its value is not such a time."""
    import os

    value = (environ if environ is not None else dict(os.environ)).get(FAKE_NOW_ENV, "").strip()
    if not value:
        return SystemClock()
    try:
        start = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{FAKE_NOW_ENV}={value!r}: expected an ISO time like "
                         "2027-03-28T01:55:00+01:00") from None
    if start.tzinfo is None:
        raise ValueError(f"{FAKE_NOW_ENV}={value!r}: the time needs a UTC offset")
    return OffsetClock(start)


class FakeClock:
    """A clock that only moves when told to.

    ``sleep`` advances the clock instead of blocking, so code under test that sleeps
    until a due time returns at once with the clock at that time. Thread-safe.
    """


    def __init__(self, start: datetime | str = "2027-01-01T00:00:00+00:00") -> None:
        if isinstance(start, str):
            start = datetime.fromisoformat(start)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start time")
        self._now = start.astimezone(UTC)
        self._mono = 1000.0
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._waiting = 0
        self._waits: dict[int, tuple[float | None, threading.Event]] = {}
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds > 0:
            self.advance(seconds)

    POLL = 0.002
    """Real seconds between two looks at a waited event (an Event cannot notify us)."""

    def wait(self, event: threading.Event, timeout: float | None = None) -> bool:
        """Block (for real) until ``event`` is set or the clock is advanced past
        ``timeout``; does not move the clock itself. While blocked the caller counts in
        :attr:`waiting`, so that a test can tell when every loop is idle."""
        with self._changed:
            deadline = None if timeout is None else self._mono + max(timeout, 0.0)
            me = threading.get_ident()
            self._waiting += 1
            self._waits[me] = (deadline, event)
            self._changed.notify_all()
            try:
                while not event.is_set():
                    if deadline is not None and self._mono >= deadline:
                        return False
                    self._changed.wait(self.POLL)
                return True
            finally:
                self._waiting -= 1
                self._waits.pop(me, None)
                self._changed.notify_all()

    @property
    def waiting(self) -> int:
        """How many threads are blocked in :meth:`wait` now."""
        with self._lock:
            return self._waiting

    def wait_for_waiters(self, count: int, timeout: float = 10.0) -> bool:
        """Block (for real, at most ``timeout`` seconds) until at least ``count`` threads
        wait on this clock: the loops under test have reached their next pause."""
        return self._block_until(lambda: self._waiting >= count, timeout)

    def _block_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Block (for real, at most ``timeout`` seconds) until ``done()``, looked at under
        the clock's lock whenever it changes (and every :data:`POLL` seconds)."""
        end = time.monotonic() + timeout
        with self._changed:
            while not done():
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, self.POLL))
            return True

    @property
    def idle(self) -> int:
        """How many threads wait in :meth:`wait` for something still to come: their event
        is not set and their timeout lies ahead. A thread whose timeout the clock passed
        counts again only once it has done its round and waits anew."""
        with self._lock:
            return sum(1 for deadline, event in self._waits.values()
                       if not event.is_set() and (deadline is None or deadline > self._mono))

    def wait_until_idle(self, count: int, timeout: float = 10.0) -> bool:
        """Block (for real, at most ``timeout`` seconds) until at least ``count`` threads
        are :attr:`idle`: every loop under test has caught up with the clock's time."""
        return self._block_until(lambda: self.idle >= count, timeout)

    def advance_idle(self, seconds: float | timedelta, count: int,
                     timeout: float = 10.0) -> datetime:
        """:meth:`advance`, then :meth:`wait_until_idle` for ``count`` loops (raises
        TimeoutError when they do not settle within ``timeout`` real seconds); returns
        the new ``now``."""
        now = self.advance(seconds)
        if not self.wait_until_idle(count, timeout):
            raise TimeoutError(f"{count} loops did not settle within {timeout}s "
                               f"({self.idle} idle)")
        return now

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move wall and monotonic time forward; returns the new ``now``."""
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise ValueError("FakeClock.advance cannot go backwards; use set() for wall jumps")
        with self._lock:
            self._now += delta
            self._mono += delta.total_seconds()
            self._changed.notify_all()
            return self._now

    def set(self, when: datetime | str) -> None:
        """Jump the wall time (either way), as a system clock change would; monotonic stays."""
        if isinstance(when, str):
            when = datetime.fromisoformat(when)
        if when.tzinfo is None:
            raise ValueError("FakeClock.set needs a timezone-aware time")
        with self._lock:
            self._now = when.astimezone(UTC)
            self._changed.notify_all()
