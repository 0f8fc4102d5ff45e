"""Leader election: which scheduler of a deployment fires schedules (docs/scheduling.md).

Only the leader's :meth:`~cadenza.scheduler.service.Scheduler.run_forever` ticks. This is an
optimisation, never the guard: a fire is unique in the store on (job, schedule,
scheduled_for), so two schedulers that both believe they lead (a network partition, a stuck
lock) still record each fire once.

* PostgreSQL: a session-level advisory lock, ``pg_try_advisory_lock(KEY)``, held on a
  dedicated connection, not from the store's pool, whose connections come and go
  (:class:`cadenza.store.leadership.PostgresLeadership`). The lock dies with the session, so a
  crashed or partitioned node loses it by itself; the holder checks its connection on every
  :meth:`acquire` and steps down when it is gone.
* SQLite: an exclusive OS lock on ``<database>.scheduler.lock`` next to the database file
  (``flock`` on POSIX, ``msvcrt.locking`` on Windows). The OS releases it when the process
  dies; the file holds the holder's pid and host for people. An in-memory database has one
  process by definition: :class:`AlwaysLeader`.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

import sqlalchemy as sa

from cadenza.store.engine import sqlite_path
from cadenza.store.leadership import PostgresLeadership

log = logging.getLogger(__name__)



@runtime_checkable
class Leadership(Protocol):
    """A try-lock that says whether this scheduler should fire schedules."""

    @property
    def is_leader(self) -> bool:
        """Whether the last :meth:`acquire` won (and nothing since showed it lost)."""
        ...

    def acquire(self) -> bool:
        """Try once, without blocking, to be (or stay) the leader; True when it is."""
        ...

    def release(self) -> None:
        """Step down (idempotent)."""
        ...

    def close(self) -> None:
        """Step down and free what the leadership holds (its connection); idempotent."""
        ...


class AlwaysLeader:
    """Leadership for a single process (an in-memory store, tests)."""

    is_leader = True

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        return None

    def close(self) -> None:
        return None


class FileLeadership:
    """An exclusive, non-blocking OS lock on a file next to the SQLite database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    @property
    def is_leader(self) -> bool:
        return self._handle is not None

    def acquire(self) -> bool:
        if self._handle is not None:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "a+", encoding="utf-8")  # held while leading
        except OSError as exc:
            log.warning("cannot open the scheduler lock file %s: %s", self.path, exc)
            return False
        try:
            _lock(handle)
        except OSError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        self._handle = handle
        log.info("scheduler leadership taken (%s)", self.path)
        return True

    def release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            _unlock(handle)
        except OSError:
            pass
        handle.close()

    def close(self) -> None:
        self.release()

    def holder(self) -> str:
        """Who holds the lock, as its file says (empty when unknown)."""
        try:
            return self.path.read_text(encoding="utf-8").strip()
        except OSError:
            return ""


if sys.platform == "win32":
    import msvcrt

    def _lock(handle: IO[str]) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)

    def _unlock(handle: IO[str]) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock(handle: IO[str]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock(handle: IO[str]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def leadership_for(engine: sa.Engine) -> Leadership:
    """The leadership that fits the store on ``engine`` (see the module doc)."""
    if engine.dialect.name == "postgresql":
        return PostgresLeadership(engine.url)
    path = sqlite_path(engine.url)
    if path is None:
        return AlwaysLeader()
    return FileLeadership(path.with_name(path.name + ".scheduler.lock"))
