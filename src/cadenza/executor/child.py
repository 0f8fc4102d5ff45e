"""The child process of a step with ``isolation = "process"`` (docs/running.md, docs/leases.md).

The parent (:func:`cadenza.executor.isolation.run_in_process`) starts :func:`child_main` with
multiprocessing's ``spawn`` method: a fresh interpreter, on every OS, that imports only what
it needs. The child

1. leads its own session on POSIX (``os.setsid``), so that killing its process group also
   stops what it started, and the terminal's Ctrl-C reaches the parent only;
2. watches its parent and exits (killing its own descendants) if the parent disappears, and
   keeps **its own deadline**: the end of the run's lease minus a margin, which the parent
   extends over a second pipe at each lease renewal and each of its ticks. When the deadline
   passes without an extension (the parent is stopped, hung, or cannot renew), the child
   kills what it started and exits at once with :data:`LEASE_EXIT`: it stops before another
   node may take the run (docs/leases.md "The child's own deadline");
3. puts the home's ``plugins/`` first on ``sys.path``, validates the step's config again with
   its type's ``Config`` and runs ``run(ctx, config)`` with an
   :class:`~cadenza.executor.context.ExecutionContext` whose log lines and events are sent to
   the parent, and whose ``ctx.connection(name)`` opens this process's own engines;
4. commits its connections, ends every process the step started that is still alive
   (:func:`cadenza.executor.processes.end_leftovers`: it is a child subreaper on Linux and
   marks its environment with :data:`~cadenza.executor.processes.MARKER_ENV`) and sends a
   WARNING line naming them, then sends ``("result", rows, output_json)``; or rolls back,
   ends the leftovers the same way and sends ``("error", ErrorInfo)``.

``ctx.checkpoint`` and ``ctx.once`` in the child write to the store themselves: the spec
carries a :class:`~cadenza.executor.context.Fence` (the store's URL and the run's lease
epoch), filled when the spec is made in the parent from the run the tracker bound
(:func:`~cadenza.executor.context.bind_run`); the child opens the store on first use and
every write is fenced on the epoch in the database, as the parent's would be.

What the child (or a program it starts) prints on its stdout and stderr goes through the
home's redactor and loses its control characters before it reaches the parent's terminal
(:mod:`cadenza.executor.child_output`).

The child reads time from a :class:`~cadenza.clock.SystemClock` of its own (a clock object
cannot cross the spawn pipe): its ``ctx.clock``, its log lines' times and its deadline
(``timeout_seconds`` from its start). The parent enforces the step's timeout on its clock.
Its lease deadline arrives as a time of the system's monotonic clock (``time.monotonic``:
one clock for every process of the host, on Linux, macOS and Windows).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cadenza.clock import Clock, SystemClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.params import Scope
from cadenza.executor.child_output import guard_output
from cadenza.executor.errors import ErrorInfo
from cadenza.steps.runtime import RunInfo, StepInfo

WATCH_SECONDS = 1.0
"""How often the child checks that its parent is still alive."""
LEASE_EXIT = 75
"""The exit code of a child that stopped itself because its lease deadline passed."""


@dataclass(frozen=True)
class ChildSpec:
    """Everything the child needs, picklable: no open handle, no plugin class."""

    home: Path
    step_class: str
    config: dict[str, Any]
    params: dict[str, Any]
    run: RunInfo
    step: StepInfo
    settings: Settings
    scope: Scope
    log_level: str
    timeout_seconds: float
    outputs: dict[str, Any] = field(default_factory=dict)
    parent_pid: int = 0
    marker: str = ""
    """The value of ``CADENZA_STEP_MARKER`` for the processes of this attempt ("": none)."""
    fence: Any = None  # a context.Fence; None: the run is not bound in this process
    resources: dict[str, Any] = field(default_factory=dict)
    """Pool -> the LeasedResource members the run holds (``ctx.resources``)."""

    def __post_init__(self) -> None:
        if self.fence is None:  # made in the parent: carry the run's binding to the child
            from cadenza.executor.context import bound_fence

            object.__setattr__(self, "fence", bound_fence(self.run.id))

    @property
    def plugins(self) -> Path:
        """The home's ``plugins/`` directory."""
        return self.home / "plugins"


def step_class_path(cls: type) -> str:
    """``"module:QualName"`` of a step type class, importable in a child."""
    return f"{cls.__module__}:{cls.__qualname__}"


def load_step_class(path: str) -> Any:
    """The class named by :func:`step_class_path`."""
    module, _, name = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def child_main(spec: ChildSpec, conn: Any, deadlines: Any = None) -> None:
    """Entry point of the child process (see the module docstring). ``deadlines``: the
    reading end of the pipe its lease deadlines arrive on (None: no lease deadline)."""
    clock = SystemClock()
    output = guard_output(spec.home)
    _detach()
    started = _mark(spec.marker)
    _watch_parent(spec.parent_pid, clock)
    if deadlines is not None:
        _watch_lease(deadlines, clock, spec, started)
    lock = threading.Lock()

    def send(message: Any) -> None:
        with lock:
            conn.send(message)

    from cadenza.executor.context import ExecutionContext, check_result, fence_progress
    from cadenza.executor.runlog import SendingLog

    connections: Any = None
    ctx: ExecutionContext | None = None
    try:
        plugins = str(spec.plugins)
        if plugins not in sys.path:
            sys.path.insert(0, plugins)
        step_type = load_step_class(spec.step_class)
        config = step_type.Config.model_validate(spec.config)
        connections = _LazyConnections(spec.home, spec.settings)
        log = SendingLog(spec.log_level, send, clock.now)
        ctx = ExecutionContext(
            params=spec.params,
            run=spec.run,
            step=spec.step,
            log=log.logger(spec.step.name),
            home=spec.home,
            settings=spec.settings,
            scope=spec.scope,
            connections=connections,
            events=lambda event: send(("event", event)),
            outputs=spec.outputs,
            timeout_seconds=spec.timeout_seconds,
            progress=None if spec.fence is None else fence_progress(spec.fence, spec.run),
            clock=clock,
            resources=spec.resources,
        )
        result = check_result(step_type().run(ctx, config), spec.step.name,
                              spec.settings.limits.step_output_bytes)
        ctx.finish(success=True)
        _end_leftovers(spec, started, send, clock)
        send(("result", result.rows, json.dumps(dict(result.output), allow_nan=False)))
    except BaseException as exc:  # everything is reported to the parent, nothing escapes
        if ctx is not None:
            try:
                ctx.finish(success=False)
            except BaseException:  # the step's own error is the one that matters
                pass
        try:
            _end_leftovers(spec, started, send, clock)
        except BaseException:  # the parent ends what is left once this child is gone
            pass
        try:
            send(("error", ErrorInfo.of(exc)))
        except (OSError, ValueError):
            pass
    finally:
        if ctx is not None:
            ctx.close_progress()
        if connections is not None:
            connections.close()
        output.close()
        conn.close()


class _LazyConnections:
    """The child's connections, opened on first use: a step that uses none never imports
    SQLAlchemy or httpx, and the child starts sooner."""

    def __init__(self, home: Path, settings: Settings) -> None:
        self.home = home
        self.settings = settings
        self._real: Any = None

    def _get(self) -> Any:
        if self._real is None:
            from cadenza.executor.connections import Connections

            self._real = Connections(self.home, self.settings)
        return self._real

    def definition(self, name: str) -> Any:
        return self._get().definition(name)

    def sql_engine(self, name: str) -> Any:
        return self._get().sql_engine(name)

    def http_client(self, name: str, **kwargs: Any) -> Any:
        return self._get().http_client(name, **kwargs)

    def close(self) -> None:
        if self._real is not None:
            self._real.close()


def _detach() -> None:
    setsid = getattr(os, "setsid", None)
    if setsid is not None:
        try:
            setsid()
        except OSError:
            pass  # already a group leader


def _watch_parent(parent_pid: int, clock: Clock) -> None:
    if not parent_pid:
        return

    def watch() -> None:
        import psutil  # type: ignore[import-untyped]

        while True:
            clock.sleep(WATCH_SECONDS)
            if os.getppid() != parent_pid or not psutil.pid_exists(parent_pid):
                for proc in psutil.Process().children(recursive=True):
                    try:
                        proc.kill()
                    except psutil.Error:
                        pass
                os._exit(70)

    threading.Thread(target=watch, name="cadenza-parent-watch", daemon=True).start()


def _mark(marker: str) -> float:
    """Mark the processes this child will start (:data:`~cadenza.executor.processes.
    MARKER_ENV`) and become their subreaper (Linux); returns this process's start time."""
    import psutil

    from cadenza.executor.processes import MARKER_ENV, become_subreaper

    if marker:
        os.environ[MARKER_ENV] = marker
    become_subreaper()
    try:
        return float(psutil.Process().create_time())
    except psutil.Error:
        return 0.0


def _session() -> int | None:
    """The session this child leads (POSIX), None when it leads none: then no session is
    killed, since it would be the parent's (a terminal's)."""
    getsid = getattr(os, "getsid", None)
    if getsid is None:
        return None
    try:
        sid = int(getsid(0))
    except OSError:
        return None
    return sid if sid == os.getpid() else None


def _end_leftovers(spec: ChildSpec, started: float, send: Any, clock: Clock) -> None:
    """End the processes the step started and left running; say which in the run log."""
    from cadenza.executor.processes import end_leftovers

    killed = end_leftovers(os.getpid(), spec.marker, started, _session())
    if killed:
        send(("log", clock.now(), "WARNING",
              f"killed {len(killed)} process(es) the step left running: "
              + "; ".join(killed)))


def _watch_lease(deadlines: Any, clock: Clock, spec: ChildSpec, started: float) -> None:
    """Keep the lease deadline the parent sends (a ``time.monotonic`` value); when it
    passes, end what the step started and exit with :data:`LEASE_EXIT` (see the module
    docstring). The pipe closed: the parent is done or gone (the parent watch handles
    that)."""

    def watch() -> None:
        deadline = math.inf  # the parent's first deadline is already in the pipe
        while True:
            left = deadline - clock.monotonic()
            if left <= 0:
                break
            try:
                if deadlines.poll(None if math.isinf(left) else left):
                    deadline = float(deadlines.recv())
            except (EOFError, OSError):
                return
        from cadenza.executor.processes import find_leftovers, kill_all

        try:  # the step's processes first, without waiting for them: every moment counts
            kill_all(find_leftovers(os.getpid(), spec.marker, started, _session()), wait=False)
        finally:
            # Said on stderr from a thread of its own: a full pipe must not delay the exit.
            threading.Thread(target=_say_stopped, args=(spec,), daemon=True).start()
            clock.sleep(0.1)
            os._exit(LEASE_EXIT)

    threading.Thread(target=watch, name="cadenza-lease-watch", daemon=True).start()


def _say_stopped(spec: ChildSpec) -> None:
    try:
        sys.stderr.write(f"cadenza: step {spec.step.name!r} of run {spec.run.id} stopped "
                         "itself: its run's lease was not extended in time\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
