"""Chained step starts (executor/isolation.py ``StepThreads``): a thread that finishes a step
takes the next chained one without sleeping; ``wake`` wakes threads only for chained steps;
``sweep`` gives each step chained for too long a thread of its own, so that no chained step
waits behind a long one; every chained step runs exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from cadenza.executor.isolation import StepThreads


def _wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


class _Ran:
    """What ran, how often, on which thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: Counter[str] = Counter()
        self.threads: dict[str, str] = {}

    def job(self, name: str) -> Callable[[], None]:
        def run() -> None:
            with self.lock:
                self.count[name] += 1
                self.threads[name] = threading.current_thread().name
        return run

    def total(self) -> int:
        with self.lock:
            return sum(self.count.values())


def test_a_blocked_chained_step_does_not_hold_the_others_after_a_sweep() -> None:
    threads = StepThreads()
    ran = _Ran()
    gate = threading.Event()
    blocking = threading.Event()
    released = threading.Event()

    def blocker() -> None:
        blocking.set()
        gate.wait(10)
        released.set()

    threads.chain(blocker)
    for k in range(5):
        threads.chain(ran.job(f"quick-{k}"))
    assert threads.chained == 6
    threads.wake(1)  # one thread: it takes the blocker first and blocks in it
    try:
        assert blocking.wait(5)
        assert threads.chained == 5 and ran.total() == 0  # queued behind the blocker
        time.sleep(0.02)
        assert threads.sweep(older_than=0.01) == 5
        assert threads.chained == 0
        assert _wait_for(lambda: ran.total() == 5)
        assert not released.is_set()  # the first is still blocked
        assert ran.count == Counter({f"quick-{k}": 1 for k in range(5)})
        assert threads.sweep(older_than=0.0) == 0  # nothing left to sweep
    finally:
        gate.set()
    assert released.wait(5)
    time.sleep(0.02)
    assert ran.count == Counter({f"quick-{k}": 1 for k in range(5)})  # each ran exactly once


def test_a_sweep_leaves_steps_chained_for_less_than_older_than() -> None:
    threads = StepThreads()
    ran = _Ran()
    threads.chain(ran.job("young"))
    assert threads.sweep(older_than=60.0) == 0
    assert threads.chained == 1 and ran.total() == 0
    assert threads.sweep() == 1
    assert _wait_for(lambda: ran.total() == 1)
    assert threads.chained == 0


def test_one_woken_thread_takes_every_chained_step_in_order() -> None:
    threads = StepThreads()
    order: list[str] = []
    names: set[str] = set()
    done = threading.Event()

    def job(name: str) -> Callable[[], None]:
        def run() -> None:
            order.append(name)
            names.add(threading.current_thread().name)
            if len(order) == 4:
                done.set()
        return run

    for k in range(4):
        threads.chain(job(f"s{k}"))
    threads.wake(1)
    assert done.wait(5)
    assert order == ["s0", "s1", "s2", "s3"]
    assert len(names) == 1  # taken one after the other by the thread woken, no other
    assert threads.chained == 0
    assert _wait_for(lambda: threads.idle == 1)


def test_wake_wakes_at_most_one_thread_per_chained_step() -> None:
    threads = StepThreads()
    submitted: list[Callable[[], None]] = []

    def spy(job: Callable[[], None]) -> None:
        submitted.append(job)

    threads.submit = spy  # type: ignore[method-assign]
    threads.wake(3)
    assert submitted == []  # nothing chained: nobody woken
    threads.chain(lambda: None)
    threads.chain(lambda: None)
    threads.wake(5)
    assert len(submitted) == 2
    threads.wake(1)
    assert len(submitted) == 3


def test_wake_with_nothing_chained_starts_and_wakes_no_thread() -> None:
    threads = StepThreads()
    threads.wake(4)
    assert threads._count == 0 and threads.idle == 0
    assert threads.warm(2) == 2
    assert _wait_for(lambda: threads.idle == 2)
    threads.wake(2)
    assert threads.idle == 2 and threads._count == 2  # none taken from the idle ones


def test_chained_steps_run_once_when_threads_and_sweeps_race() -> None:
    threads = StepThreads()
    ran = _Ran()
    count = 300
    threads.warm(4)
    for k in range(count):
        threads.chain(ran.job(f"r{k}"))
    threads.wake(3)
    while threads.chained:
        threads.sweep()  # races with the woken threads taking chained steps
    assert _wait_for(lambda: ran.total() == count)
    time.sleep(0.02)
    assert ran.count == Counter({f"r{k}": 1 for k in range(count)})
    assert threads.chained == 0
