"""The lease keeper: one heartbeat thread per process renews the leases of every run the
process executes, and passes cancel requests on (docs/leases.md).

The rules:

* An executor registers each run when it claims it (its id, the claim's epoch and owner, and
  the run's :class:`~cadenza.executor.control.RunControl`) and unregisters it when the run's
  execution ends.
* Every ``lease / 3`` the keeper renews all registered runs with ONE statement
  (:meth:`~cadenza.store.run_leases.RunLeasesRepository.renew_run_leases`), to ``now + lease``:

  - renewed: fine; its local deadline moves to the round's start + lease, and the run's
    control is told (:meth:`~cadenza.executor.control.RunControl.hold_lease`: a process
    step's child gets its own deadline, that end minus a margin, over its pipe);
  - a cancel request is pending: ``control.stop(CANCELED, by=...)``;
  - not renewed because the epoch or the owner moved on, or the run is no longer RUNNING
    (the reaper took it, another node claimed it): ``control.stop(LEASE_LOST)`` and the run
    is forgotten;
  - the store cannot be reached: the keeper keeps trying, and once a run's local deadline
    (the end of the last lease it surely held) has passed, stops it with LEASE_LOST: a worker
    that cannot renew stops the run's work before anyone else may take it.

* Between renewals, every :data:`CANCEL_POLL_SECONDS` it reads the pending cancel requests of
  its runs (one small indexed read, no write): ``cadenza runs cancel`` from another process
  stops a run within about a second, not a third of the lease. A cancel asked in this
  process (:meth:`LeaseKeeper.cancel_local`) stops the run at once.

* While it holds no run, its thread sleeps until a run is registered: an idle node does not
  wake it once a second for nothing.

Deadlines and the thread's pacing use the keeper's clock (``clock.wait``): under a
``FakeClock`` the rounds come when the test moves the clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from cadenza.clock import Clock
from cadenza.executor.control import RunControl, StopKind
from cadenza.store.protocols import RunLeases
from cadenza.store.run_leases import Renewal, RunLease

log = logging.getLogger("cadenza.lease")

CANCEL_POLL_SECONDS = 1.0
"""How often the keeper reads the cancel requests of its runs between renewals."""


@dataclass
class _Held:
    run_id: str
    epoch: int
    owner: str
    control: RunControl
    registered: float
    valid_until: float
    """Monotonic time until which the lease is surely ours (last renewal's start + lease)."""


class LeaseKeeper:
    """Renews the leases of this process's runs (see the module docstring). Thread-safe."""

    def __init__(self, store: RunLeases, lease: timedelta | Callable[[], timedelta], *,
                 clock: Clock | None = None, cancel_poll: float = CANCEL_POLL_SECONDS) -> None:
        self.store = store
        self.clock = clock or store.clock
        self._lease = lease
        self.cancel_poll = cancel_poll
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0
        self.failures = 0
        self._failing = False

    # -- registration -----------------------------------------------------------------------

    def register(self, run_id: str, epoch: int, owner: str, control: RunControl) -> None:
        """Hold ``run_id`` (claimed at ``epoch`` by ``owner``) until :meth:`unregister`."""
        now = self.clock.monotonic()
        seconds = self.lease.total_seconds()
        with self._lock:
            first = not self._held
            self._held[run_id] = _Held(run_id, epoch, owner, control, now, now + seconds)
        control.hold_lease(now + seconds, seconds, self.clock)
        self.start()
        if first:
            self._wake.set()  # the thread sleeps while nothing is held

    def unregister(self, run_id: str, control: RunControl | None = None) -> None:
        """Stop renewing ``run_id`` (only that registration when ``control`` is given)."""
        with self._lock:
            held = self._held.get(run_id)
            if held is not None and (control is None or held.control is control):
                del self._held[run_id]

    def held(self) -> list[str]:
        """The ids of the runs renewed now."""
        with self._lock:
            return list(self._held)

    def control_of(self, run_id: str) -> RunControl | None:
        with self._lock:
            held = self._held.get(run_id)
        return held.control if held is not None else None

    def cancel_local(self, run_id: str, by: str) -> bool:
        """The in-process fast path of a cancel: stop the run now if this process runs it."""
        control = self.control_of(run_id)
        if control is None:
            return False
        control.stop(StopKind.CANCELED, by=by, reason=f"canceled by {by}")
        return True

    @property
    def lease(self) -> timedelta:
        """The lease length now (a callable given at creation follows config reloads)."""
        return self._lease() if callable(self._lease) else self._lease

    # -- one round ---------------------------------------------------------------------------

    def renew_once(self) -> Renewal | None:
        """One renewal round (see the module docstring); None when nothing is held or the
        store could not be reached."""
        with self._lock:
            snapshot = list(self._held.values())
        if not snapshot:
            return None
        started = self.clock.monotonic()
        until = self.clock.now() + self.lease
        self.rounds += 1
        try:
            result = self.store.renew_run_leases(
                [RunLease(h.run_id, h.epoch, h.owner) for h in snapshot], until)
        except Exception as exc:  # the store is unreachable: keep trying until our lease ends
            self.failures += 1
            self._failing = True
            log.warning("renewing %d run lease(s) failed: %s", len(snapshot), exc)
            self._expire_local(snapshot, f"the lease could not be renewed ({exc})")
            return None
        self._failing = False
        lease_seconds = self.lease.total_seconds()
        for held in snapshot:
            if held.run_id in result.renewed:
                held.valid_until = started + lease_seconds
                # A process step's child learns its new deadline from this (over its pipe).
                held.control.hold_lease(held.valid_until, lease_seconds, self.clock)
                by = result.cancels.get(held.run_id)
                if by is not None:
                    held.control.stop(StopKind.CANCELED, by=by, reason=f"canceled by {by}")
            elif held.run_id in result.lost:
                why = result.lost[held.run_id]
                log.warning("run %s: lease lost: %s", held.run_id, why)
                held.control.stop(StopKind.LEASE_LOST, reason=f"the run's lease was lost: {why}")
                self.unregister(held.run_id, held.control)
            elif started - held.registered > lease_seconds:
                # A claim that never became visible (rolled back): forget it.
                held.control.stop(StopKind.LEASE_LOST,
                                  reason="the run's claim was never committed")
                self.unregister(held.run_id, held.control)
        return result

    def poll_cancels_once(self) -> int:
        """Read pending cancel requests of the held runs; stop those runs. Returns how many
        were stopped now."""
        with self._lock:
            snapshot = dict(self._held)
        if not snapshot:
            return 0
        try:
            asked = self.store.cancel_requests(snapshot)
        except Exception as exc:
            log.debug("reading cancel requests failed: %s", exc)
            return 0
        stopped = 0
        for run_id, by in asked.items():
            held = snapshot.get(run_id)
            if held is not None and held.control.stop(StopKind.CANCELED, by=by,
                                                      reason=f"canceled by {by}"):
                stopped += 1
        return stopped

    def _expire_local(self, snapshot: list[_Held], why: str) -> None:
        now = self.clock.monotonic()
        for held in snapshot:
            if now >= held.valid_until:
                log.error("run %s: stopped, %s before its lease ended", held.run_id, why)
                held.control.stop(StopKind.LEASE_LOST, reason=why)
                self.unregister(held.run_id, held.control)

    # -- the thread --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the heartbeat thread (once; registering starts it too)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._loop, name="cadenza-lease-keeper",
                                            daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the thread (held runs are no longer renewed)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self) -> None:
        clock = self.clock
        next_renewal = clock.monotonic() + self.lease.total_seconds() / 3
        next_poll = clock.monotonic() + self.cancel_poll
        while not self._stop.is_set():
            with self._lock:
                idle = not self._held
            # Nothing held: nothing to renew and no cancel to look for, so no wake-up until
            # a run is registered (an idle node's CPU is its wake-ups: docs/benchmarks.md).
            wait = None if idle else max(0.0, min(next_poll, next_renewal) - clock.monotonic())
            clock.wait(self._wake, wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            now = clock.monotonic()
            if idle:  # woken by a registration: that lease is new
                next_renewal = now + self.lease.total_seconds() / 3
                next_poll = now + self.cancel_poll
                continue
            try:
                if now >= next_renewal:
                    self.renew_once()
                    # After a failure, try again soon: the local deadline is running out.
                    pause = self.cancel_poll if self._failing else self.lease.total_seconds() / 3
                    next_renewal = clock.monotonic() + pause
                    next_poll = clock.monotonic() + self.cancel_poll
                elif now >= next_poll:
                    self.poll_cancels_once()
                    next_poll = clock.monotonic() + self.cancel_poll
                # else: woken early by a registration after the last run left: nothing is
                # due (no read per run for a node that runs one run at a time)
            except Exception:  # never let the heartbeat die
                log.exception("the lease keeper's round failed")
