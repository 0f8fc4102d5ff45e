"""Child runs of ``call_job`` steps: created once, waited for without a worker, canceled
with their parent (docs/call_job.md).

A child run carries its parent's run id and step (``runs.parent_run_id``, ``parent_step``,
migration 0010); the unique index on the pair is the child's operation key:
:meth:`ChildRuns.create` inserts the child in one transaction with a fencing read of the
parent (RUNNING at the step's lease epoch), or returns the child created before (a resumed
or retried parent never starts a second one).

A parent that waits goes back to QUEUED with ``wait_reason`` ``waiting for child run <id>
(<job>)`` and a ``not_before`` at its run deadline (a deferral, :data:`WAITING`): it holds no
worker and reads nothing meanwhile. :class:`ChildRunHook`, a run end hook
(``store.hooks.run_end``, :mod:`cadenza.assembly`), wakes it in the
transaction of the child's end:

* a run that ended SUCCEEDED, FAILED, CANCELED or NEEDS_REVIEW makes its parent due now
  (``not_before`` = now) when the parent is QUEUED waiting for exactly that child;
* a run that went back to QUEUED waiting for a child that had *already* ended (the child
  ended while the parent was still RUNNING, between the parent's look at it and the
  parent's own deferral) is made due now in the same way: no wake-up is lost, whichever of
  the two transactions commits first;
* a run that ended CANCELED cancels its children that have not ended
  (:meth:`ChildRuns.cancel_children`: a QUEUED child at once, with its own children; a
  RUNNING one through a cancel request its holder acts on, whose end cancels its children
  in turn).

Every writer of a run's end calls the run end hooks (:mod:`cadenza.store.run_states`), a
``runs cancel`` of a QUEUED run included, in every process: the hook is wired by the one
assembly of the store (:mod:`cadenza.assembly`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from cadenza.domain.states import TERMINAL_RUN_STATES, RunState
from cadenza.store.admission import WAITING_FOR_CHILD
from cadenza.store.boundary import EndedRun
from cadenza.store.codec import utc_from_raw
from cadenza.store.records import RUN_COLUMNS_SQL, STEP_COLUMNS_SQL, RunRecord, StepRunRecord
from cadenza.store.tables import runs

if TYPE_CHECKING:
    from cadenza.store.boundary import NewRun
    from cadenza.store.store import Store

WAITING = WAITING_FOR_CHILD
"""How the ``wait_reason`` of a parent waiting for its child begins (admission keeps it:
:meth:`~cadenza.store.admission.AdmissionRepository.set_wait_reasons`)."""
ENDED_STATES = frozenset({*TERMINAL_RUN_STATES, RunState.NEEDS_REVIEW})
"""The child states that end a parent's wait."""
MAX_DEPTH = 64
"""How far :meth:`ChildRuns.ancestors` walks up (a deeper chain is refused as a cycle)."""
_ENDED = tuple(s.value for s in ENDED_STATES)
_PARENTS_OF = ("SELECT id, job_id, parent_run_id FROM runs WHERE id IN ({marks})"
               " AND parent_run_id IS NOT NULL")
_IDS_PER_READ = 500
_OPEN = (RunState.QUEUED.value, RunState.RUNNING.value)


def waiting_reason(child_id: str, job_id: str) -> str:
    """The ``wait_reason`` of a parent waiting for ``child_id`` (a run of ``job_id``)."""
    return f"{WAITING}{child_id} ({job_id})"


def waited_child(wait_reason: str | None) -> str | None:
    """The id of the child a run waits for, read from its ``wait_reason`` (None: it does
    not wait for a child)."""
    if wait_reason is None or not wait_reason.startswith(WAITING):
        return None
    return wait_reason[len(WAITING):].split(" ", 1)[0] or None


@dataclass(frozen=True)
class ChildRecord:
    """A child run as its parent sees it."""

    id: str
    job_id: str
    state: RunState
    rows: int | None
    error: str | None
    reason: str | None
    parent_run_id: str
    parent_step: str
    created_at: datetime
    finished_at: datetime | None

    @property
    def ended(self) -> bool:
        """Whether the child's state ends a parent's wait."""
        return self.state in ENDED_STATES


_CHILD_COLUMNS = (runs.c.id, runs.c.job_id, runs.c.state, runs.c.rows, runs.c.error,
                  runs.c.reason, runs.c.parent_run_id, runs.c.parent_step, runs.c.created_at,
                  runs.c.finished_at)


_PARENT_AT = list(runs.c.keys()).index("parent_run_id")
_PARENT_STEP_AT = list(runs.c.keys()).index("parent_step")
_CHILDREN_SQL = ("SELECT " + ", ".join(f'"{c.name}"' for c in _CHILD_COLUMNS)
                 + ' FROM runs WHERE "parent_run_id" = ? ORDER BY "created_at", "id"')


@dataclass(frozen=True)
class RunFamily:
    """What :meth:`ChildRuns.family` reads of a run."""

    run: RunRecord
    parent: tuple[str, str, str | None, RunState | None] | None
    children: list[ChildRecord]
    steps: list[StepRunRecord]


def _child(row: Any) -> ChildRecord:
    return ChildRecord(row.id, row.job_id, RunState(row.state), row.rows, row.error,
                       row.reason, row.parent_run_id, row.parent_step, row.created_at,
                       row.finished_at)


class ChildRuns:
    """The parent/child queries and writes of one store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def find(self, parent_run_id: str, step: str, *,
             conn: sa.Connection | None = None) -> ChildRecord | None:
        """The child created by step ``step`` of run ``parent_run_id``, or None."""
        query = sa.select(*_CHILD_COLUMNS).where(runs.c.parent_run_id == parent_run_id,
                                                 runs.c.parent_step == step)
        with self.store._reading(conn) as c:
            row = c.execute(query).first()
        return None if row is None else _child(row)

    def children(self, parent_run_id: str, *,
                 conn: sa.Connection | None = None) -> list[ChildRecord]:
        """Every child of ``parent_run_id``, oldest first."""
        query = (sa.select(*_CHILD_COLUMNS).where(runs.c.parent_run_id == parent_run_id)
                 .order_by(runs.c.created_at, runs.c.id))
        with self.store._reading(conn) as c:
            return [_child(row) for row in c.execute(query)]

    def family(self, run_id: str) -> RunFamily | None:
        """``run_id``, its parent (id, step, job, state; job and state None once pruned),
        its children and its step attempts, on the DBAPI cursor (:meth:`StoreCore._quick_read`:
        a run's page and ``GET /api/runs/{id}``); None for an unknown run. On SQLite one
        read snapshot (BEGIN and COMMIT cost nothing there); on PostgreSQL each statement
        its own, which spares a transaction's round trips (a page refreshed while the run
        moves may show a step newer than the run's row, never a lost one)."""
        with self.store._quick_read(snapshot=self.store.dialect == "sqlite") as read:
            found = read(f"SELECT {RUN_COLUMNS_SQL} FROM runs WHERE id = ?", (run_id,))
            if not found:
                return None
            row = found[0]
            parent = None
            parent_id = row[_PARENT_AT]
            if parent_id is not None:
                above = read("SELECT job_id, state FROM runs WHERE id = ?", (parent_id,))
                parent = (str(parent_id), str(row[_PARENT_STEP_AT]),
                          above[0][0] if above else None,
                          RunState(above[0][1]) if above else None)
            children = [ChildRecord(c[0], c[1], RunState(c[2]), c[3], c[4], c[5], c[6], c[7],
                                    utc_from_raw(c[8]), utc_from_raw(c[9]))  # type: ignore[arg-type]
                        for c in read(_CHILDREN_SQL, (run_id,))]
            steps = [StepRunRecord.from_raw(s)
                     for s in read(f"SELECT {STEP_COLUMNS_SQL} FROM step_runs "
                                   "WHERE run_id = ? ORDER BY id", (run_id,))]
        return RunFamily(RunRecord.from_raw(row), parent, children, steps)

    def parent(self, run_id: str, *,
               conn: sa.Connection | None = None) -> tuple[str, str] | None:
        """(parent run id, parent step) of ``run_id``, or None for a run no call_job made."""
        with self.store._reading(conn) as c:
            row = c.execute(sa.select(runs.c.parent_run_id, runs.c.parent_step)
                            .where(runs.c.id == run_id)).first()
        if row is None or row.parent_run_id is None:
            return None
        return str(row.parent_run_id), str(row.parent_step)

    def ancestors(self, run_id: str) -> list[tuple[str, str]]:
        """(run id, job id) of ``run_id`` and the runs that called it, outermost first
        (at most :data:`MAX_DEPTH` + 1; a run pruned from history ends the chain)."""
        chain: list[tuple[str, str]] = []
        current: str | None = run_id
        with self.store.read() as c:
            while current is not None and len(chain) <= MAX_DEPTH:
                row = c.execute(sa.select(runs.c.job_id, runs.c.parent_run_id)
                                .where(runs.c.id == current)).first()
                if row is None:
                    break
                chain.append((current, str(row.job_id)))
                current = row.parent_run_id
        chain.reverse()
        return chain

    def create(self, parent_run_id: str, epoch: int, step: str,
               spec: NewRun) -> tuple[ChildRecord, bool] | None:
        """The child of step ``step`` of ``parent_run_id``: created QUEUED from ``spec``
        (with its RUN_CREATED event), or the one created before. Returns (child, created),
        or None when the parent is not RUNNING at ``epoch`` any more (another holder took
        it over: nothing is written). One transaction."""
        store = self.store
        with store.write() as c:
            fence = sa.select(runs.c.state, runs.c.lease_epoch).where(
                runs.c.id == parent_run_id)
            if store.dialect == "postgresql":
                fence = fence.with_for_update()
            row = c.execute(fence).first()
            if row is None or row.state != RunState.RUNNING.value or row.lease_epoch != epoch:
                return None
            found = self.find(parent_run_id, step, conn=c)
            if found is not None:
                return found, False
            child_id = store.create_runs([spec], conn=c)[0]
            c.execute(sa.update(runs).where(runs.c.id == child_id).values(
                parent_run_id=parent_run_id, parent_step=step))
            created = self.find(parent_run_id, step, conn=c)
        assert created is not None
        return created, True

    def cancel_children(self, conn: sa.Connection, parent_ids: Iterable[str],
                        by: str) -> list[str]:
        """In ``conn``: cancel the children of ``parent_ids`` that have not ended, and (for
        those canceled at once, being QUEUED) their own children. Returns the ids of the
        children canceled or asked to stop."""
        store = self.store
        touched: list[str] = []
        todo = list(dict.fromkeys(parent_ids))
        depth = 0
        while todo and depth <= MAX_DEPTH:
            depth += 1
            rows = conn.execute(sa.select(runs.c.id).where(
                runs.c.parent_run_id.in_(todo), runs.c.state.in_(_OPEN))
                .order_by(runs.c.id)).scalars().all()
            todo = []
            for child_id in rows:
                result = store.request_cancel(child_id, by, conn=conn)
                if result.canceled:
                    todo.append(child_id)
                if result.canceled or result.requested:
                    touched.append(child_id)
        return touched

    def wake_parents(self, conn: sa.Connection, ended_ids: Sequence[str],
                     now: datetime) -> int:
        """In ``conn``: make due now every QUEUED parent waiting for one of ``ended_ids``
        (runs that ended). Returns how many were woken."""
        if not ended_ids:
            return 0
        # Every batch of run ends pays this read: plain SQL on the DBAPI cursor, as the
        # boundary's own statements (store/hotsql.py says why): ~30 µs for one run here.
        mark = "%s" if self.store.dialect == "postgresql" else "?"
        rows: list[tuple[str, str, str]] = []
        cursor = conn.connection.cursor()
        try:
            ids = list(ended_ids)
            for first in range(0, len(ids), _IDS_PER_READ):
                part = ids[first:first + _IDS_PER_READ]
                cursor.execute(_PARENTS_OF.format(marks=", ".join([mark] * len(part))), part)
                rows.extend(cursor.fetchall())
        finally:
            cursor.close()
        parents = sorted({parent for _, _, parent in rows})
        if parents and self.store.dialect == "postgresql":
            # Wait for a parent's own boundary in flight (its fencing read holds the row): an
            # UPDATE alone skips a row whose committed state is still RUNNING, and the
            # parent's check of this child would not see this transaction either.
            conn.execute(sa.select(runs.c.id).where(runs.c.id.in_(parents))
                         .order_by(runs.c.id).with_for_update())
        woken = 0
        for child_id, job_id, parent in rows:
            woken += self._wake(conn, parent, waiting_reason(child_id, job_id), now)
        return woken

    def wake_waiting(self, conn: sa.Connection, queued_ids: Sequence[str],
                     now: datetime) -> int:
        """In ``conn``: make due now each of ``queued_ids`` (runs just put back to QUEUED)
        whose wait is for a child that has already ended (see the module docstring)."""
        if not queued_ids:
            return 0
        child = runs.alias("child")
        rows = conn.execute(
            sa.select(runs.c.id, runs.c.wait_reason, child.c.id.label("child_id"),
                      child.c.job_id.label("child_job"))
            .join(child, child.c.parent_run_id == runs.c.id)
            .where(runs.c.id.in_(list(queued_ids)), runs.c.state == RunState.QUEUED.value,
                   runs.c.wait_reason.like(WAITING + "%"), child.c.state.in_(_ENDED))).all()
        woken = 0
        for row in rows:
            reason = waiting_reason(row.child_id, row.child_job)
            if row.wait_reason == reason:
                woken += self._wake(conn, row.id, reason, now)
        return woken

    @staticmethod
    def _wake(conn: sa.Connection, parent_id: str, reason: str, now: datetime) -> int:
        done = conn.execute(sa.update(runs).where(
            runs.c.id == parent_id, runs.c.state == RunState.QUEUED.value,
            runs.c.wait_reason == reason,
            sa.or_(runs.c.not_before.is_(None), runs.c.not_before > now),
        ).values(not_before=now, wait_reason=None, updated_at=now))
        return int(done.rowcount or 0)


class ChildRunHook:
    """The run end hook of :class:`ChildRuns` (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.children = store.children

    def __call__(self, conn: sa.Connection, ended: Sequence[EndedRun], now: datetime) -> None:
        # A run known to have no parent has no parent to wake (the boundaries' fencing read
        # says which runs are children): a batch of ordinary run ends reads nothing here.
        finished = [e.run_id for e in ended if e.state in ENDED_STATES and e.child is not False]
        queued = [e.run_id for e in ended if e.state is RunState.QUEUED]
        canceled = [e.run_id for e in ended if e.state is RunState.CANCELED]
        self.children.wake_parents(conn, finished, now)
        self.children.wake_waiting(conn, queued, now)
        if canceled:
            # The child's reason names its parent and why the parent was canceled (its
            # reason, "canceled by alice"): one read, on a cancel only.
            reasons = dict(conn.execute(sa.select(runs.c.id, runs.c.reason).where(
                runs.c.id.in_(canceled))).all())
            for run_id in canceled:
                why = reasons.get(run_id)
                by = f"parent run {run_id}" + (f" ({why})" if why else "")
                self.children.cancel_children(conn, [run_id], by[:128])
