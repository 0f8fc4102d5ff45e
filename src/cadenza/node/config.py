"""The configuration a node runs with, its reload, and the watch of the two files.

:class:`ConfigHolder` holds the :class:`Current` configuration (the loaded files, the
:class:`~cadenza.executor.runner.Executor` built from them, the admission limits) and swaps
it on a valid reload. Runs claimed before a reload finish with the executor of their claim:
the executors replaced are kept (:attr:`Current.retired`) and closed with the node.

It watches ``cadenza.toml`` and ``jobs.toml`` (modification times, at most every
:data:`WATCH_SECONDS` of the node's clock) and asks for a reload when either changed. The
look is made by the thread that applies reloads, the node's dispatcher, which wakes at least
once a second anyway (:meth:`ConfigHolder.look_at_files`): a thread of its own would wake an
idle node once more every two seconds, and on some machines a thread's wake-up costs more
than the look itself (docs/benchmarks.md, "Idle").
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime

from cadenza.config.admission_limits import limits_from_loaded
from cadenza.config.loader import LoadedConfig
from cadenza.domain.admission import Limits
from cadenza.domain.errors import ConfigError
from cadenza.domain.events import EventType, Level
from cadenza.executor.runner import Executor
from cadenza.home import Home
from cadenza.lifecycle import Lifecycle
from cadenza.store.protocols import AuditLog

log = logging.getLogger("cadenza.node")

WATCH_SECONDS = 2.0
"""How often the files' modification times are compared (seconds of the node's clock)."""

Reloaded = Callable[[LoadedConfig, datetime], object]
"""Told of a configuration just applied, and the time of the reload."""


@dataclass
class Current:
    """What one configuration of the node consists of."""

    config: LoadedConfig
    executor: Executor
    limits: Limits
    retired: list[Executor] = field(default_factory=list)
    """Executors of earlier configurations (runs claimed with them may still run)."""


class ConfigHolder:
    """The node's current configuration: read it (:attr:`current`, :attr:`config`), reload
    it (:meth:`reload`, :meth:`request_reload`); as a service, the file watch."""

    name = "config"

    def __init__(self, home: Home, store: AuditLog, config: LoadedConfig, life: Lifecycle,
                 executor_for: Callable[[LoadedConfig], Executor]) -> None:
        """``executor_for`` builds the executor of a configuration (at start and at each
        valid reload)."""
        self.home = home
        self.store = store
        self.life = life
        self.executor_for = executor_for
        self.current = Current(config, executor_for(config), limits_from_loaded(config))
        self._listeners: list[Reloaded] = []
        self._requested = threading.Event()
        self._on_request: list[Callable[[], object]] = []
        self._files = (os.fspath(home.config_file), os.fspath(home.jobs_file))
        self._mtimes = self._stat()
        self._looked_at: float | None = None
        """When (the node's monotonic clock) :meth:`look_at_files` last looked."""

    @property
    def config(self) -> LoadedConfig:
        """The configuration applied now."""
        return self.current.config

    def on_reload(self, listener: Reloaded) -> None:
        """Call ``listener(config, now)`` after each reload that applied a configuration."""
        self._listeners.append(listener)

    def on_request(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` when a reload is requested (the thread that reloads wakes)."""
        self._on_request.append(listener)

    # -- reload ---------------------------------------------------------------------------

    def request_reload(self) -> None:
        """Reload at the next occasion, on the thread that serves requests (the node's
        dispatcher: a reload never lands in the middle of an admission decision). Safe from
        a signal handler and from any thread."""
        self._requested.set()
        for listener in self._on_request:
            listener()

    def take_request(self) -> bool:
        """Whether a reload was requested since the last call (and forget the request)."""
        if not self._requested.is_set():
            return False
        self._requested.clear()
        return True

    def reload(self) -> bool:
        """Load both files again; apply them if valid, else keep the running config.

        Writes CONFIG_CHANGED: the jobs added, removed and changed, or (level ERROR) the
        problems that made the reload fail. Returns whether the new config was applied.
        Callable from any thread; a running node applies a reload request of another
        process or of a signal through :meth:`request_reload`."""
        try:
            new = self.home.load_config()
        except ConfigError as exc:
            problems = [str(p) for p in exc.problems]
            for line in problems:
                log.error("config reload refused: %s", line)
            self.store.append_event(EventType.CONFIG_CHANGED,
                                    f"reload refused: {len(problems)} problem(s); the running "
                                    "configuration is kept", level=Level.ERROR,
                                    payload={"problems": problems}, actor="reload")
            return False
        old = self.current
        old_jobs = {k: v.model_dump(mode="json") for k, v in old.config.jobs.items()}
        new_jobs = {k: v.model_dump(mode="json") for k, v in new.jobs.items()}
        diff = {
            "added": sorted(new_jobs.keys() - old_jobs.keys()),
            "removed": sorted(old_jobs.keys() - new_jobs.keys()),
            "changed": sorted(k for k in new_jobs.keys() & old_jobs.keys()
                              if new_jobs[k] != old_jobs[k]),
        }
        self.current = Current(new, self.executor_for(new), limits_from_loaded(new),
                               [*old.retired, old.executor])
        now = self.life.clock.now()
        for listener in self._listeners:
            listener(new, now)
        self.store.append_event(EventType.CONFIG_CHANGED, "configuration reloaded",
                                payload=diff, actor="reload")
        log.info("configuration reloaded: %s", diff)
        return True

    def close(self) -> None:
        """Close the executors of every configuration held."""
        current = self.current
        for executor in [current.executor, *current.retired]:
            executor.close()

    # -- the watch ----------------------------------------------------------------------

    def start(self, stack: ExitStack) -> None:
        """Nothing to start: the files are looked at by :meth:`look_at_files`, called by the
        dispatcher's loop (the thread that applies reloads)."""
        self._looked_at = self.life.clock.monotonic()

    def _stat(self) -> tuple[float, float]:
        def mtime(path: str) -> float:
            try:
                return os.stat(path).st_mtime
            except OSError:
                return 0.0

        return mtime(self._files[0]), mtime(self._files[1])

    def look_at_files(self) -> bool:
        """When :data:`WATCH_SECONDS` passed since the last look: compare the files'
        modification times with the last ones seen, and request a reload when either
        changed. Returns whether it requested one. Called at each pass of the dispatcher's
        loop (at least once a second); never raises (a file that cannot be read counts as
        changed only once it can)."""
        now = self.life.clock.monotonic()
        if self._looked_at is not None and now - self._looked_at < WATCH_SECONDS:
            return False
        self._looked_at = now
        stamp = self._stat()
        if stamp == self._mtimes:
            return False
        self._mtimes = stamp
        self.request_reload()
        return True
