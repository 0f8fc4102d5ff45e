"""Where a step's code runs, and how it is stopped at its deadline (docs/leases.md "Timeouts").

``thread``
    The step runs in a thread of the worker. A thread cannot be killed: at the deadline the
    step is marked (``ctx.cancelled()`` becomes true, its further log lines are dropped), it
    fails with :class:`~cadenza.executor.errors.StepTimeout`, and the thread is abandoned;
    when it returns, its ``ctx.connection`` transactions are rolled back, never committed.
    Its ``ctx`` also knows the run's lease: once the lease its worker surely holds is about
    to end without a renewal, ``ctx.cancelled()`` is true and nothing more is committed
    (docs/leases.md "Thread isolation: what is guaranteed, what is not").
``process``
    The step runs in a child process started with multiprocessing's ``spawn`` method (the
    same on Linux, macOS and Windows; see :mod:`cadenza.executor.child`). Its ``ctx.log``
    lines and ``ctx.event`` events arrive through a pipe while it runs. At the deadline the
    whole process tree is killed (psutil: the descendants, then the child; on POSIX the child
    also leads its own session, whose process group is killed too), so the run ends within
    the timeout plus a moment and no process is left behind. At the end of every attempt,
    success included, the processes the step started and left running are ended, even
    those in a new session or double-forked (:mod:`cadenza.executor.processes`; the child
    does it before it reports, the parent after a child that could not), and a WARNING line
    of the run log names them.

    The child also keeps its own deadline, the end of the run's lease minus a margin
    (:meth:`~cadenza.executor.control.RunControl.lease_left`): the parent sends it over a
    second pipe at each of its ticks and at each lease renewal. A child whose parent stops
    extending it (stopped with SIGSTOP, hung, cut from the store) ends what it started and
    exits before another node may take the run.

A node's worker runs a thread step itself (:meth:`ThreadStep.run_here`): handing a short
step to another thread and waking the worker at its end cost more than the step (two
thread switches per run, a third of a no-op run's time). Should the step run longer than
:data:`PROMOTE_AFTER` (or its timeout, if shorter), :data:`INLINE_WATCH` hands the run to a
new worker thread, which waits for the step as above; the first thread, once the step
returns, is its step thread and ends there (:class:`TakenOver`).

Both wait in slices of :data:`TICK` seconds and call ``on_tick`` between slices, so that the
executor can write the log lines of a long step while it runs. Deadlines count on the step's
clock (``ctx.clock``, the executor's): under a :class:`~cadenza.clock.FakeClock` a thread
step times out when the test moves the clock past its deadline. Waits for the operating
system (a child's pipe, a killed process to be gone) are real waits.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import queue
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from cadenza.clock import Clock, SystemClock
from cadenza.domain.errors import Retryable
from cadenza.executor.child import LEASE_EXIT, ChildSpec, child_main
from cadenza.executor.context import ExecutionContext, check_result
from cadenza.executor.control import RunControl
from cadenza.executor.errors import RemoteError, StepTimeout, rebuild
from cadenza.executor.processes import StepJob, end_leftovers, kill_tree
from cadenza.executor.runlog import RunLog
from cadenza.steps.runtime import StepResult
from cadenza.store.boundary import LogLine

TICK = 0.5
"""Seconds between the checks of a waiting executor (deadline, pending log lines)."""
PROMOTE_AFTER = TICK
"""Seconds a step run by its worker itself (:meth:`ThreadStep.run_here`) may take before
another thread takes the run over and waits for it (its deadline, its ticks)."""
IDLE_SECONDS = 60.0
"""A step thread with nothing to do for this long exits."""
JOIN_SECONDS = 5.0
"""How long a child that sent its result may take to exit before it is killed."""
_REAL = SystemClock()
"""Waits for the operating system (a killed process to be gone) are in real time."""


log = logging.getLogger("cadenza.executor")


class TakenOver(BaseException):
    """Raised in a worker that ran a step itself once the step returns, when another thread
    took the run over meanwhile (:meth:`ThreadStep.run_here`): the run is not this thread's
    any more; it must leave it untouched."""


class ThreadStep:
    """A thread-isolated step: :meth:`start` hands it to a step thread (its ``timeout``
    counts from then), :meth:`wait` waits for it. Split so that a node can prepare the
    first step of a run before its due time, start the first steps of a burst of runs from
    one thread and let each run's worker wait (:meth:`RunTracker.launch`)."""

    def __init__(self, call: Callable[[], Any], ctx: ExecutionContext, log: RunLog,
                 timeout: float) -> None:
        self.ctx = ctx
        self.log = log
        self.timeout = timeout
        self.lock = threading.Lock()
        self.finished = False
        """The step's call returned (its outcome is known)."""
        self._done: threading.Event | None = None  # made for a thread that waits, only
        self.state = "running"  # running -> finishing -> done, or running -> abandoned
        self.outcome: list[Any] = [None, None]  # result, error
        self.call = call
        self.deadline = math.inf
        self.promoted = False
        """Run by its worker (:meth:`run_here`) and taken over by another thread."""
        self._settling: threading.Event | None = None
        """Set while the watch starts the thread that takes the run over (:meth:`promote`
        to :meth:`settle`): a worker whose step returns then waits for the answer."""

    def _arm(self) -> None:
        """The step starts now: its timeout, and its context's (``ctx.remaining()``,
        ``ctx.cancelled()``), count from here, not from when it was prepared."""
        self.deadline = self.ctx.clock.monotonic() + self.timeout
        self.ctx.restart(self.deadline)

    def start_here(self) -> Callable[[], None]:
        """Start the step in the calling thread (a step thread already): its timeout counts
        from now; returns the call that runs it, to be made at once."""
        self._arm()
        return self._body

    def start(self) -> ThreadStep:
        """Hand the step to a step thread now; returns itself."""
        self._arm()
        STEP_THREADS.submit(self._body)
        return self

    def run_here(self, watch: InlineWatch, on_promote: Callable[[], None]) -> None:
        """Run the step in the calling thread (a node's worker) now; its timeout counts from
        now. Should it still run after :data:`PROMOTE_AFTER` seconds (or its timeout, if
        shorter), ``watch`` calls ``on_promote`` from its own thread, which starts the
        thread that takes the run over and waits for the step (:meth:`wait`); this thread
        then raises :class:`TakenOver` once the step returns (its outcome is the other
        thread's). Returns when the step is done and the run is still this thread's."""
        self._arm()
        watch.add(self, min(PROMOTE_AFTER, max(0.0, self.timeout)), on_promote)
        self._body()
        watch.discard(self)
        with self.lock:
            promoted, settling = self.promoted, self._settling
        if settling is not None:
            # It returned while the watch starts the thread that takes the run over: that
            # thread owns the run only once it started; if none could, the run stays here.
            settling.wait()
            with self.lock:
                promoted = self.promoted
        if promoted:
            raise TakenOver

    def promote(self) -> bool:
        """Whether the step still runs in its worker and is now being taken over (see
        :meth:`run_here`; the step's end and the promotion are decided under its lock).
        The caller must then call :meth:`settle`, whatever happens."""
        with self.lock:
            if self.state != "running" or self.promoted:
                return False
            self.promoted = True
            self._settling = threading.Event()
            return True

    def settle(self, taken: bool) -> bool:
        """End what :meth:`promote` began: ``taken``, a thread took the run over; not, none
        could and the run stays with its worker (which may be waiting for this answer).
        Returns whether the step still runs."""
        with self.lock:
            if not taken:
                self.promoted = False
            settling, self._settling = self._settling, None
            running = self.state == "running"
        if settling is not None:
            settling.set()
        return running

    def _body(self) -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = self.call()
        except BaseException as exc:  # everything the step raises is recorded, not lost
            error = exc
        late = self.ctx.clock.monotonic() >= self.deadline
        with self.lock:
            abandoned = self.state == "abandoned"
            if not abandoned:
                self.state = "finishing"
        if late and not abandoned:
            # It returned at or after its deadline, before its waiter looked (a step that
            # polls ctx.cancelled() stops right at it): timed out all the same, whichever
            # thread noticed first, and its ctx.connection work is rolled back.
            self.ctx.cancel()
            error, result = self._timed_out("it returned after its deadline"), None
        try:
            self.ctx.finish(success=error is None and not abandoned)
        except BaseException as exc:
            error = error or exc
        self.outcome[0], self.outcome[1] = result, error
        with self.lock:
            if not abandoned:
                self.state = "done"
            self.finished = True
            done = self._done
        if done is not None:
            done.set()

    @property
    def done(self) -> threading.Event:
        """Set once the step's call returned (made when first asked for: a step that its
        worker runs itself and that returns in time has no thread waiting for it)."""
        with self.lock:
            if self._done is None:
                self._done = threading.Event()
                if self.finished:
                    self._done.set()
            return self._done

    def _timed_out(self, how: str) -> StepTimeout:
        return StepTimeout(f"step {self.ctx.step.name!r} timed out after "
                           f"{_seconds(self.timeout)}; {how}, and its ctx.connection work "
                           "is rolled back")

    def _abandon(self) -> bool:
        with self.lock:
            if self.state != "running":
                return False
            self.state = "abandoned"
        self.ctx.cancel()
        self.log.close_step(self.ctx.step.name)
        return True

    def wait(self, on_tick: Callable[[], None]) -> StepResult:
        """Wait for the step, calling ``on_tick`` every :data:`TICK` seconds; at the
        deadline abandon it and raise :class:`StepTimeout`."""
        if not self.finished:
            self._wait(on_tick)
        result, error = self.outcome
        if isinstance(error, Exception):
            raise error
        if error is not None:  # SystemExit and the like must not stop the worker
            raise RemoteError(type(error).__name__, str(error), "fatal")
        return check_result(result, self.ctx.step.name,
                            self.ctx.settings.limits.step_output_bytes)

    def _wait(self, on_tick: Callable[[], None]) -> None:
        deadline, done, clock = self.deadline, self.done, self.ctx.clock
        try:
            while not clock.wait(done, max(0.0, min(TICK, deadline - clock.monotonic()))):
                if clock.monotonic() < deadline:
                    on_tick()
                    continue
                if self._abandon():
                    raise self._timed_out(
                        "it runs in a thread (isolation = \"thread\"), which cannot be "
                        "stopped: it was told to stop (a SQL statement is canceled on the "
                        "server, an HTTP request aborted), abandoned")
                done.wait()  # it was committing when the deadline came: let it finish
                break
        except BaseException:
            # Ctrl-C, or the run's lease was lost while waiting: whatever the thread still
            # does is not committed.
            self._abandon()
            raise


class StepThreads:
    """Threads that run thread-isolated steps, kept between steps (starting a thread per
    step costs more than a short step). A thread idle for :data:`IDLE_SECONDS` exits; one
    still busy with an abandoned step simply comes back when that step returns.

    Chained jobs (a node's staged burst, executor/staging.py): :meth:`chain` queues jobs
    (there: start a claimed run and run its first step) that a thread finishing a job takes
    next *without going to sleep*; :meth:`wake` wakes a few idle threads to take them.
    Waking one thread per job costs more than a short step on a busy machine (a context
    switch and a turn of the interpreter lock each), so the first steps of a crowded minute
    start sooner this way. A queued job must not wait behind a long one, so :meth:`sweep`
    gives every job queued for longer than a moment a thread of its own (the node sweeps
    between the chunks of a burst and at its end). How long a job has been queued is real
    time (``clock``, default the system clock): it is about threads waking, not schedules."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._idle: list[_StepThread] = []
        self._count = 0
        self._chained: deque[tuple[float, Callable[[], None]]] = deque()

    def chain(self, job: Callable[[], None]) -> None:
        """Queue ``job`` for the next thread that finishes a step (see the class doc)."""
        with self._lock:
            self._chained.append((self.clock.monotonic(), job))

    def wake(self, count: int) -> None:
        """Wake ``count`` threads to take chained steps (fewer if fewer are queued)."""
        with self._lock:
            count = min(count, len(self._chained))
        for _ in range(count):
            self.submit(_nothing)

    def sweep(self, older_than: float = 0.0) -> int:
        """Give each step chained for ``older_than`` seconds or more a thread of its own;
        returns how many."""
        limit = self.clock.monotonic() - older_than
        taken: list[Callable[[], None]] = []
        with self._lock:
            while self._chained and self._chained[0][0] <= limit:
                taken.append(self._chained.popleft()[1])
        for job in taken:
            self.submit(job)
        return len(taken)

    @property
    def chained(self) -> int:
        """Steps chained and not taken yet."""
        return len(self._chained)

    def _next_chained(self) -> Callable[[], None] | None:
        if not self._chained:
            return None
        with self._lock:
            return self._chained.popleft()[1] if self._chained else None

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on an idle thread, or a new one."""
        with self._lock:
            helper = self._idle.pop() if self._idle else None
            if helper is None:
                self._count += 1
                helper = _StepThread(self, self._count)
                helper.start()
        helper.inbox.put(job)

    def warm(self, count: int) -> int:
        """Start threads until at least ``count`` are idle (a node does this before a crowded
        due time: starting a thread costs more than the no-op step it would run); returns
        how many were started. They exit after :data:`IDLE_SECONDS` unused, as any other."""
        started = 0
        while True:
            with self._lock:
                if len(self._idle) >= count:
                    return started
                self._count += 1
                helper = _StepThread(self, self._count)
                self._idle.append(helper)
            helper.start()
            started += 1

    @property
    def idle(self) -> int:
        """Threads waiting for a step now."""
        with self._lock:
            return len(self._idle)

    def _release(self, helper: _StepThread) -> None:
        with self._lock:
            self._idle.append(helper)

    def _retire(self, helper: _StepThread) -> bool:
        with self._lock:
            if helper in self._idle:
                self._idle.remove(helper)
                return True
            return False  # a job was handed to it just now


class _StepThread(threading.Thread):
    def __init__(self, owner: StepThreads, number: int) -> None:
        super().__init__(name=f"cadenza-step-{number}", daemon=True)
        self.owner = owner
        self.inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            try:
                job = self.inbox.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                if self.owner._retire(self):
                    return
                continue
            job()
            while (job := self.owner._next_chained()) is not None:  # type: ignore[assignment]
                job()
            self.owner._release(self)


def _nothing() -> None:
    """The job of a thread woken to take chained steps."""


STEP_THREADS = StepThreads()
"""The process's step threads."""


_QUIET_LOOKS = 4
"""Looks of the watch finding no step running before it sleeps until the next one."""


class InlineWatch:
    """Watches the steps that workers run themselves (:meth:`ThreadStep.run_here`) and
    has the runs of the ones still running after their time taken over by another thread.
    One thread per process, started at the first step; it looks about twice a second while
    steps run and sleeps when none does. A step costs it a dict entry set and removed (no
    lock, no wake: a short step is gone before the watch looks). Its times are real (it is
    about threads)."""

    def __init__(self) -> None:
        self._running: dict[ThreadStep, tuple[float, Callable[[], None]]] = {}
        self._wake = threading.Event()
        self._next_look = -math.inf
        """When the watch looks next (real monotonic time; inf: when an add wakes it)."""
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def add(self, step: ThreadStep, after: float, on_promote: Callable[[], None]) -> None:
        """Call ``on_promote`` after ``after`` seconds if ``step`` still runs then (unless
        :meth:`discard` was called first)."""
        at = _REAL.monotonic() + after
        self._running[step] = (at, on_promote)
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop,
                                                     name="cadenza-step-watch", daemon=True)
                    self._thread.start()
        elif at < self._next_look:
            self._wake.set()  # sooner than the watch would look: most adds do not

    def discard(self, step: ThreadStep) -> None:
        """``step`` returned in its worker: nothing to watch."""
        self._running.pop(step, None)

    @property
    def watched(self) -> int:
        """Steps watched now."""
        return len(self._running)

    def _loop(self) -> None:
        quiet = 0
        while True:
            self._wake.clear()
            now = _REAL.monotonic()
            soonest = math.inf
            due: list[tuple[ThreadStep, Callable[[], None]]] = []
            for step, (at, on_promote) in list(self._running.items()):
                if at > now:
                    soonest = min(soonest, at)
                elif self._running.pop(step, None) is not None:
                    due.append((step, on_promote))
            for step, on_promote in due:
                self._promote(step, on_promote)
            if soonest < math.inf or due:
                quiet = 0
                wait: float | None = max(0.0, min(soonest, now + PROMOTE_AFTER) - now)
            else:
                quiet += 1
                wait = PROMOTE_AFTER if quiet <= _QUIET_LOOKS else None
            self._next_look = math.inf if wait is None else now + wait
            if wait is None and self._running:
                continue  # added just now: look again before sleeping
            self._wake.wait(wait)

    def _promote(self, step: ThreadStep, on_promote: Callable[[], None]) -> None:
        if not step.promote():
            return
        failure: Exception | None = None
        taken = False
        try:
            on_promote()
            taken = True
        except Exception as exc:  # no thread could be started: the worker keeps its run
            failure = exc
        finally:
            running = step.settle(taken)
        if failure is None:
            return
        if running:
            log.error("taking over a run whose step runs long failed (%s); its worker keeps "
                      "the run, and the take-over is tried again in %.1f s", failure,
                      PROMOTE_AFTER, exc_info=failure)
            self.add(step, PROMOTE_AFTER, on_promote)
        else:
            log.error("taking over a run whose step runs long failed (%s); the step has "
                      "returned meanwhile and its worker finishes the run", failure,
                      exc_info=failure)


INLINE_WATCH = InlineWatch()
"""The process's watch over steps run by their workers."""


def run_in_process(
    spec: ChildSpec,
    log: RunLog,
    timeout: float,
    on_tick: Callable[[], None],
    clock: Clock | None = None,
    lease: RunControl | None = None,
) -> StepResult:
    """Run the step described by ``spec`` in a spawned child process and wait for its
    result, at most ``timeout`` seconds of ``clock`` (default: the system clock); then end
    its process tree and whatever else it started, if still there (the run log says what
    was killed). ``lease``: the run's control, whose lease gives the child its own deadline
    (see the module docstring)."""
    clock = clock if clock is not None else _REAL
    if not spec.marker:
        spec = replace(spec, marker=uuid.uuid4().hex)
    mp = multiprocessing.get_context("spawn")
    reader, writer = mp.Pipe(duplex=False)
    deadlines, extender = mp.Pipe(duplex=False) if lease is not None else (None, None)
    process = mp.Process(target=child_main, args=(spec, writer, deadlines), daemon=True,
                         name=f"cadenza-step-{spec.step.name}")
    deadline = clock.monotonic() + timeout
    started = _REAL.now().timestamp()
    process.start()
    writer.close()  # the child holds the only writer: EOF here means it is gone
    job = StepJob()
    if process.pid is not None:
        job.add(process.pid)
    extend: _Extender | None = None
    forget: Callable[[], None] | None = None
    if lease is not None and extender is not None and deadlines is not None:
        deadlines.close()
        extend = _Extender(extender, lease)
        extend()  # the child's first deadline, in the pipe before it looks
        forget = lease.on_lease(extend)  # each renewal of the keeper extends it at once
    step = spec.step.name
    answered = False
    try:
        while True:
            left = deadline - clock.monotonic()
            if left <= 0:  # the process tree is ended on the way out (finally)
                raise StepTimeout(f"step {step!r} timed out after {_seconds(timeout)}; its "
                                  "process and every process it started were killed")
            try:
                ready = reader.poll(min(TICK, left))
            except (EOFError, OSError):
                ready = True
            if extend is not None:
                extend()
            on_tick()
            if not ready:
                continue
            try:
                message = reader.recv()
            except (EOFError, OSError):
                process.join(1.0)
                if process.exitcode == LEASE_EXIT:
                    raise Retryable(f"step {step!r}: its process stopped itself because the "
                                    "run's lease was not extended in time") from None
                raise Retryable(f"step {step!r}: its process ended without a result "
                                f"(exit code {process.exitcode})") from None
            kind = message[0]
            if kind == "log":
                _, ts, level, text = message
                log.add_line(LogLine(ts, level, step, text))
            elif kind == "event":
                log.event(message[1], step)
            elif kind == "result":
                answered = True
                _, rows, output_json = message
                return check_result(StepResult(rows, json.loads(output_json)), step,
                                    spec.settings.limits.step_output_bytes)
            elif kind == "error":
                answered = True
                info = message[1]
                exc = rebuild(info)
                exc.__cadenza_traceback__ = info.traceback  # type: ignore[attr-defined]
                raise exc
    finally:
        if forget is not None:
            forget()
        reader.close()
        if answered:  # it is on its way out: give it a moment to close its connections
            process.join(JOIN_SECONDS)
        if process.exitcode is None:
            # Timed out, stopped, or slow to exit: its descendants (and, while it still leads
            # its session, the session's members) first, named in the run log, then the tree.
            _end_leftovers(process.pid, spec, started, log)
            kill_tree(process.pid)
        process.join(JOIN_SECONDS)
        if extend is not None:
            extend.close()
        if not answered:
            # It did not end its own leftovers (killed, timed out, crashed, stopped itself):
            # what escaped its tree still carries its marker.
            _end_leftovers(None, spec, started, log)
        job.terminate()
        if process.exitcode is not None:
            process.close()


class _Extender:
    """Sends the child its lease deadline: the end of the lease surely held minus the
    margin, as a ``time.monotonic`` value (one clock for every process of the host). Called
    by the waiting thread at each tick and by the lease keeper at each renewal."""

    def __init__(self, conn: Any, lease: RunControl) -> None:
        self.conn = conn
        self.lease = lease
        self.lock = threading.Lock()
        self.closed = False

    def __call__(self) -> None:
        left = self.lease.lease_left()
        if left is None:
            return
        with self.lock:
            if self.closed:
                return
            try:
                self.conn.send(_REAL.monotonic() + left)
            except (OSError, ValueError):  # the child is gone
                self.closed = True

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.conn.close()


def _end_leftovers(pid: int | None, spec: ChildSpec, started: float, log: RunLog) -> None:
    """End what the step started and left running, and say so in the run log. ``pid``: the
    child, still alive (None: gone, its pid may be reused: only its marker is looked for)."""
    session = None
    getsid = getattr(os, "getsid", None)
    if pid is not None and getsid is not None:
        try:
            session = pid if getsid(pid) == pid else None
        except OSError:
            session = None
    killed = end_leftovers(pid, spec.marker, started, session)
    if killed:
        log.add("WARNING", f"killed {len(killed)} process(es) the step left running: "
                           + "; ".join(killed), spec.step.name)


def _seconds(value: float) -> str:
    return f"{value:g}s" if value < 60 or not math.isfinite(value) else f"{value / 60:g}min"
