"""The recent runs of many jobs at once, and the step attempts of many runs at once: what
the jobs catalogue's strips and a job page's runs × steps grid read (docs/ui.md "Pages: jobs").

Both are one statement per chunk of ids, whatever the number of jobs or runs: the
catalogue's strips are a ``UNION ALL`` of one ``job_id = ? ORDER BY created_at DESC LIMIT
n`` per job (each walks the ``(job_id, created_at)`` index and stops after ``n`` rows, so a
long history costs nothing), never a scan of the runs table nor one query per job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from cadenza.domain.states import RunState
from cadenza.store.records import StepRunRecord
from cadenza.store.tables import runs, step_runs

if TYPE_CHECKING:
    from cadenza.store.store import Store

JOBS_PER_STATEMENT = 200
"""Jobs per ``UNION ALL`` (SQLite allows 500 compound terms)."""
RUNS_PER_STATEMENT = 500


@dataclass(frozen=True, slots=True)
class RecentRun:
    """What a strip square needs of a run (no params, overrides or errors to decode)."""

    id: str
    job_id: str
    state: RunState
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


_COLUMNS = (runs.c.id, runs.c.job_id, runs.c.state, runs.c.created_at, runs.c.started_at,
            runs.c.finished_at)


class RecentRuns:
    """Bulk reads of recent history (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def by_job(self, job_ids: Sequence[str], per_job: int) -> dict[str, list[RecentRun]]:
        """The last ``per_job`` runs of each job, newest first (a job without runs maps to
        an empty list)."""
        out: dict[str, list[RecentRun]] = {job: [] for job in job_ids}
        if per_job < 1:
            return out
        ids = list(out)
        with self.store.read() as c:
            for start in range(0, len(ids), JOBS_PER_STATEMENT):
                chunk = ids[start:start + JOBS_PER_STATEMENT]
                parts = [sa.select(*_COLUMNS).where(runs.c.job_id == job)
                         .order_by(runs.c.created_at.desc(), runs.c.id.desc())
                         .limit(per_job).subquery().select() for job in chunk]
                query = parts[0] if len(parts) == 1 else sa.union_all(*parts)
                for row in c.execute(query).all():
                    out[row.job_id].append(RecentRun(row.id, row.job_id, RunState(row.state),
                                                     row.created_at, row.started_at,
                                                     row.finished_at))
        for records in out.values():
            records.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return out

    def steps_of(self, run_ids: Sequence[str]) -> dict[str, list[StepRunRecord]]:
        """Every step attempt of each run, in creation order."""
        out: dict[str, list[StepRunRecord]] = {run: [] for run in run_ids}
        ids = list(out)
        with self.store.read() as c:
            for start in range(0, len(ids), RUNS_PER_STATEMENT):
                chunk = ids[start:start + RUNS_PER_STATEMENT]
                rows = c.execute(sa.select(step_runs).where(step_runs.c.run_id.in_(chunk))
                                 .order_by(step_runs.c.id)).all()
                for row in rows:
                    record = StepRunRecord.from_row(row)
                    out[record.run_id].append(record)
        return out
