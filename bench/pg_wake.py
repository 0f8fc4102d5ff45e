"""Benchmark: how soon a PostgreSQL node starts a run queued by another process, and what
the node costs while idle (not a test).

A real node (dispatcher and workers, no scheduler) on a scratch PostgreSQL database, a
home with one no-op job. ``latency``: another store (a second engine, as the CLI or another
node would be) queues one run at a random moment, N times; prints the run's recorded start
minus its creation (ms). ``idle``: the node with nothing to do; prints its process's CPU
over the window (% of one core) and the server's transactions per second in its database.

Usage::

    python bench/pg_wake.py latency -n 20
    python bench/pg_wake.py idle --seconds 60

For an A/B, run the old code with ``PYTHONPATH=/tmp/base/src`` (a ``git worktree``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from common import PG_ADMIN, scratch_pg_database
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import SystemClock
from cadenza.home import Home
from cadenza.node import Node
from cadenza.store import Store
from cadenza.store.boundary import NewRun

TASK = "def noop():\n    return 1\n"


@contextmanager
def pg_node(admin: str, workers: int) -> Iterator[tuple[str, Store]]:
    with scratch_pg_database(admin) as url, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "home"
        if CliRunner().invoke(app, ["init", str(path)]).exit_code != 0:
            raise RuntimeError("cadenza init failed")
        module = f"bench_wake_{random.randrange(16**8):08x}"
        (path / "plugins" / f"{module}.py").write_text(TASK, encoding="utf-8")
        (path / "jobs.toml").write_text(
            '[jobs.hello]\n[[jobs.hello.steps]]\nname = "noop"\ntype = "python"\n'
            f'callable = "{module}:noop"\nisolation = "thread"\n', encoding="utf-8")
        settings = path / "cadenza.toml"
        settings.write_text(settings.read_text(encoding="utf-8").replace(
            'url = "sqlite:///data/cadenza.db"', f'url = "{url}"'), encoding="utf-8")
        home = Home(path)
        config = home.load_config()
        store = home.open_store(config)
        node = Node(home, config, store, clock=SystemClock(), workers=workers, scheduler=False)
        node.start()
        try:
            yield url, store
        finally:
            node.stop(timeout=30)
            store.close()


def latency(args: argparse.Namespace) -> dict[str, object]:
    with pg_node(args.pg_url, args.workers) as (url, _store):
        time.sleep(args.settle)
        other = Store.open(url)
        found: list[float] = []
        try:
            for _ in range(args.n):
                time.sleep(random.uniform(0.3, 1.3))
                (run_id,) = other.create_runs([NewRun("hello", "manual:bench")])
                deadline = time.monotonic() + 30
                while True:
                    run = other.get_run(run_id)
                    if run is not None and run.started_at is not None:
                        found.append((run.started_at - run.created_at).total_seconds() * 1000)
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"run {run_id} did not start within 30 s")
                    time.sleep(0.002)
        finally:
            other.close()
    found.sort()
    return {"started_after_created_ms": {
        "p50": round(statistics.median(found), 1), "max": round(found[-1], 1),
        "n": len(found)}}


def idle(args: argparse.Namespace) -> dict[str, object]:
    admin = sa.create_engine(args.pg_url, isolation_level="AUTOCOMMIT")
    count = sa.text("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                    "WHERE datname = :db")
    try:
        with pg_node(args.pg_url, args.workers) as (url, _store):
            database = sa.make_url(url).database
            time.sleep(args.settle)
            with admin.connect() as c:
                before = c.execute(count, {"db": database}).scalar_one()
            cpu, wall = time.process_time(), time.monotonic()
            time.sleep(args.seconds)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            with admin.connect() as c:
                after = c.execute(count, {"db": database}).scalar_one()
    finally:
        admin.dispose()
    return {"cpu_percent_of_one_core": round(100 * cpu / wall, 3),
            "server_transactions_per_s": round((after - before) / wall, 2),
            "seconds": round(wall)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("latency", "idle"):
        one = sub.add_parser(name)
        one.add_argument("--pg-url", default=PG_ADMIN)
        one.add_argument("--workers", type=int, default=4)
        one.add_argument("--settle", type=float, default=5.0)
        if name == "latency":
            one.add_argument("-n", type=int, default=20)
        else:
            one.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    result = latency(args) if args.what == "latency" else idle(args)
    json.dump({"bench": f"pg_wake {args.what}", **result,
               "command": " ".join(["bench/pg_wake.py", *sys.argv[1:]])}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
