"""Stopping a run from outside the thread that executes it (docs/leases.md "Cancel", "Timeouts").

A :class:`RunControl` is created per executed run. Other threads (the lease keeper that renews
the run's lease and reads cancel requests, a Ctrl-C handler, a node shutting down) call
:meth:`RunControl.stop`; the executing thread calls :meth:`RunControl.check` between steps and
while a step runs (its ``on_tick``), which raises :class:`RunStopped`. Raising from ``on_tick``
is what really stops the work: the isolation kills a child process tree, a thread step's
``ctx.cancelled()`` becomes true (SQL statements are then canceled on the server, HTTP
transfers aborted).

The first stop wins: a run canceled and then found without its lease stays "canceled".

The lease. The lease keeper also tells the control until when the run's lease is surely held
(:meth:`RunControl.hold_lease`, at the claim and at each renewal). A step's work must end
before that time minus a margin (:func:`lease_margin`): a process-isolated step's child gets
its own deadline from it, extended over a pipe at each renewal and each tick of its parent
(:meth:`RunControl.on_lease`), and stops itself when it is not extended in time
(docs/leases.md "The child's own deadline").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from cadenza.clock import Clock
from cadenza.domain.errors import StepError

MARGIN_FRACTION = 0.2
"""The margin before a lease's end is this fraction of the lease ..."""
MARGIN_MIN, MARGIN_MAX = 0.5, 5.0
"""... but at least and at most these many seconds."""


def lease_margin(lease_seconds: float) -> float:
    """How long before the end of a lease the step's work must have stopped: a fifth of
    the lease, between half a second and 5 s (for a 3 s lease: 0.6 s; for 60 s: 5 s). It
    covers killing a process tree and the time between a renewal's start and its write."""
    return min(MARGIN_MAX, max(MARGIN_MIN, lease_seconds * MARGIN_FRACTION))


class StopKind(StrEnum):
    CANCELED = "canceled"
    """A person (or the API) asked: the run ends CANCELED, naming who."""
    LEASE_LOST = "lease_lost"
    """The lease could not be renewed or another holder took it: stop writing, end nothing."""


@dataclass(frozen=True)
class StopRequest:
    kind: StopKind
    by: str | None = None
    reason: str = ""


class RunStopped(StepError):
    """Raised in the executing thread once its run was stopped."""

    def __init__(self, request: StopRequest) -> None:
        self.request = request
        who = f" by {request.by}" if request.by else ""
        super().__init__(request.reason or f"{request.kind.value}{who}")


class RunControl:
    """The stop switch of one executed run (thread-safe)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._lock = threading.Lock()
        self._event: threading.Event | None = None  # made for a wait(), only
        self._request: StopRequest | None = None
        self._lease: tuple[float, float, Clock] | None = None  # until, length, clock
        self._listeners: list[Callable[[], None]] = []

    def stop(self, kind: StopKind, by: str | None = None, reason: str = "") -> bool:
        """Ask the run to stop; returns False when it was already asked (first one wins)."""
        with self._lock:
            if self._request is not None:
                return False
            self._request = StopRequest(kind, by, reason)
            event = self._event
        if event is not None:
            event.set()
        return True

    @property
    def request(self) -> StopRequest | None:
        return self._request

    @property
    def stopped(self) -> bool:
        return self._request is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for a stop (e.g. instead of sleeping for a backoff)."""
        with self._lock:
            if self._request is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def check(self) -> None:
        """Raise :class:`RunStopped` when the run was asked to stop."""
        request = self._request
        if request is not None:
            raise RunStopped(request)

    # -- the lease ----------------------------------------------------------------------

    def hold_lease(self, until: float, lease_seconds: float, clock: Clock) -> None:
        """The lease keeper: the run's lease is surely held until ``until`` (on ``clock``'s
        monotonic time), a lease of ``lease_seconds``. Tells the listeners
        (:meth:`on_lease`), outside the lock."""
        with self._lock:
            self._lease = (until, lease_seconds, clock)
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def lease_left(self) -> float | None:
        """Seconds until the step's work must have stopped: the end of the lease surely
        held minus :func:`lease_margin` (negative once passed); None when no lease keeper
        holds the run (a run executed outside a lease, such as a test's)."""
        lease = self._lease
        if lease is None:
            return None
        until, length, clock = lease
        return until - lease_margin(length) - clock.monotonic()

    def on_lease(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after each :meth:`hold_lease` (from the keeper's thread: it
        must be quick); returns the call that removes it."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove
