"""What admission reads and writes (docs/admission.md): queued candidates, the load, wait reasons.

One decision of the worker pool, exact across nodes::

    with store.write() as conn:
        # The admission lock (PostgreSQL: one deciding node at a time), the queued runs
        # and (PostgreSQL) the running ones, in one round trip:
        candidates, running = store.open_decision(conn, now, limit=200)
        load = store.admission_load(now, budget_jobs=limits.budgeted_jobs(), conn=conn,
                                    running=running)
        decision = admit(candidates, limits, load, now, free_slots)
        store.claim_runs(owner, lease_until, limit=len(decision.admitted),   # the claim,
                         run_ids=[c.run_id for c in decision.admitted], conn=conn)  # same tx
        store.set_wait_reasons(decision.wait_texts(), conn=conn)

Reading the load and claiming in one transaction under :meth:`lock_admission` is what keeps
``max_concurrency`` and budgets exact with several nodes: without it, two nodes could read the
same load and both start the last free slot.

Wait reasons and the audit log: a wait reason is a live display value (like a lease
heartbeat), recomputed on every decision, and its time part ("next slot 14:07") moves as
slots free up. :meth:`set_wait_reasons` therefore writes only the rows whose text changed, and
appends one ``RUN_WAITING`` event per waiting episode: when a QUEUED run that had no reason
gets one (entering RUNNING clears the reason, so a retried run gets one event per wait).
Later changes of the text update the column without an event, so the log never grows with
the number of decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cadenza.clock import Clock, SystemClock
from cadenza.domain.admission import HOUR, Candidate, Load
from cadenza.domain.errors import StoreError
from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState
from cadenza.store import later
from cadenza.store.codec import UTCDateTime, require_aware
from cadenza.store.core import StoreCore
from cadenza.store.data_version import DataVersion
from cadenza.store.engine import sqlite_path
from cadenza.store.hotsql import BITMAPS_AGAIN, INDEX_SCAN, ORDERED, SORTS_AGAIN, Dialect
from cadenza.store.queue_signal import LOOK_AT_LEAST, QueueListener
from cadenza.store.tables import RUNNING_ONLY, runs

RUN_WAITING = EventType.RUN_WAITING
"""Event type written when a queued run starts waiting (one per waiting episode)."""

ADMISSION_LOCK_KEY = int.from_bytes(b"cadadmit", "big")
_LOCK_ADMISSION = ("SELECT pg_advisory_xact_lock(%s),"
                   " set_config('idle_in_transaction_session_timeout', %s, true)")
ADMISSION_IDLE_MS = 15_000
"""PostgreSQL: a decision's transaction left idle this long (milliseconds) is ended by the
database, and the admission lock with it: a node stopped in the middle of a decision
(SIGSTOP, a debugger, a paused VM) makes the other nodes' decisions wait this long at
most, not until it resumes. A decision runs for milliseconds."""
"""The PostgreSQL advisory lock that serializes admission decisions across nodes."""

_QUEUED = RunState.QUEUED.value
_RUNNING = RunState.RUNNING.value
_CHUNK = 500  # ids per IN (...) list: far below every dialect's bind parameter limit
_SET_WAIT_REASON = (
    sa.update(runs)
    .where(runs.c.id == sa.bindparam("p_id"), runs.c.state == _QUEUED)
    .values(
        wait_reason=sa.bindparam("p_reason", type_=sa.Text()),
        updated_at=sa.bindparam("p_now", type_=UTCDateTime()),
    )
)


# The running runs by job: ix_runs_running (migration 0023) holds just them, by job.
_RUNNING_BY_JOB = f"SELECT job_id, count(*) FROM runs WHERE {RUNNING_ONLY} GROUP BY job_id"
_COLUMNS = ("SELECT id, job_id, priority, coalesce(scheduled_for, created_at), not_before,"
            " attempt, started_at IS NOT NULL FROM runs WHERE state = 'QUEUED' AND ")
# The runs that may start, in the admission order as the partial index ix_runs_claim_order
# holds it (migration 0005): the literal state and the ORDER BY must be the index's for it
# to be read in order, its first rows only.
_READY_READ = (_COLUMNS + "(not_before IS NULL OR not_before <= {m})"
               " ORDER BY priority DESC, coalesce(scheduled_for, created_at), id LIMIT {m}")
# The runs still held by not_before, those released first first: an ordered range of
# ix_runs_held (migration 0023), which holds only them; its condition is in the WHERE (in
# the admission order, with statistics that said few runs were queued, PostgreSQL walked
# the whole queue for them).
_HELD_READ = (_COLUMNS + "not_before IS NOT NULL AND not_before > {m}"
              " ORDER BY not_before LIMIT {m}")


_OPENING = ";".join((
    _LOCK_ADMISSION, ORDERED, _READY_READ.format(m="%s"), _HELD_READ.format(m="%s"),
    SORTS_AGAIN, INDEX_SCAN, _RUNNING_BY_JOB, BITMAPS_AGAIN))
"""PostgreSQL: a decision's opening (the admission lock, the two reads of the queue, the
running runs per job, with their planner settings) as one simple query of eight statements:
one round trip, as a pipeline would be, and the idle timeout the lock statement sets is
started when the transaction goes idle after it. After a pipeline it is not: psycopg ends a
pipeline with a Sync then a Flush, and the Flush stops the timer that the Sync started
(PostgreSQL starts it only when it answers a Sync), so a node cut off or stopped right
after that round trip held the admission lock, and every other node waited, until its
connection died (tests/contract/test_store_admission.py shows it)."""


def _open_on_postgresql(raw: Any, stamp: datetime, limit: int
                        ) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """Run :data:`_OPENING` on psycopg's connection ``raw`` (values bound by the client:
    ours, never a user's): the queued runs (the ready ones, then the held ones) and the
    running runs per job."""
    import psycopg

    with psycopg.ClientCursor(raw) as cursor:
        cursor.execute(_OPENING, (ADMISSION_LOCK_KEY, str(ADMISSION_IDLE_MS), stamp, limit,
                                  stamp, limit))
        sets: list[list[tuple[Any, ...]]] = []
        while True:
            sets.append(cursor.fetchall())
            if not cursor.nextset():
                break
    if len(sets) != 8:
        raise StoreError(f"the decision's opening returned {len(sets)} results, not 8")
    running = {job_id: int(n) for job_id, n in sets[6]}
    return sets[2] + sets[3], running


class AdmissionRepository(StoreCore):
    """Reads and writes of the admission loop (table ``runs``)."""

    def lock_admission(self, conn: sa.Connection) -> None:
        """Take the admission lock for the rest of ``conn``'s transaction (from :meth:`write`).

        PostgreSQL: a transaction-scoped advisory lock, so one node at a time reads the load
        and claims runs; the transaction is ended by the database if it is left idle for
        :data:`ADMISSION_IDLE_MS` (its node stopped). SQLite: nothing to do, ``write()``
        already holds the database's single write lock (``BEGIN IMMEDIATE``). Changes
        nothing; writes no event.
        """
        if self.dialect == "postgresql":
            # On the DBAPI cursor: taken at every decision, and a Core statement's Python
            # cost more than the lock's round trip.
            cursor = conn.connection.cursor()
            try:
                cursor.execute(_LOCK_ADMISSION, (ADMISSION_LOCK_KEY, str(ADMISSION_IDLE_MS)))
            finally:
                cursor.close()

    def has_queued_runs(self) -> bool:
        """Whether any run is QUEUED: one indexed read on the DBAPI connection, without a
        transaction (the poll of an idle node, once a second: it was a write transaction,
        then a read of candidates, most of an idle server's CPU)."""
        with self._quick_read() as read:
            return bool(read("SELECT 1 FROM runs WHERE state = ? LIMIT 1",
                             (RunState.QUEUED.value,)))

    def queue_watch(self, on_queued: Callable[[], None] | None = None,
                    on_change: Callable[[], None] | None = None) -> QueueWatch:
        """The idle poll of one dispatcher (:class:`QueueWatch`); close it when done.
        On PostgreSQL, ``on_queued()`` is called as soon as a run was queued by anyone
        (:mod:`cadenza.store.queue_signal`). On a SQLite file, ``on_change()`` is called by
        a poll that finds the database's ``data_version`` changed since the last poll."""
        if self.dialect == "sqlite":
            return QueueWatch(self.has_queued_runs, sqlite_path(self.engine.url),
                              on_change=on_change)
        listener = None if on_queued is None else QueueListener(self.engine, on_queued)
        return QueueWatch(self.has_queued_runs, None, listener, self.clock)

    def queued_candidates(
        self, now: datetime, limit: int = 200, *, conn: sa.Connection | None = None
    ) -> list[Candidate]:
        """QUEUED runs in admission order: priority DESC, scheduled time ASC, id ASC.

        The scheduled time is ``scheduled_for``, or ``created_at`` for runs without one.
        Returns at most ``limit`` runs whose ``not_before`` has passed at ``now`` (or is
        unset), the first in admission order, plus the ``limit`` runs still held by
        ``not_before`` that are released first (so that they get a wait reason and the next
        decision's time, but a long tail of retries in backoff never crowds out runs that
        could start), merged in admission order. Changes nothing.
        """
        with self._reading(conn) as c:
            return self._read_queue(c, now, limit)[0]

    def open_decision(
        self, conn: sa.Connection, now: datetime, limit: int
    ) -> tuple[list[Candidate], dict[str, int] | None]:
        """The start of a decision in ``conn``'s write transaction: :meth:`lock_admission`,
        then :meth:`queued_candidates`; on PostgreSQL also the RUNNING runs per job (the
        load's first part, for :meth:`admission_load`'s ``running``), all three in one
        round trip (one query of several statements, :data:`_OPENING`, run in order: the
        lock is taken before the reads run; not a psycopg pipeline, whose closing Flush
        stops the server's idle-in-transaction timer). SQLite: the running runs are None
        (read when needed: the read costs CPU there, not a round trip)."""
        with self._reading(conn) as c:
            return self._read_queue(c, now, limit, decision=self.dialect == "postgresql")

    def _read_queue(
        self, c: sa.Connection, now: datetime, limit: int, *, decision: bool = False
    ) -> tuple[list[Candidate], dict[str, int] | None]:
        now = require_aware(now, "now")
        postgres = self.dialect == "postgresql"
        utc = now.astimezone(UTC)
        stamp = utc if postgres else utc.replace(tzinfo=None).isoformat(" ", "microseconds")
        read = Dialect.read_ts
        running: dict[str, int] | None = None
        # On the DBAPI cursor: a node decides often (every few runs ended, with few
        # workers), and the Core result processing was most of this read's time.
        if decision and postgres:
            rows, running = _open_on_postgresql(c.connection.driver_connection, utc, limit)
        else:
            rows = self._read_both(c, postgres, (stamp, limit))
        candidates = [Candidate(run_id, job_id, _queued_at(queued_at), priority,
                                read(not_before), attempt, bool(requeued))
                      for run_id, job_id, priority, queued_at, not_before, attempt, requeued
                      in rows]
        candidates.sort(key=lambda cand: cand.order_key)
        return candidates, running

    @staticmethod
    def _read_both(c: sa.Connection, postgres: bool, params: tuple[Any, ...]
                   ) -> list[tuple[Any, ...]]:
        """The ready runs, then the held ones: on PostgreSQL both in index order (ORDERED:
        left to its statistics, the planner read and sorted the whole queue, 7 ms for 10,000
        queued runs, where the first 200 in the index take 0.1 ms), in one round trip."""
        mark = "%s" if postgres else "?"
        ready, held, side = (c.connection.cursor() for _ in range(3))
        try:
            with (ready.connection.pipeline() if postgres and later.PIPELINE
                  else nullcontext()):
                if postgres:
                    side.execute(ORDERED)
                ready.execute(_READY_READ.format(m=mark), params)
                held.execute(_HELD_READ.format(m=mark), params)
                if postgres:
                    side.execute(SORTS_AGAIN)
            return [row for cursor in (ready, held) for row in cursor.fetchall()]
        finally:
            for cursor in (ready, held, side):
                cursor.close()

    def admission_load(
        self,
        now: datetime,
        *,
        budget_jobs: Collection[str] | None = None,
        conn: sa.Connection | None = None,
        running: Mapping[str, int] | None = None,
    ) -> Load:
        """RUNNING runs on every node (in total and per job) and recent starts per job.

        Starts are the ``started_at`` of runs first started in the hour before ``now``
        (``now - 1h < started_at``), whatever their state since: a start spends budget even
        when the run already ended. A retried or resumed run keeps its first ``started_at``,
        so its later attempts spend no budget again. ``budget_jobs`` limits the starts read to
        those jobs (``Limits.budgeted_jobs()``); an empty collection skips that query; ``None``
        reads every job's. Per-tag figures are the caller's sum over the config's job → tags
        map (the store does not know tags). ``running``: the RUNNING runs per job as
        :meth:`open_decision` read them in the same transaction (not read again). Changes
        nothing.
        """
        now = require_aware(now, "now")
        starts: dict[str, list[datetime]] = {}
        with self._reading(conn) as c:
            if running is None:
                running = self._running_by_job(c)
            if budget_jobs is None or budget_jobs:
                query = sa.select(runs.c.job_id, runs.c.started_at).where(
                    runs.c.started_at > now - HOUR
                )
                jobs = None if budget_jobs is None else sorted(set(budget_jobs))
                for part in [None] if jobs is None else _chunks(jobs):
                    chunk = query if part is None else query.where(runs.c.job_id.in_(part))
                    for row in c.execute(chunk):
                        starts.setdefault(row.job_id, []).append(row.started_at)
        return Load(sum(running.values()), running, starts)

    def _running_by_job(self, c: sa.Connection) -> dict[str, int]:
        # On the DBAPI cursor: a node decides at every chunk of a crowded minute, with up
        # to one row per job here.
        cursor = c.connection.cursor()
        side = c.connection.cursor() if self.dialect == "postgresql" else None
        try:
            with (cursor.connection.pipeline() if side is not None and later.PIPELINE
                  else nullcontext()):
                if side is not None:
                    side.execute(INDEX_SCAN)
                cursor.execute(_RUNNING_BY_JOB)
                if side is not None:
                    side.execute(BITMAPS_AGAIN)
            return {job_id: int(n) for job_id, n in cursor.fetchall()}
        finally:
            cursor.close()
            if side is not None:
                side.close()

    def set_wait_reasons(
        self,
        reasons: Mapping[str, str | None],
        *,
        actor: str = "system",
        conn: sa.Connection | None = None,
    ) -> int:
        """Set ``wait_reason`` of QUEUED runs (``None`` clears it); one transaction.

        Only runs still QUEUED whose (redacted) text differs are written: wait_reason and
        updated_at. Runs that started meanwhile or do not exist are left alone; on
        PostgreSQL, rows another node holds locked (being claimed) are skipped rather than
        waited for. Appends one ``RUN_WAITING`` event (INFO) for each run that had no reason
        and gets one; a changed or cleared reason writes no event (see the module
        docstring). Returns the number of runs changed.
        """
        wanted = {run_id: self._redact_text(text) for run_id, text in reasons.items()}
        if not wanted:
            return 0
        with self._joined(conn) as c:
            current: list[sa.Row[tuple[str, str, str | None]]] = []
            for part in _chunks(sorted(wanted)):
                current.extend(
                    c.execute(
                        sa.select(runs.c.id, runs.c.job_id, runs.c.wait_reason)
                        .where(runs.c.id.in_(part), runs.c.state == _QUEUED)
                        .with_for_update(skip_locked=True)
                    )
                )
            # A call_job parent waiting for its child keeps that reason (it says what the
            # run waits for, and the child's end looks for it: store/children.py).
            changed = [row for row in current if row.wait_reason != wanted[row.id]
                       and not (row.wait_reason or "").startswith(WAITING_FOR_CHILD)]
            if not changed:
                return 0
            now = self._now()
            c.execute(
                _SET_WAIT_REASON,
                [{"p_id": row.id, "p_reason": wanted[row.id], "p_now": now} for row in changed],
            )
            for row in changed:
                text = wanted[row.id]
                if row.wait_reason is None and text is not None:
                    self._insert_event(
                        c,
                        RUN_WAITING,
                        f"run of {row.job_id} waits: {text}",
                        run_id=row.id,
                        level=Level.INFO,
                        payload={"job_id": row.job_id, "wait_reason": text},
                        actor=actor,
                        now=now,
                    )
        return len(changed)


WAITING_FOR_CHILD = "waiting for child run "
"""How the wait reason of a call_job parent waiting for its child begins
(:mod:`cadenza.store.children`); admission does not overwrite it."""


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _queued_at(value: object) -> datetime:
    """``coalesce(scheduled_for, created_at)`` read back (never NULL: created_at is not)."""
    at = Dialect.read_ts(value)
    if at is None:
        raise StoreError("a queued run without a creation time")
    return at


class QueueWatch:
    """An idle node's poll: whether any run is QUEUED, looked at once a second.

    On a SQLite file it first reads the database's ``data_version`` on a connection of its
    own, which never writes: SQLite changes that number at every commit of any other
    connection, of this process or another. While it stays the same, nothing was committed
    since the last look found no queued run, so none can be queued and the look is skipped.
    After a second's sleep the pragma costs about a fifth of the look (a pooled connection's
    checkout, an indexed read, its return): the idle node's CPU is its wake-ups and what
    each does cold (docs/benchmarks.md). On PostgreSQL the same is done with the
    :class:`~cadenza.store.queue_signal.QueueListener` when ``listener`` is given: while it
    listens, a poll skips the look if no run was signalled QUEUED since the last look found
    none, and no look was made for :data:`~cadenza.store.queue_signal.LOOK_AT_LEAST`
    seconds. For an in-memory SQLite database, every poll is the look.

    On a SQLite file, a poll that finds ``data_version`` changed since the previous poll
    calls ``on_change()``: the other loops of an idle node that read the store (the
    notification sender) sleep until then instead of reading ``data_version`` on timers of
    their own, since on some machines a thread's wake-up costs more than the read."""

    def __init__(self, look: Callable[[], bool], path: Path | None,
                 listener: QueueListener | None = None, clock: Clock | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self._look = look
        self._on_change = on_change
        self._seen: int | None = None
        """The ``data_version`` of the previous poll (SQLite files)."""
        self._listener = listener
        self._clock: Clock = clock or SystemClock()
        self._looked_at = 0.0
        self._data = DataVersion(path)
        self._unchanged_at: int | None = None
        """The version (:meth:`_version`) at which the last look found no queued run."""

    def any_queued(self) -> bool:
        """Whether a run may be QUEUED (True: look at the queue)."""
        version = self._version()  # read before the look: a later change is seen
        if self._listener is None and version != self._seen:
            self._seen = version
            if self._on_change is not None and version is not None:
                self._on_change()
        due = (self._listener is not None
               and self._clock.monotonic() - self._looked_at >= LOOK_AT_LEAST)
        if version is not None and version == self._unchanged_at and not due:
            return False
        self._looked_at = self._clock.monotonic()
        queued = self._look()
        self._unchanged_at = None if queued else version
        return queued

    def _version(self) -> int | None:
        """What changes whenever a run may have been queued: the listener's count of
        signals, or SQLite's ``data_version``; ``None`` when unknown (then look)."""
        if self._listener is not None:
            return self._listener.token
        return self._data.token()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._data.close()
