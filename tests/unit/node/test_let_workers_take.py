"""A decision lets idle workers take the runs the previous one left in the local queue
before it counts its free slots (cadenza.node.dispatcher.let_workers_take)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from cadenza.clock import SystemClock
from cadenza.node.dispatcher import let_workers_take


class _Counting(SystemClock):
    """The system's clock, counting its sleeps."""

    def __init__(self) -> None:
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        super().sleep(seconds)


def test_an_empty_queue_or_busy_workers_cost_no_wait() -> None:
    clock = _Counting()
    local: queue.SimpleQueue[Any] = queue.SimpleQueue()
    let_workers_take(local, lambda: 4, 5.0, clock)  # nothing to take
    local.put("run")
    let_workers_take(local, lambda: 0, 5.0, clock)  # every worker busy with a run
    assert clock.sleeps == 0


def test_the_decision_waits_until_idle_workers_took_the_runs() -> None:
    local: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for k in range(8):
        local.put(k)
    waiting = [2]
    taken: list[int] = []

    def worker() -> None:
        time.sleep(0.01)  # woken late, as a worker thread may be
        while True:
            try:
                taken.append(local.get_nowait())
            except queue.Empty:
                break
        waiting[0] = 0

    thread = threading.Thread(target=worker)
    thread.start()
    began = time.monotonic()
    let_workers_take(local, lambda: waiting[0], 5.0)
    thread.join()
    assert local.empty() and len(taken) == 8
    assert time.monotonic() - began < 4.0  # it returned when they were taken


def test_the_wait_is_bounded_when_nobody_takes_them() -> None:
    local: queue.SimpleQueue[Any] = queue.SimpleQueue()
    local.put("run")
    began = time.monotonic()
    let_workers_take(local, lambda: 1, 0.05)
    took = time.monotonic() - began
    assert 0.05 <= took < 2.0
    assert not local.empty()
