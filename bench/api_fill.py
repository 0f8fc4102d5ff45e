"""Fill a store with a year of history, fast (bench/api.py's W6 data set; not a test).

The schema comes from ``Store.open`` (the migrations); the rows are written around the
store's code, in bulk, with the secondary indexes and SQLite's triggers dropped during the
load and re-created afterwards from their own DDL (``sqlite_master``, ``pg_indexes``):

* SQLite: ``executemany`` on one ``sqlite3`` connection, ``synchronous = OFF`` while filling
  (about 60 s for 1,000,000 runs and 3,000,000 events on the bench machine);
* PostgreSQL: ``COPY ... FROM STDIN`` in text format, then ``ANALYZE`` (what autovacuum would
  do within a minute of such a load).

The data: ``jobs`` jobs with a skewed share of the runs (the busiest job has ~10 %, the
quietest ~0.5 %), runs spread uniformly over the last 365 days, ids ULID-like and increasing
with ``created_at`` as the store makes them. States: SUCCEEDED 90 %, FAILED 5 %, MISSED 2 %,
CANCELED 1.5 %, NEEDS_REVIEW 0.5 %, and QUEUED for ~5 % of the last two days' runs (held by a
``not_before`` ten years ahead, so that a node never claims them). Every run that started has
one step run; events are RUN_CREATED / RUN_MISSED, RUN_STATE_CHANGED, RUN_FINISHED and
STEP_* events, ``events`` in all, in time order. No run log lines (W6 does not read them).
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cadenza.store import Store
from cadenza.store.codec import RunIdFactory

JOB_WORDS = ("sales-load", "crm-sync", "invoice-export", "ledger-close", "stock-refresh",
             "report-mail", "ldap-sync", "backup-db", "price-feed", "orders-import")
STATE_WEIGHTS = (("SUCCEEDED", 0.90), ("FAILED", 0.05), ("MISSED", 0.02),
                 ("CANCELED", 0.015), ("NEEDS_REVIEW", 0.005))
QUEUED_SHARE = 0.05  # of the runs created in the last two days
CHUNK = 20_000  # runs per generated batch
DAY_US = 86_400_000_000

RUN_COLUMNS = ("id", "job_id", "state", "trigger", "schedule", "scheduled_for", "created_at",
               "started_at", "finished_at", "not_before", "priority", "params_json",
               "overrides_json", "rows", "error", "reason", "wait_reason", "lease_epoch",
               "attempt", "resumes", "updated_at")
STEP_COLUMNS = ("run_id", "step", "step_type", "attempt", "state", "reason", "created_at",
                "started_at", "finished_at", "rows", "output_json", "error", "error_class",
                "updated_at")
EVENT_COLUMNS = ("run_id", "event_type", "level", "message", "payload_json", "created_at",
                 "actor")
FILLED_TABLES = ("runs", "step_runs", "event_log")


@dataclass
class FillInfo:
    """What a fill made, kept beside the database (``--reuse``) and read by the clients."""

    runs: int
    events: int
    jobs: list[str]
    seed: int
    now: str
    seconds: float = 0.0
    step_runs: int = 0
    counts_by_state: dict[str, int] = field(default_factory=dict)
    sample_runs: list[str] = field(default_factory=list)
    deep_runs: list[str] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> FillInfo:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def job_names(count: int) -> list[str]:
    """``count`` job ids like ``sales-load-03``."""
    return [f"{JOB_WORDS[k % len(JOB_WORDS)]}-{k // len(JOB_WORDS):02d}" for k in range(count)]


def _ts(us: int) -> str:
    """SQLite's text of a UTC instant given in microseconds since the epoch."""
    return (_EPOCH + timedelta(microseconds=us)).strftime("%Y-%m-%d %H:%M:%S.%f")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class _Batch:
    runs: list[tuple[Any, ...]]
    steps: list[tuple[Any, ...]]
    events: list[tuple[Any, ...]]


class _Generator:
    """The rows, batch by batch, oldest runs first."""

    def __init__(self, runs: int, events: int, jobs: Sequence[str], seed: int,
                 now: datetime) -> None:
        self.rng = random.Random(seed)
        self.n = runs
        self.jobs = list(jobs)
        now_us = (now - _EPOCH) // timedelta(microseconds=1)
        start = now_us - 365 * DAY_US
        end = now_us - 60_000_000  # the newest run a minute ago
        rng = self.rng
        self.times = sorted(rng.randrange(start, end) for _ in range(runs))
        weights = [1.0 / (k + 1) ** 0.8 for k in range(len(self.jobs))]
        self.job_of = rng.choices(range(len(self.jobs)), weights, k=runs)
        names, probs = zip(*STATE_WEIGHTS, strict=True)
        self.states = rng.choices(names, probs, k=runs)
        recent = end - 2 * DAY_US
        for k in range(runs - 1, -1, -1):
            if self.times[k] < recent:
                break
            if rng.random() < QUEUED_SHARE:
                self.states[k] = "QUEUED"
        self.extra = self._extra_events(events)
        self.held_until = _ts(now_us + 3650 * DAY_US)
        self.ids = RunIdFactory()

    def _extra_events(self, total: int) -> list[int]:
        """Per run, the events beyond the base ones (STEP_STARTED, STEP_SUCCEEDED/FAILED,
        RUN_STATE_CHANGED), so that the events add up to ``total`` exactly."""
        base = sum(1 if s in ("MISSED", "QUEUED") else 3 for s in self.states)
        extra = [0] * self.n
        started = [k for k, s in enumerate(self.states) if s not in ("MISSED", "QUEUED")]
        left = total - base
        if left < 0:
            raise SystemExit(f"--events {total} is below the base events of the runs ({base})")
        if left and not started:
            raise SystemExit("no started run to carry the extra events")
        per, rest = divmod(left, len(started)) if started else (0, 0)
        for k in started:
            extra[k] = per
        for k in self.rng.sample(started, rest):
            extra[k] += 1
        return extra

    def batches(self) -> Iterator[_Batch]:
        for first in range(0, self.n, CHUNK):
            yield self._batch(range(first, min(self.n, first + CHUNK)))

    def _batch(self, span: range) -> _Batch:
        rng = self.rng
        runs: list[tuple[Any, ...]] = []
        steps: list[tuple[Any, ...]] = []
        events: list[tuple[Any, ...]] = []
        for k in span:
            created_us = self.times[k]
            created = _ts(created_us)
            run_id = self.ids(_EPOCH + timedelta(microseconds=created_us))
            job = self.jobs[self.job_of[k]]
            state = self.states[k]
            scheduled = rng.random() < 0.85 or state == "MISSED"
            trigger = "scheduled" if scheduled else rng.choice(("manual:alice", "manual:bob",
                                                                "manual:api"))
            schedule = "job" if scheduled else None
            scheduled_for = _ts(created_us + 1_800_000) if scheduled else None
            started_us = created_us + (1_800_000 if scheduled else 0) + rng.randrange(50_000)
            finished_us = started_us + int(rng.lognormvariate(16.0, 1.5))  # ~9 s median
            timed: list[tuple[int, str, str, str, str]] = []  # (us, type, level, msg, payload)
            started = finished = not_before = error = reason = wait = None
            rows = None
            updated = created
            if state == "MISSED":
                finished = created
                reason = "missed: the node was down at the fire"
                timed.append((created_us, "RUN_MISSED", "WARNING", f"run of {job} missed",
                              '{"reason": "node down"}'))
            elif state == "QUEUED":
                not_before = self.held_until
                wait = "not before its time (held by the benchmark)"
                timed.append((created_us, "RUN_CREATED", "INFO", f"run of {job} queued",
                              '{"state": "QUEUED"}'))
            else:
                started = _ts(started_us)
                end_us = finished_us
                if state != "NEEDS_REVIEW":
                    finished = _ts(finished_us)
                if state == "SUCCEEDED":
                    rows = rng.randrange(100_000)
                elif state == "FAILED":
                    error = "ConnectionError: connection refused by db.internal:5432"
                elif state == "CANCELED":
                    reason = "canceled by alice"
                else:
                    reason = "the node holding the run stopped mid-step"
                updated = _ts(end_us)
                step_state = {"NEEDS_REVIEW": "FAILED"}.get(state, state)
                steps.append((run_id, "main", "python", 1, step_state, reason, started,
                              started, finished or updated, rows,
                              f'{{"rows": {rows or 0}}}', error,
                              "transient" if error else None, updated))
                timed.append((created_us, "RUN_CREATED", "INFO", f"run of {job} queued",
                              '{"state": "QUEUED"}'))
                timed.append((started_us, "RUN_STATE_CHANGED", "INFO", "QUEUED -> RUNNING",
                              '{"from": "QUEUED", "to": "RUNNING"}'))
                timed.append((end_us, "RUN_FINISHED" if finished else "RUN_STATE_CHANGED",
                              "ERROR" if error else "INFO", f"RUNNING -> {state}",
                              f'{{"from": "RUNNING", "to": "{state}"}}'))
                kinds = ("STEP_STARTED", "STEP_FAILED" if error else "STEP_SUCCEEDED")
                for j in range(self.extra[k]):
                    at = started_us + (end_us - started_us) * (j + 1) // (self.extra[k] + 1)
                    timed.append((at, kinds[j % 2], "INFO", f"step main: {kinds[j % 2]}",
                                  '{"step": "main", "attempt": 1}'))
            runs.append((run_id, job, state, trigger, schedule, scheduled_for, created,
                         started, finished, not_before, 0, "{}", "{}", rows, error, reason,
                         wait, 1 if started else 0, 1 if started else 0, 0, updated))
            for at, kind, level, message, payload in timed:
                events.append((at, (run_id, kind, level, message, payload, _ts(at),
                                    "system")))
        events.sort(key=lambda e: e[0])
        return _Batch(runs, steps, [e[1] for e in events])


# --- SQLite -------------------------------------------------------------------------


def _fill_sqlite(path: Path, gen: _Generator) -> int:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA synchronous = OFF")
        con.execute("PRAGMA cache_size = -400000")
        ddl = con.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('index', 'trigger') "
            f"AND tbl_name IN {FILLED_TABLES} AND sql IS NOT NULL").fetchall()
        con.execute("BEGIN")
        for kind, name, _sql in ddl:
            con.execute(f'DROP {kind.upper()} "{name}"')
        steps = 0
        marks = {t: ", ".join("?" * len(c)) for t, c in
                 (("runs", RUN_COLUMNS), ("step_runs", STEP_COLUMNS),
                  ("event_log", EVENT_COLUMNS))}
        for batch in gen.batches():
            con.executemany(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) "
                            f"VALUES ({marks['runs']})", batch.runs)
            con.executemany(f"INSERT INTO step_runs ({', '.join(STEP_COLUMNS)}) "
                            f"VALUES ({marks['step_runs']})", batch.steps)
            con.executemany(f"INSERT INTO event_log ({', '.join(EVENT_COLUMNS)}) "
                            f"VALUES ({marks['event_log']})", batch.events)
            steps += len(batch.steps)
        for _kind, _name, sql in sorted(ddl, key=lambda d: d[0]):  # indexes, then triggers
            con.execute(sql)
        # What the dropped runs_version triggers would have done: a new version.
        con.execute("UPDATE runs_version SET version = version + 1")
        con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
    return steps


# --- PostgreSQL ---------------------------------------------------------------------


def _copy_text(value: Any) -> str:
    if value is None:
        return "\\N"
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return text


def _pg_ts(rows: list[tuple[Any, ...]], positions: Sequence[int]) -> Iterator[str]:
    for row in rows:
        values = list(row)
        for p in positions:
            if values[p] is not None:
                values[p] = values[p] + "+00"
        yield "\t".join(_copy_text(v) for v in values) + "\n"


def _fill_postgresql(url: str, gen: _Generator) -> int:
    import psycopg

    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    ts_of = {
        "runs": [RUN_COLUMNS.index(c) for c in ("scheduled_for", "created_at", "started_at",
                                                 "finished_at", "not_before", "updated_at")],
        "step_runs": [STEP_COLUMNS.index(c) for c in ("created_at", "started_at",
                                                       "finished_at", "updated_at")],
        "event_log": [EVENT_COLUMNS.index("created_at")],
    }
    columns = {"runs": RUN_COLUMNS, "step_runs": STEP_COLUMNS, "event_log": EVENT_COLUMNS}
    steps = 0
    with psycopg.connect(dsn) as con:
        # Secondary indexes only: those behind a constraint (primary keys, UNIQUE) stay.
        ddl = con.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = 'public' "
            "AND i.tablename = ANY(%s) AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
            "WHERE c.conname = i.indexname)", [list(FILLED_TABLES)]).fetchall()
        for name, _sql in ddl:
            con.execute(f'DROP INDEX "{name}"')
        for batch in gen.batches():
            for table, rows in (("runs", batch.runs), ("step_runs", batch.steps),
                                ("event_log", batch.events)):
                with con.cursor().copy(
                        f"COPY {table} ({', '.join(columns[table])}) FROM STDIN") as copy:
                    copy.write("".join(_pg_ts(rows, ts_of[table])))
            steps += len(batch.steps)
        for _name, sql in ddl:
            con.execute(sql)
        con.commit()
        con.autocommit = True
        con.execute("ANALYZE runs")
        con.execute("ANALYZE step_runs")
        con.execute("ANALYZE event_log")
    return steps


# --- both ---------------------------------------------------------------------------


def fill(url: str, runs: int, events: int, jobs: int, seed: int = 7) -> FillInfo:
    """Create the schema at ``url`` (an empty database) and fill it; what was made."""
    import time

    t0 = time.perf_counter()
    store = Store.open(url)  # the schema, by the migrations
    store.close()
    now = datetime.now(UTC).replace(microsecond=0)
    names = job_names(jobs)
    gen = _Generator(runs, events, names, seed, now)
    if url.startswith("sqlite"):
        database = sa.make_url(url).database
        assert database is not None
        steps = _fill_sqlite(Path(database), gen)
    else:
        steps = _fill_postgresql(url, gen)
    counts: dict[str, int] = {}
    for state in gen.states:
        counts[state] = counts.get(state, 0) + 1
    info = FillInfo(runs, events, names, seed, now.isoformat(),
                    seconds=round(time.perf_counter() - t0, 1), step_runs=steps,
                    counts_by_state=counts)
    sample = random.Random(seed + 1)
    info.sample_runs, info.deep_runs = _sample_ids(url, sample, runs)
    return info


def _sample_ids(url: str, rng: random.Random, runs: int) -> tuple[list[str], list[str]]:
    """1,000 run ids anywhere in history, and 100 among the oldest fifth (the "deep"
    cursors: a page there is the farthest from the newest end of every index)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            every = [r[0] for r in c.exec_driver_sql("SELECT id FROM runs ORDER BY id")]
    finally:
        engine.dispose()
    oldest = every[: max(1, len(every) // 5)]
    return (rng.sample(every, min(1000, len(every))),
            rng.sample(oldest, min(100, len(oldest))))
