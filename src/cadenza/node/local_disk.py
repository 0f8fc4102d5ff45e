"""The node's own disk: whether the home's ``data/`` directory can still be written.

With the store on PostgreSQL a node still writes to its own disk, under its home's
``data/``: what its steps write there (``file_export`` and ``report`` outputs under
``data/files`` and ``data/reports``, a step's own files), the secrets and their key
(``data/secret.key``, ``data/secrets.json``). None of that goes through the store, so a
full or read-only disk there shows in no store write: the store answers, the node looks
healthy, and every run it takes that needs its disk fails.

:class:`LocalDisk` (a node service) writes a small file there every
:data:`PROBE_SECONDS` of the node's clock while the node holds runs, every
:data:`IDLE_PROBE_SECONDS` while it holds none (``.cadenza-disk-probe-<pid>``: 4 KiB,
fsynced, removed at once). Whoever needs the answer now asks :meth:`LocalDisk.current`,
which probes first when the last probe is older than :data:`PROBE_SECONDS`: the dispatcher
before it claims, ``/api/health``. So an idle node wakes for its disk every 10 s, not every
2 s (an idle node's CPU is its wake-ups), and what it says of its disk is never older than
2 s. When a probe fails for a write failure (a full disk, a read-only file
system, a refused permission, an I/O error: :func:`cadenza.domain.errors.write_failure_kind`)
the node

* answers ``degraded`` in ``/api/health``, ``reason`` in the store's form:
  ``"disk full: No space left on device (since <time>; <data dir>)"``;
* claims no new runs (its workers count as busy: the other nodes take the queued runs; the
  runs it holds go on, and a step that fails on the disk is retried as any retryable
  failure, by a node that can write);
* says so once in its log (ERROR), and once when the disk takes writes again (INFO).

It is back to ``ok`` and claims again once a probe worked and the last failure is
:data:`SETTLE_SECONDS` old (a disk just freed may still refuse now and then). A home without
a ``data/`` directory (a node on PostgreSQL that never wrote one) is not probed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cadenza.domain.errors import DISK_FULL, READ_ONLY, write_failure_kind
from cadenza.lifecycle import Lifecycle

log = logging.getLogger("cadenza.node")

PROBE_SECONDS = 2.0
"""How often (the node's clock) the data directory is probed while the node holds runs; the
oldest probe :meth:`LocalDisk.current` answers from."""
IDLE_PROBE_SECONDS = 10.0
"""How often it is probed while the node holds no run (then :meth:`LocalDisk.current` probes
when asked)."""
SETTLE_SECONDS = 10.0
"""How long (monotonic) after the last failed probe a working one clears the failure."""
PROBE_BYTES = 4096
PROBE_PREFIX = ".cadenza-disk-probe-"
STALE_PROBE_SECONDS = 3600.0
"""Probe files of killed processes older than this are removed at start."""


@dataclass(frozen=True)
class DiskFailure:
    """The last failed probe: its kind (``disk full``, ``read-only``...), the system's
    words, when (the node's clock), and where."""

    kind: str
    detail: str
    at: datetime
    where: Path
    monotonic: float

    @property
    def reason(self) -> str:
        """As ``/api/health`` says it (the form of the store's write failures)."""
        return (f"{self.kind}: {self.detail} (since {self.at.isoformat(timespec='seconds')}; "
                f"{self.where})")


def _advice(kind: str, where: Path) -> str:
    if kind == DISK_FULL:
        return f"free space on the disk of {where}"
    if kind == READ_ONLY:
        return f"make {where} writable again (remount its file system read-write)"
    return f"check the disk and the permissions of {where}"


class LocalDisk:
    """Probes a home's ``data/`` directory (see the module doc). A service."""

    name = "local-disk"

    def __init__(self, data_dir: Path, life: Lifecycle,
                 probe: Callable[[Path], None] | None = None, *,
                 busy: Callable[[], bool] = lambda: True) -> None:
        """``probe``: writes in the directory, raising what the write raised (default:
        :func:`write_probe`; a test gives its own). ``busy``: whether the node holds runs
        (probed every :data:`PROBE_SECONDS` then, else every :data:`IDLE_PROBE_SECONDS`)."""
        self.data_dir = data_dir
        self.life = life
        self.probe = probe or write_probe
        self.busy = busy
        self.failure: DiskFailure | None = None
        """The last failed probe while the disk refuses writes (see :attr:`failing`)."""
        self._failing = False
        self._lock = threading.Lock()
        self._probing = threading.Lock()
        self._probed_at: float | None = None
        """When (the node's monotonic clock) the last probe began, None before the first."""
        self._wake = life.wake_on_stop(threading.Event())

    def start(self, stack: ExitStack) -> None:
        remove_stale_probes(self.data_dir, self.life.clock.now().timestamp())
        self.check()
        self.life.spawn(stack, self._loop, "cadenza-local-disk")

    def _loop(self) -> None:
        clock = self.life.clock
        while not self.life.stopping.is_set():
            every = PROBE_SECONDS if self.busy() else IDLE_PROBE_SECONDS
            left = every if self._probed_at is None else \
                self._probed_at + every - clock.monotonic()
            if left <= 0:
                self.check()
                continue
            clock.wait(self._wake, left)
            self._wake.clear()

    def current(self) -> DiskFailure | None:
        """:attr:`failing` from a probe at most :data:`PROBE_SECONDS` old: probes now when
        the last one is older (the node was idle); wakes the loop, so that it paces itself
        by the node's new business."""
        probed = self._probed_at
        if probed is None or self.life.clock.monotonic() - probed >= PROBE_SECONDS:
            self.check()
            self._wake.set()
        return self.failing

    @property
    def failing(self) -> DiskFailure | None:
        """The failure while the data directory refuses writes, else None."""
        with self._lock:
            return self.failure if self._failing else None

    def check(self) -> DiskFailure | None:
        """Probe once; returns the current failure (None: the disk takes writes). Never
        raises: an error that is no write failure (the directory vanished) is logged."""
        clock = self.life.clock
        self._probed_at = clock.monotonic()
        if not self.data_dir.is_dir():
            return self.failing
        try:
            with self._probing:  # one probe file per process: one probe at a time
                self.probe(self.data_dir)
        except OSError as exc:
            kind = write_failure_kind(exc)
            if kind is None:
                log.warning("cannot probe the data directory %s: %s", self.data_dir, exc)
                return self.failing
            failure = DiskFailure(kind, exc.strerror or str(exc), clock.now(), self.data_dir,
                                  clock.monotonic())
            with self._lock:
                first = not self._failing
                if first:
                    self.failure = failure
                else:  # keep "since": the first failure of this episode
                    assert self.failure is not None
                    self.failure = DiskFailure(kind, failure.detail, self.failure.at,
                                               self.data_dir, failure.monotonic)
                self._failing = True
            if first:
                log.error("the data directory %s cannot be written: %s (%s); this node "
                          "answers degraded and takes no new runs until it can (the other "
                          "nodes take them); %s", self.data_dir, kind, failure.detail,
                          _advice(kind, self.data_dir))
            return self.failing
        with self._lock:
            last = self.failure
            if not self._failing or last is None:
                return None
            if clock.monotonic() - last.monotonic < SETTLE_SECONDS:
                return last
            self._failing = False
        log.info("the data directory %s takes writes again (%s since %s): this node takes "
                 "runs again", self.data_dir, last.kind, last.at.isoformat(timespec="seconds"))
        return None


def write_probe(directory: Path) -> None:
    """Write :data:`PROBE_BYTES` to a file of this process in ``directory``, fsync it and
    remove it; raises the :class:`OSError` of the write."""
    path = directory / f"{PROBE_PREFIX}{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0),
                 0o600)
    try:
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def remove_stale_probes(directory: Path, now: float) -> None:
    """Remove probe files that killed processes left (older than an hour at ``now``, a
    POSIX timestamp)."""
    try:
        entries = list(directory.glob(f"{PROBE_PREFIX}*"))
    except OSError:
        return
    for entry in entries:
        try:
            if now - entry.stat().st_mtime > STALE_PROBE_SECONDS:
                entry.unlink()
        except OSError:
            continue
