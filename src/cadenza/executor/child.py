"""The child process of a step with ``isolation = "process"`` (SPEC §4, §7).

The parent (:func:`cadenza.executor.isolation.run_in_process`) starts :func:`child_main` with
multiprocessing's ``spawn`` method: a fresh interpreter, on every OS, that imports only what
it needs. The child

1. leads its own session on POSIX (``os.setsid``), so that killing its process group also
   stops what it started, and the terminal's Ctrl-C reaches the parent only;
2. watches its parent and exits (killing its own descendants) if the parent disappears;
3. puts the home's ``plugins/`` first on ``sys.path``, validates the step's config again with
   its type's ``Config`` and runs ``run(ctx, config)`` with an
   :class:`~cadenza.executor.context.ExecutionContext` whose log lines and events are sent to
   the parent, and whose ``ctx.connection(name)`` opens this process's own engines;
4. commits its connections, then sends ``("result", rows, output_json)``, or rolls back and
   sends ``("error", ErrorInfo)``.

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
"""

from __future__ import annotations

import importlib
import json
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
    fence: Any = None  # a context.Fence; None: the run is not bound in this process

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


def child_main(spec: ChildSpec, conn: Any) -> None:
    """Entry point of the child process (see the module docstring)."""
    clock = SystemClock()
    output = guard_output(spec.home)
    _detach()
    _watch_parent(spec.parent_pid, clock)
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
        )
        result = check_result(step_type().run(ctx, config), spec.step.name)
        ctx.finish(success=True)
        send(("result", result.rows, json.dumps(dict(result.output), allow_nan=False)))
    except BaseException as exc:  # everything is reported to the parent, nothing escapes
        if ctx is not None:
            try:
                ctx.finish(success=False)
            except BaseException:  # the step's own error is the one that matters
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
