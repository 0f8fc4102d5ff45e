"""Leader election: which scheduler of a deployment fires schedules (docs/scheduling.md).

Only the leader's :meth:`~cadenza.scheduler.service.Scheduler.run_forever` ticks. This is an
optimisation, never the guard: a fire is unique in the store on (job, schedule,
scheduled_for), so two schedulers that both believe they lead (a network partition, a stuck
lock) still record each fire once.

* PostgreSQL: a lease row judged by the database's clock, with a term number that fences
  the leader's writes (:class:`cadenza.store.leadership.LeaseLeadership`). The leader renews
  it every quarter of the lease; a leader that cannot (crashed, stopped, cut off, too slow)
  loses it when it runs out, and another node takes the next term. Writes made as leader
  (:meth:`Leadership.fence`) are refused once the term has ended.
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
from datetime import timedelta
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

import sqlalchemy as sa

from cadenza.store.engine import sqlite_path
from cadenza.store.leadership import LEASE, LeaseLeadership

log = logging.getLogger(__name__)



@runtime_checkable
class Leadership(Protocol):
    """A try-lock that says whether this scheduler should fire schedules."""

    @property
    def is_leader(self) -> bool:
        """Whether the last :meth:`acquire` won (and nothing since showed it lost)."""
        ...

    @property
    def epoch(self) -> int | None:
        """The term this node holds (a lease's fencing token), or None (not leading, or a
        leadership without terms)."""
        ...

    @property
    def holder(self) -> str | None:
        """Who this node is as a holder of the leadership, or None when it has no name."""
        ...

    @property
    def renew_every(self) -> float | None:
        """Seconds within which :meth:`acquire` must be called again to keep the leadership
        (and how often a follower should try); None: held until released (an OS lock)."""
        ...

    def acquire(self) -> bool:
        """Try once, without blocking, to be (or stay) the leader; True when it is."""
        ...

    def fence(self, conn: sa.Connection) -> None:
        """In ``conn``'s transaction, a write made as leader: raise
        :class:`~cadenza.domain.errors.LeadershipLost` unless this node still leads, so that
        a former leader's late write is refused."""
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
    renew_every = None
    epoch = None
    holder = None

    def acquire(self) -> bool:
        return True

    def fence(self, conn: sa.Connection) -> None:
        return None

    def release(self) -> None:
        return None

    def close(self) -> None:
        return None


class FileLeadership:
    """An exclusive, non-blocking OS lock on a file next to the SQLite database."""

    renew_every = None
    epoch = None
    holder = None

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    @property
    def is_leader(self) -> bool:
        return self._handle is not None

    def fence(self, conn: sa.Connection) -> None:
        """Nothing to check: the OS holds the lock until this process releases it or dies."""
        return None

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
            try_lock_file(handle)
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
            unlock_file(handle)
        except OSError:
            pass
        handle.close()

    def close(self) -> None:
        self.release()

    def who_holds(self) -> str:
        """Who holds the lock, as its file says (empty when unknown)."""
        try:
            return self.path.read_text(encoding="utf-8").strip()
        except OSError:
            return ""


if sys.platform == "win32":
    import msvcrt

    def try_lock_file(handle: IO[str]) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)

    def unlock_file(handle: IO[str]) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def try_lock_file(handle: IO[str]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def unlock_file(handle: IO[str]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def leadership_for(engine: sa.Engine, *, lease: timedelta = LEASE) -> Leadership:
    """The leadership that fits the store on ``engine`` (see the module doc); ``lease``: the
    length of a leader's lease on PostgreSQL (``[server].leader_lease``)."""
    if engine.dialect.name == "postgresql":
        return LeaseLeadership(engine.url, lease=lease)
    path = sqlite_path(engine.url)
    if path is None:
        return AlwaysLeader()
    return FileLeadership(path.with_name(path.name + ".scheduler.lock"))
