"""The dashboard's figures (``cadenza stats``) computed from the store over a window: queue
time, execution time, retry rate, error share by class and by step type, mean time from
failure to recovery per job, runs by state; with :mod:`cadenza.store.pool_stats`, resource
utilization per pool and the resources cooling down.

Read in one read transaction; durations in seconds. The window's runs are read row by row
(only the columns needed), which is fine for days of history; a longer window is a job
for ``/metrics`` and Prometheus.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from cadenza.store.pool_stats import PoolStats
from cadenza.store.tables import resources, runs, step_runs

if TYPE_CHECKING:
    from cadenza.store.protocols import Transactions


@dataclass(frozen=True)
class Durations:
    """Count, mean, 95th percentile and maximum of some durations (seconds)."""

    count: int = 0
    mean: float | None = None
    p95: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Durations:
        if not values:
            return cls()
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        return cls(len(ordered), round(sum(ordered) / len(ordered), 3), round(p95, 3),
                   round(ordered[-1], 3))


@dataclass(frozen=True)
class RunStats:
    """The figures of one window (see the module docstring)."""

    since: datetime
    runs_by_state: dict[str, int]
    queue: Durations
    execution: Durations
    execution_by_job: dict[str, Durations]
    step_attempts: int
    retried_attempts: int
    errors_by_class: dict[str, int]
    errors_by_step_type: dict[str, int]
    recovery_by_job: dict[str, Durations] = field(default_factory=dict)
    pools: PoolStats | None = None

    @property
    def retry_rate(self) -> float | None:
        """Share of step attempts that were retries."""
        return None if not self.step_attempts else \
            round(self.retried_attempts / self.step_attempts, 4)

    def as_json(self) -> dict[str, Any]:
        def d(value: Durations) -> dict[str, Any]:
            return vars(value)

        failed = sum(self.errors_by_class.values())
        return {
            "since": self.since, "runs_by_state": self.runs_by_state,
            "queue_seconds": d(self.queue), "execution_seconds": d(self.execution),
            "execution_seconds_by_job": {k: d(v) for k, v in self.execution_by_job.items()},
            "retry_rate": self.retry_rate, "step_attempts": self.step_attempts,
            "error_share_by_class": {k: round(v / failed, 4)
                                     for k, v in self.errors_by_class.items()},
            "error_share_by_step_type": {k: round(v / failed, 4)
                                         for k, v in self.errors_by_step_type.items()},
            "recovery_seconds_by_job": {k: d(v) for k, v in self.recovery_by_job.items()},
            "resource_utilization_by_pool": {} if self.pools is None else {
                k: v.as_json() for k, v in self.pools.pools.items()},
            "resources_cooling_down": [] if self.pools is None else [
                c.as_json() for c in self.pools.cooling],
        }


def run_stats(store: Transactions, since: datetime) -> RunStats:
    """The figures of the runs created at or after ``since``."""
    with store.read() as c:
        sqlite = c.dialect.name == "sqlite"
        read = c.execute(sa.select(
            runs.c.job_id, runs.c.state,
            *(_raw(sqlite, column) for column in (runs.c.created_at, runs.c.scheduled_for,
                                                  runs.c.started_at, runs.c.finished_at)),
        ).where(runs.c.created_at >= since).order_by(runs.c.created_at, runs.c.id)).all()
        # SQLite keeps naive UTC text: parsed here at C speed (the column type's own
        # conversion is most of the cost of a week of runs), all naive, so they subtract.
        rows = [(job, state, *map(_iso, times)) for job, state, *times in read] if sqlite \
            else [tuple(row) for row in read]
        steps = c.execute(sa.select(
            step_runs.c.attempt, step_runs.c.state, step_runs.c.error_class,
            step_runs.c.step_type,
        ).where(step_runs.c.created_at >= since)).all()
    by_state: Counter[str] = Counter()
    queue: list[float] = []
    execution: list[float] = []
    by_job: dict[str, list[float]] = defaultdict(list)
    failed_at: dict[str, datetime] = {}
    recovery: dict[str, list[float]] = defaultdict(list)
    for job, state, created, scheduled, started, finished in rows:
        by_state[state] += 1
        if started is not None:
            queue.append(max(0.0, (started - max(created, scheduled or created))
                             .total_seconds()))
        if started is not None and finished is not None:
            seconds = (finished - started).total_seconds()
            execution.append(seconds)
            by_job[job].append(seconds)
    # Recovery: from a failed run's end to the end of the job's next successful run.
    for job, state, _created, _scheduled, _started, finished in sorted(
            (r for r in rows if r[5] is not None), key=lambda r: r[5]):
        if state == "FAILED":
            failed_at.setdefault(job, finished)
        elif state == "SUCCEEDED" and job in failed_at:
            recovery[job].append((finished - failed_at.pop(job)).total_seconds())
    errors_by_class: Counter[str] = Counter()
    errors_by_type: Counter[str] = Counter()
    retried = 0
    for attempt, state, error_class, step_type in steps:
        retried += attempt > 1
        if state == "FAILED":
            errors_by_class[error_class or "unclassified"] += 1
            errors_by_type[step_type] += 1
    return RunStats(since, dict(by_state), Durations.of(queue), Durations.of(execution),
                    {job: Durations.of(v) for job, v in by_job.items()}, len(steps), retried,
                    dict(errors_by_class), dict(errors_by_type),
                    {job: Durations.of(v) for job, v in recovery.items()})


def _raw(sqlite: bool, column: Any) -> Any:
    """A timestamp column without the UTCDateTime conversion: SQLite's text as is,
    PostgreSQL's ``timestamptz`` as the driver's aware datetime."""
    return sa.type_coerce(column, sa.String() if sqlite else sa.DateTime(timezone=True))


def _iso(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


@dataclass(frozen=True)
class RunSeries:
    """The window cut in equal buckets, for the dashboard's charts: per bucket start (unix
    seconds), the runs that ended SUCCEEDED and not (FAILED, CANCELED, NEEDS_REVIEW), the
    mean queue time of the runs that started in it and the mean execution time of the runs
    that ended in it (None for none)."""

    x: list[int]
    succeeded: list[int]
    failed: list[int]
    queue_mean: list[float | None]
    execution_mean: list[float | None]


def run_series(store: Transactions, since: datetime, until: datetime, step: timedelta) -> RunSeries:
    """:class:`RunSeries` of the runs created between ``since`` and ``until`` (the runs of
    :func:`run_stats`), aggregated by the database: two grouped reads over the
    ``created_at`` index, one row per bucket and state, whatever the number of runs."""
    count = max(1, int((until - since) / step) + 1)
    seconds = step.total_seconds()
    with store.read() as c:
        name = c.dialect.name
        start = sa.literal(since.timestamp(), sa.Float)

        def bucket(column: Any) -> Any:
            offset = (_epoch(name, column) - start) / seconds
            return sa.cast(sa.func.floor(offset) if name != "sqlite" else offset, sa.Integer)

        window = sa.and_(runs.c.created_at >= since, runs.c.created_at <= until)
        ended = bucket(runs.c.finished_at).label("b")
        ends = c.execute(sa.select(
            ended, runs.c.state, sa.func.count(),
            sa.func.sum(_epoch(name, runs.c.finished_at) - _epoch(name, runs.c.started_at)),
            sa.func.count(runs.c.started_at),
        ).where(window, runs.c.finished_at.is_not(None)).group_by(ended, runs.c.state)).all()
        ready = sa.case((sa.and_(runs.c.scheduled_for.is_not(None),
                                 runs.c.scheduled_for > runs.c.created_at),
                         _epoch(name, runs.c.scheduled_for)),
                        else_=_epoch(name, runs.c.created_at))
        wait = _epoch(name, runs.c.started_at) - ready
        began = bucket(runs.c.started_at).label("b")
        starts = c.execute(sa.select(
            began, sa.func.count(),
            sa.func.sum(sa.case((wait < 0, 0.0), else_=wait)),
        ).where(window, runs.c.started_at.is_not(None)).group_by(began)).all()
    ok, bad = [0] * count, [0] * count
    run_seconds, run_count = [0.0] * count, [0] * count
    queue_seconds, queue_count = [0.0] * count, [0] * count
    for index, state, n, took, timed in ends:
        if index is None or not 0 <= int(index) < count:
            continue
        i = int(index)
        if state == "SUCCEEDED":
            ok[i] += int(n)
        elif state in ("FAILED", "CANCELED", "NEEDS_REVIEW"):
            bad[i] += int(n)
        if took is not None:
            run_seconds[i] += float(took)
            run_count[i] += int(timed)
    for index, n, waited in starts:
        if index is not None and 0 <= int(index) < count:
            queue_seconds[int(index)] += float(waited or 0.0)
            queue_count[int(index)] += int(n)

    def mean(total: float, n: int) -> float | None:
        return round(total / n, 3) if n else None

    return RunSeries([int((since + i * step).timestamp()) for i in range(count)], ok, bad,
                     [mean(queue_seconds[i], queue_count[i]) for i in range(count)],
                     [mean(run_seconds[i], run_count[i]) for i in range(count)])


def _epoch(dialect: str, column: Any) -> Any:
    """A timestamp column as Unix seconds (fractional) in SQL: SQLite keeps naive UTC
    text (``julianday``), PostgreSQL a ``timestamptz`` (``extract(epoch ...)``)."""
    if dialect == "sqlite":
        return (sa.func.julianday(column) - 2440587.5) * 86400.0
    return sa.cast(sa.extract("epoch", column), sa.Float)


# -- what ``GET /metrics`` reads at each scrape (cadenza.web.metrics) -----------------------


def run_counts(store: Transactions) -> list[tuple[str, str, int]]:
    """Runs in the store by job and state: (job id, state, count) each."""
    with store.read() as c:
        rows = c.execute(sa.select(runs.c.job_id, runs.c.state, sa.func.count())
                         .group_by(runs.c.job_id, runs.c.state)).all()
    return [(row[0], row[1], int(row[2])) for row in rows]


def ended_since(store: Transactions, since: datetime) -> list[tuple[str, datetime, datetime]]:
    """The runs that finished at or after ``since`` having started: (job id, started_at,
    finished_at) each."""
    with store.read() as c:
        rows = c.execute(sa.select(runs.c.job_id, runs.c.started_at, runs.c.finished_at)
                         .where(runs.c.finished_at >= since,
                                runs.c.started_at.is_not(None))).all()
    return [(row[0], row[1], row[2]) for row in rows]


def pool_counts(store: Transactions) -> list[tuple[str, str, int]]:
    """Pool members by pool and state: (pool, state, count) each."""
    with store.read() as c:
        rows = c.execute(sa.select(resources.c.pool, resources.c.state, sa.func.count())
                         .group_by(resources.c.pool, resources.c.state)).all()
    return [(row[0], row[1], int(row[2])) for row in rows]
