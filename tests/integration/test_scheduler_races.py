"""Two schedulers racing on one store never record a fire twice (SPEC §6, §19; RELIABILITY
#39, #46, #51), with threads and with separate processes, on SQLite and PostgreSQL.

Leadership is deliberately bypassed: ``tick`` is called on both schedulers at the same
instant, so only the store's guards (the UNIQUE fire, cursor row locks) keep the promise.
"""

from __future__ import annotations

import json
import random
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from tests.support.line_worker import LineWorker

from cadenza.clock import FakeClock
from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.states import RunState
from cadenza.scheduler.fires import fires_between
from cadenza.scheduler.schedules import all_schedules
from cadenza.scheduler.service import Scheduler
from cadenza.store import Store
from cadenza.store.tables import runs

WORKER = Path(__file__).with_name("scheduler_race_worker.py")
T0 = datetime(2027, 11, 7, 4, 50, 30, tzinfo=UTC)  # New York's fold is 05:00-07:00 UTC
MINUTES = 20
DOWNTIME = timedelta(minutes=25)

JOBS: list[dict[str, Any]] = [
    *(
        {"id": f"minutely-{k}", "schedule": "* * * * *", "timezone": "America/New_York",
         "on_overlap": "queue" if k % 2 else "skip", "on_missed": "run_all", "catchup_max": 3}
        for k in range(6)
    ),
    {"id": "quarter", "schedule": "*/15 * * * *", "timezone": "America/New_York",
     "on_missed": "run_latest",
     "presets": {"fast": {"schedule": "*/2 * * * *", "params": {}},
                 "off": {"schedule": "* * * * *", "enabled": False}}},
    {"id": "fixed", "schedule": "30 1 * * *", "timezone": "America/New_York"},
]


def configs() -> dict[str, JobConfig]:
    return {item["id"]: JobConfig.model_validate(item) for item in JOBS}


def instants() -> list[datetime]:
    """Tick times: a start, a minute-by-minute run, then a jump past some downtime."""
    ticks = [T0 + timedelta(minutes=k) for k in range(MINUTES + 1)]
    return [*ticks, ticks[-1] + DOWNTIME]


def expected_fires() -> int:
    specs = all_schedules(configs(), ZoneInfo("UTC"))
    end = instants()[-1]
    return sum(len(fires_between(s, T0, end)) for s in specs.values() if s.enabled)


def check_store(url: str) -> None:
    store = Store.open(url)
    try:
        with store.read() as conn:
            rows = conn.execute(
                sa.select(runs.c.job_id, runs.c.schedule, runs.c.scheduled_for, runs.c.state)
            ).all()
    finally:
        store.close()
    counts = Counter((r.job_id, r.schedule, r.scheduled_for) for r in rows)
    assert counts and max(counts.values()) == 1, counts.most_common(3)
    assert len(rows) == expected_fires()
    assert {r.state for r in rows} == {RunState.QUEUED.value, RunState.MISSED.value}
    assert not [r for r in rows if r.schedule == "preset:off"]


def test_two_schedulers_in_threads(store_url: str) -> None:
    clock = FakeClock(T0)
    stores = [Store.open(store_url, clock=clock) for _ in range(2)]
    schedulers = [Scheduler(s, configs(), clock=clock, rng=random.Random(k),
                            default_zone=ZoneInfo("UTC")) for k, s in enumerate(stores)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    outcomes: list[tuple[int, int]] = []

    def run(scheduler: Scheduler) -> None:
        try:
            for when in instants():
                barrier.wait(timeout=60)
                result = scheduler.tick(when)
                outcomes.append((len(result.created), result.already_recorded))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(s,)) for s in schedulers]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        for store in stores:
            store.close()
    assert not errors, errors
    assert sum(created for created, _ in outcomes) == expected_fires()
    check_store(store_url)


class Worker(LineWorker):
    """One scheduler_race_worker.py process."""

    def __init__(self, url: str, jobs_file: Path) -> None:
        super().__init__([sys.executable, str(WORKER), url, str(jobs_file)])


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[list[Worker]]:
    Store.open(store_url).close()  # migrate once, before the race
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(JOBS), encoding="utf-8")
    started: list[Worker] = []
    try:
        started.extend(Worker(store_url, jobs_file) for _ in range(2))
        for worker in started:
            assert worker.answer() == "ready"
        yield started
    finally:
        for worker in started:
            worker.close()


@pytest.mark.reliability_case(39)
def test_two_scheduler_processes(workers: list[Worker], store_url: str) -> None:
    created = 0
    for when in instants():
        for worker in workers:
            worker.send(f"tick {when.isoformat()}")
        for worker in workers:
            made, _already = (int(x) for x in worker.answer().split())
            created += made
    assert created == expected_fires()
    check_store(store_url)
