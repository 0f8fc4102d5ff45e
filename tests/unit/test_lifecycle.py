"""The start/stop protocol of services (cadenza.lifecycle): start in list order, stop in
reverse on one stack, loops paced by the clock and woken by the stop."""

from __future__ import annotations

import threading
from contextlib import ExitStack

from cadenza.clock import FakeClock
from cadenza.lifecycle import Begin, Lifecycle, Loop, Service


class Recorded:
    """A service that notes its start and its stop."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def start(self, stack: ExitStack) -> None:
        self.log.append(f"start {self.name}")
        stack.callback(self.log.append, f"stop {self.name}")


def test_services_stop_in_reverse_of_their_start_after_the_stop_signal() -> None:
    log: list[str] = []
    life = Lifecycle(FakeClock())
    services: list[Service] = [Recorded("a", log), Recorded("b", log),
                               Begin("c", lambda: log.append("begin c"))]
    assert all(isinstance(s, Service) for s in services)
    with ExitStack() as stack:
        stack.callback(log.append, "close parts")  # what the process built before
        for service in services:
            service.start(stack)
        stack.callback(lambda: log.append(f"stopping={life.stopping.is_set()}"))
        life.stop(timeout=1)
    assert log == ["start a", "start b", "begin c", "stopping=True", "stop b", "stop a",
                   "close parts"]
    assert life.join_timeout == 1


def test_a_loop_is_paced_by_the_clock_and_ends_at_the_stop() -> None:
    clock = FakeClock()
    life = Lifecycle(clock)
    rounds: list[float] = []

    def body() -> None:
        while not life.pause(10):
            rounds.append(clock.monotonic())

    stack = ExitStack()
    Loop("ticker", life, body).start(stack)
    assert clock.wait_until_idle(1)
    assert rounds == []  # no round before the clock moved
    clock.advance_idle(9.5, 1)
    assert rounds == []
    clock.advance_idle(0.5, 1)
    assert len(rounds) == 1
    life.stop(timeout=5)
    stack.close()  # joins the thread: the stop ended its wait at once
    assert [t for t in threading.enumerate() if t.name == "cadenza-ticker"] == []


def test_an_event_registered_for_the_stop_is_set_by_it() -> None:
    life = Lifecycle(FakeClock())
    wake = life.wake_on_stop(threading.Event())
    assert not wake.is_set()
    life.stop()
    assert wake.is_set()
    assert life.wake_on_stop(threading.Event()).is_set()  # registered after the stop
