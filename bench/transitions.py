"""Benchmark: run state transitions per second through ``cadenza.store`` (not a test).

Each transition is one ``Store.transition_run`` call, a cancel of a QUEUED run (the commanded
transitions are cancel, resume and abandon; a run starts only through the claim and ends
through its boundary): a locking read of the run, a conditional UPDATE, its
RUN_STATE_CHANGED and RUN_FINISHED events, the run end hooks, one commit. Every call succeeds
on a run created beforehand. ``create_run`` (INSERT + RUN_CREATED, one commit) is measured
as well.

Usage::

    python bench/transitions.py --store sqlite --sync NORMAL -n 5000
    python bench/transitions.py --store sqlite --sync FULL -n 5000
    python bench/transitions.py --store postgresql -n 5000 [--pg-url postgresql+psycopg://...]

Prints one JSON object: the median over ``--reps`` repetitions and every repetition. SQLite
files go to a fresh temporary directory (``--dir`` to choose the disk); PostgreSQL gets a
fresh database that is dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import scratch_pg_database

from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.tables import event_log

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def database(args: argparse.Namespace) -> Iterator[str]:
    """A fresh store URL, removed afterwards."""
    if args.store == "sqlite":
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            yield f"sqlite:///{(Path(tmp) / 'bench.db').as_posix()}"
        return
    with scratch_pg_database(args.pg_url) as url:
        yield url


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def event_count(store: Store) -> int:
    with store.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(event_log)).scalar_one())


def one_rep(url: str, args: argparse.Namespace) -> dict[str, Any]:
    store = Store.open(url, sqlite_synchronous=args.sync)
    commits = 0

    def count_commit(_conn: object) -> None:
        nonlocal commits
        commits += 1

    try:
        ids = [store.create_run("bench", "manual") or ""
               for _ in range(args.warmup + args.n)]

        def step(i: int) -> None:
            if not store.transition_run(ids[i], RunState.CANCELED, reason="bench"):
                raise RuntimeError(f"the cancel of {ids[i]} was refused")

        for i in range(args.warmup):
            step(i)
        events_before = event_count(store)
        sa.event.listen(store.engine, "commit", count_commit)
        latencies = []
        started = time.perf_counter()
        for i in range(args.warmup, args.warmup + args.n):
            t0 = time.perf_counter()
            step(i)
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
        sa.event.remove(store.engine, "commit", count_commit)
        events = event_count(store) - events_before

        created_started = time.perf_counter()
        for _ in range(args.n // 5):
            store.create_run("bench-create", "manual")
        create_elapsed = time.perf_counter() - created_started
    finally:
        store.close()
    return {
        "transitions_per_s": args.n / elapsed,
        "latency_ms": {
            "p50": percentile(latencies, 0.50) * 1000,
            "p99": percentile(latencies, 0.99) * 1000,
            "max": max(latencies) * 1000,
        },
        "commits_per_transition": commits / args.n,
        "events_per_transition": events / args.n,
        "create_run_per_s": (args.n // 5) / create_elapsed,
    }


def versions(url: str) -> dict[str, str]:
    found = {
        "python": platform.python_version(),
        "sqlalchemy": sa.__version__,
        "sqlite": sqlite3.sqlite_version,
    }
    if url.startswith("postgresql"):
        import psycopg

        engine = sa.create_engine(url)
        with engine.connect() as conn:
            found["postgresql"] = str(conn.exec_driver_sql("SHOW server_version").scalar())
        engine.dispose()
        found["psycopg"] = psycopg.__version__
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--sync", choices=["NORMAL", "FULL"], default="NORMAL")
    parser.add_argument("-n", type=int, default=5000, help="timed transitions per repetition")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--pg-url", default=os.environ.get("CADENZA_BENCH_PG", DEFAULT_PG))
    parser.add_argument("--dir", default=None, help="where SQLite files go (default: temp)")
    args = parser.parse_args(argv)

    reps = []
    for _ in range(args.reps):
        with database(args) as url:
            reps.append(one_rep(url, args))
            info = versions(url)
    rates = [r["transitions_per_s"] for r in reps]
    result = {
        "benchmark": "store.transition_run",
        "store": args.store,
        "synchronous": args.sync if args.store == "sqlite" else None,
        "n": args.n,
        "reps": args.reps,
        "transitions_per_s_median": statistics.median(rates),
        "transitions_per_s_min_max": [min(rates), max(rates)],
        "create_run_per_s_median": statistics.median(r["create_run_per_s"] for r in reps),
        "commits_per_transition": reps[0]["commits_per_transition"],
        "events_per_transition": reps[0]["events_per_transition"],
        "repetitions": reps,
        "versions": info,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])]),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
