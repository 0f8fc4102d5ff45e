"""Stopping a run from outside the thread that executes it (SPEC §7 "Timeouts and cancel").

A :class:`RunControl` is created per executed run. Other threads (the lease keeper that renews
the run's lease and reads cancel requests, a Ctrl-C handler, a node shutting down) call
:meth:`RunControl.stop`; the executing thread calls :meth:`RunControl.check` between steps and
while a step runs (its ``on_tick``), which raises :class:`RunStopped`. Raising from ``on_tick``
is what really stops the work: the isolation kills a child process tree, a thread step's
``ctx.cancelled()`` becomes true (SQL statements are then canceled on the server, HTTP
transfers aborted).

The first stop wins: a run canceled and then found without its lease stays "canceled".
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum

from cadenza.domain.errors import StepError


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
        self._event = threading.Event()
        self._request: StopRequest | None = None

    def stop(self, kind: StopKind, by: str | None = None, reason: str = "") -> bool:
        """Ask the run to stop; returns False when it was already asked (first one wins)."""
        with self._lock:
            if self._request is not None:
                return False
            self._request = StopRequest(kind, by, reason)
        self._event.set()
        return True

    @property
    def request(self) -> StopRequest | None:
        return self._request

    @property
    def stopped(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for a stop (e.g. instead of sleeping for a backoff)."""
        return self._event.wait(timeout)

    def check(self) -> None:
        """Raise :class:`RunStopped` when the run was asked to stop."""
        request = self._request
        if request is not None:
            raise RunStopped(request)
