"""Time one scheduler tick that records N due fires (no node, no workers). A benchmark.

N jobs, all ``* * * * *`` in UTC, on a fresh SQLite file or PostgreSQL database with the
redactor ``cadenza serve`` uses (``cadenza.audit.Redactor``); a ``FakeClock`` steps one minute
per round, so every round's tick writes N QUEUED runs (plus their events and cursors) and
nothing else competes for the store. Prints the tick's wall
time per round (the first round, which creates the cursors, is not counted) and where the
time went (``--profile``: the top functions of one tick by cumulative time).

    .venv/bin/python bench/schedule_tick.py --jobs 1000 [--store postgresql] [--rounds 5]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from common import scratch_pg_database

from cadenza.audit.redact import Redactor
from cadenza.clock import FakeClock
from cadenza.config.schema_jobs import JobConfig
from cadenza.scheduler.service import Scheduler
from cadenza.store import Store

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _jobs(count: int) -> dict[str, JobConfig]:
    return {
        f"j{k:05d}": JobConfig.model_validate(
            {"id": f"j{k:05d}", "schedule": "* * * * *", "timezone": "UTC"}
        )
        for k in range(count)
    }


def bench(url: str, args: argparse.Namespace) -> dict[str, object]:
    clock = FakeClock("2027-03-01T00:00:30+00:00")
    store = Store.open(url, clock=clock, redactor=Redactor(["bench-secret-value"]))
    try:
        scheduler = Scheduler(store, _jobs(args.jobs), clock=clock, rng=random.Random(1),
                              default_zone=ZoneInfo("UTC"))
        scheduler.tick(clock.now())  # creates the cursors: nothing is due yet
        times: list[float] = []
        created = 0
        for round_ in range(args.rounds):
            clock.advance(timedelta(minutes=1))
            profiler = cProfile.Profile() if args.profile and round_ == args.rounds - 1 else None
            start = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            result = scheduler.tick(clock.now())
            if profiler is not None:
                profiler.disable()
            times.append((time.perf_counter() - start) * 1000)
            created = len(result.created)
            assert created == args.jobs, (created, args.jobs)
            # Finish the runs (raw SQL) so that the next round's overlap check sees none
            # active, as when workers have run them.
            with store.write() as c:
                c.execute(sa.text("UPDATE runs SET state = 'SUCCEEDED' WHERE state = 'QUEUED'"))
            if profiler is not None:
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
    finally:
        store.close()
    return {
        "bench": "schedule_tick", "store": args.store, "jobs": args.jobs,
        "created_per_tick": created,
        "tick_ms": [round(t, 1) for t in times],
        "tick_ms_median": round(statistics.median(times), 1),
        "tick_ms_min": round(min(times), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the N top functions of the last tick")
    args = parser.parse_args()
    if args.store == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            result = bench(f"sqlite:///{(Path(tmp) / 'cadenza.db').as_posix()}", args)
    else:
        with scratch_pg_database(PG_ADMIN) as url:
            result = bench(url, args)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
