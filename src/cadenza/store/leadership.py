"""The scheduler's leadership on PostgreSQL: a lease row judged by the database's clock, with
a fencing token (see :mod:`cadenza.scheduler.leader`, which chooses it; docs/scheduling.md,
"Who fires").

One row of ``leadership`` per role (``scheduler``): its holder, its term (``epoch``, the
fencing token) and the end of its lease (``until``), both written and compared with the
database's ``clock_timestamp()``, so that no node's clock takes part. A node leads while its
lease runs: it renews it every :data:`RENEW_SHARE` of the lease; another node takes the role,
with the next term, once the lease has ended. A leader that cannot renew in time (stopped by
SIGSTOP or a debugger, cut from the database, too slow) loses the role by itself: unlike a
session's advisory lock, which a stopped process keeps as long as its TCP connection stays
up, nothing the holder does not do keeps the lease alive.

Two guards keep a former leader from acting as one:

* **Locally**, :attr:`LeaseLeadership.is_leader` turns false once the lease's length has
  passed on the process's monotonic clock since the last renewal was sent (a lower bound of
  the database's end), so a process that wakes from a stop knows at once that it may no
  longer lead.
* **In the database**, :meth:`LeaseLeadership.fence` runs in the transaction of each write the
  leader makes as leader (the scheduler's fires, MISSED rows and withdrawals): it reads the
  row ``FOR SHARE`` and refuses (:class:`~cadenza.domain.errors.LeadershipLost`, the
  transaction rolled back) unless this node still holds this term and its lease has not
  ended. The shared lock makes a takeover wait for that transaction's end, so a write either
  commits inside the term or not at all; a fenced transaction that stalls (its process
  stopped) is ended by PostgreSQL after one lease of idleness
  (``idle_in_transaction_session_timeout``, set for that transaction only).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from cadenza.clock import Clock, SystemClock
from cadenza.domain.errors import LeadershipLost
from cadenza.store.engine import describe_url

log = logging.getLogger("cadenza.scheduler.leader")

ROLE = "scheduler"
LEASE = timedelta(seconds=12)
"""The scheduler's lease by default (``[server].leader_lease``): a stopped leader is replaced
within it plus one renewal interval."""
RENEW_SHARE = 4
"""The leader renews (and a follower looks) every ``lease / RENEW_SHARE``."""
LOCK_WAIT_MS = 1000
"""How long a takeover waits for a fenced transaction of the leader before it tries again at
its next look."""

_LOOK = sa.text("SELECT holder, epoch, until > clock_timestamp() AS running FROM leadership"
                " WHERE name = :name")
_TAKE = sa.text(
    "INSERT INTO leadership (name, holder, epoch, since, until)"
    " VALUES (:name, :holder, 1, clock_timestamp(), clock_timestamp() + :lease)"
    " ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, epoch = leadership.epoch + 1,"
    " since = EXCLUDED.since, until = EXCLUDED.until"
    " WHERE leadership.until < clock_timestamp() RETURNING epoch")
"""A new term: the first, or the next once the previous lease has ended."""
_RENEW = sa.text(
    "UPDATE leadership SET until = clock_timestamp() + :lease"
    " WHERE name = :name AND holder = :holder AND epoch = :epoch"
    " AND until >= clock_timestamp() RETURNING epoch")
_RELEASE = sa.text(
    "UPDATE leadership SET until = clock_timestamp()"
    " WHERE name = :name AND holder = :holder AND epoch = :epoch")
_IDLE_LIMIT = sa.text("SELECT set_config('idle_in_transaction_session_timeout', :ms, true)")
_FENCE = sa.text(
    "SELECT epoch FROM leadership WHERE name = :name AND holder = :holder AND epoch = :epoch"
    " AND until > clock_timestamp() FOR SHARE")


def node_identity() -> str:
    """``host:pid:random``: who holds a lease, unique per process (a restarted process with
    the same pid is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseLeadership:
    """The scheduler's leadership as a lease in the store's database (see the module doc)."""

    def __init__(self, url: sa.URL | str, *, lease: timedelta = LEASE, role: str = ROLE,
                 holder: str | None = None, clock: Clock | None = None) -> None:
        """``clock`` counts the lease down locally (its monotonic time; by default the
        system's: a lease is real time, judged by the database's clock)."""
        if lease < timedelta(seconds=1):
            raise ValueError("a leader's lease lasts at least one second")
        self.role = role
        self.lease = lease
        self.holder = holder or node_identity()
        self.clock = clock or SystemClock()
        self.renew_every: float | None = lease.total_seconds() / RENEW_SHARE
        seconds = lease.total_seconds()
        self._engine = sa.create_engine(url, poolclass=NullPool, connect_args={
            "connect_timeout": max(1, int(self.renew_every)),
            # A cut connection fails within the lease instead of waiting for TCP's timeout.
            "keepalives": 1, "keepalives_idle": 1, "keepalives_interval": 1,
            "keepalives_count": 3, "tcp_user_timeout": int(seconds * 1000),
            "options": f"-c lock_timeout={LOCK_WAIT_MS}"
                       f" -c statement_timeout={int(seconds * 1000)}",
        })
        self._conn: sa.Connection | None = None
        self._epoch: int | None = None
        self._deadline = 0.0
        self._warned = False

    # -- the Leadership protocol -----------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this node holds a term whose lease has not run out by its own monotonic
        clock (a lower bound of the end the database judges)."""
        return self._epoch is not None and self.clock.monotonic() < self._deadline

    @property
    def epoch(self) -> int | None:
        """The term this node holds (its fencing token), or None."""
        return self._epoch if self.is_leader else None

    def acquire(self) -> bool:
        """Renew this node's lease, or take the role when the lease of its holder has ended
        (one or two statements). True while this node leads. A database error keeps what
        was held until its lease runs out locally."""
        sent = self.clock.monotonic()
        params = {"name": self.role, "holder": self.holder, "lease": self.lease}
        try:
            conn = self._connection()
            if self._epoch is not None:
                if conn.execute(_RENEW, {**params, "epoch": self._epoch}).first() is not None:
                    self._deadline = sent + self.lease.total_seconds()
                    return True
                log.warning("scheduler leadership lost: the lease of term %d ended before it "
                            "was renewed (this node was stopped, slow or cut off)", self._epoch)
                self._epoch = None
            row = conn.execute(_LOOK, params).first()
            if row is not None and row.running:
                return False
            taken = conn.execute(_TAKE, params).first()
        except sa.exc.SQLAlchemyError as exc:
            self._drop()
            if not self._warned:
                log.warning("cannot reach %s to hold or take the scheduler's leadership: %s",
                            describe_url(self._engine.url), exc)
                self._warned = True
            return self.is_leader
        self._warned = False
        if taken is None:
            return False
        self._epoch, self._deadline = int(taken.epoch), sent + self.lease.total_seconds()
        log.info("scheduler leadership taken: term %d, lease %gs (%s)", self._epoch,
                 self.lease.total_seconds(), self.holder)
        return True

    def fence(self, conn: sa.Connection) -> None:
        """In ``conn``'s transaction (the caller's write as leader): raise
        :class:`LeadershipLost` unless this node still holds its term with a lease that has
        not ended, and keep a takeover waiting until that transaction ends (see the module
        doc)."""
        epoch = self._epoch
        if epoch is None or not self.is_leader:
            raise LeadershipLost(f"this node ({self.holder}) no longer leads the scheduler"
                                 + (f" (term {epoch} ran out)" if epoch is not None else ""))
        conn.execute(_IDLE_LIMIT, {"ms": str(int(self.lease.total_seconds() * 1000))})
        held = conn.execute(_FENCE, {"name": self.role, "holder": self.holder,
                                     "epoch": epoch}).first()
        if held is None:
            self._epoch = None
            raise LeadershipLost(f"term {epoch} of the scheduler's leadership, held by this node "
                                 f"({self.holder}), ended or was taken over")

    def release(self) -> None:
        """End this node's lease now, so that another node takes over at its next look."""
        epoch, self._epoch = self._epoch, None
        if epoch is None or self._conn is None:
            return
        try:
            self._conn.execute(_RELEASE, {"name": self.role, "holder": self.holder,
                                          "epoch": epoch})
        except sa.exc.SQLAlchemyError:
            self._drop()  # the lease ends by itself

    def close(self) -> None:
        """Release and dispose of the dedicated engine."""
        self.release()
        self._drop()
        self._engine.dispose()

    # -- internals ---------------------------------------------------------------------------

    def _connection(self) -> sa.Connection:
        if self._conn is None:
            self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except sa.exc.SQLAlchemyError:
                pass
