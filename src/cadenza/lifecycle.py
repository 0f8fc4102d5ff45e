"""One start/stop protocol for the services of a process (APScheduler 4's ``start(exit_stack)``).

A :class:`Service` starts in :meth:`Service.start` and pushes onto the given
:class:`contextlib.ExitStack` whatever stops it again (join its thread, drain its queue).
A process (:class:`~cadenza.node.Node`) starts its services in list order on one stack and
closes that stack to stop: services stop in the reverse order of their start, and what the
process built before starting any of them (connections, the lease keeper, executors) is
closed after all of them.

Every service shares one :class:`Lifecycle`: the clock that paces its loop, the signal that
the process is stopping, and how long a stop waits for each thread. A loop paces itself
only with :meth:`Lifecycle.pause` (wait for the stop signal) or ``clock.wait(event,
timeout)`` on an event that :meth:`Lifecycle.wake_on_stop` registered, never with a sleep:
under a :class:`~cadenza.clock.FakeClock` a test then drives every loop by advancing time.

A minimal service::

    class Heartbeat:
        name = "heartbeat"

        def __init__(self, life: Lifecycle) -> None:
            self.life = life

        def start(self, stack: ExitStack) -> None:
            self.life.spawn(stack, self._loop, "cadenza-heartbeat")

        def _loop(self) -> None:
            while not self.life.pause(30.0):  # True once the process stops
                ...
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Protocol, runtime_checkable

from cadenza.clock import Clock


@runtime_checkable
class Service(Protocol):
    """A part of a process with a lifecycle: started once, stopped through the stack."""

    name: str
    """A short name, for logs and for finding the service in a node's list."""

    def start(self, stack: ExitStack) -> None:
        """Start (threads, processes) and push onto ``stack`` what stops it. Returns at once;
        a failure that must not keep the process from serving is logged, not raised."""
        ...


class Lifecycle:
    """What the services of one process share: the clock, the stop signal, the join
    timeout of a stop. Thread-safe."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.stopping = threading.Event()
        """Set when the process stops (by :meth:`stop`, or by a signal handler)."""
        self.join_timeout: float | None = None
        """Seconds a stop waits for each thread (None: as long as it takes)."""
        self._wakes: list[threading.Event] = []
        self._lock = threading.Lock()

    def wake_on_stop(self, event: threading.Event) -> threading.Event:
        """Set ``event`` when the process stops (a loop waiting on its own wake event then
        notices the stop at once); returns it."""
        with self._lock:
            self._wakes.append(event)
            stopping = self.stopping.is_set()
        if stopping:
            event.set()
        return event

    def stop(self, timeout: float | None = None) -> None:
        """Signal every service to stop (the stack's callbacks then wait for them)."""
        self.join_timeout = timeout
        self.stopping.set()
        with self._lock:
            wakes = list(self._wakes)
        for event in wakes:
            event.set()

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` of the clock's time, or until the process stops; returns whether
        it stops."""
        return self.clock.wait(self.stopping, seconds)

    def spawn(self, stack: ExitStack, target: Callable[[], None], name: str) -> threading.Thread:
        """Run ``target`` on a daemon thread; the stack joins it (up to the join timeout)."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        stack.callback(self.join, thread)
        return thread

    def join(self, thread: threading.Thread) -> None:
        """Wait for ``thread`` (up to the join timeout); never for the calling thread."""
        if thread is not threading.current_thread():
            thread.join(self.join_timeout)


class Loop:
    """A service that is one thread running ``body`` until it returns (it watches
    :attr:`Lifecycle.stopping`)."""

    def __init__(self, name: str, life: Lifecycle, body: Callable[[], None]) -> None:
        self.name = name
        self.life = life
        self.body = body

    def start(self, stack: ExitStack) -> None:
        self.life.spawn(stack, self.body, f"cadenza-{self.name}")


class Begin:
    """A service that starts a part its process owns and closes after every service (the
    lease keeper's thread, the claimer process): its start pushes nothing."""

    def __init__(self, name: str, begin: Callable[[], None]) -> None:
        self.name = name
        self.begin = begin

    def start(self, stack: ExitStack) -> None:
        self.begin()
