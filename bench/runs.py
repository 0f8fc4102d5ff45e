"""Benchmark: one-step no-op runs executed end to end through the store (not a test).

Each repetition writes a fresh home (a job ``noop`` with one ``python`` step,
``isolation = "thread"``, calling a function that returns None), then:

1. **enqueue**: creates N QUEUED runs with ``Store.create_runs`` in batches of ``--create-batch``
   (each batch one transaction: the runs and their RUN_CREATED events);
2. **drain**: with ``--driver node`` (what ``cadenza serve`` does), a real node of ``-w``
   workers without a scheduler: its dispatcher's admission decisions claim the runs and
   its workers run them; the drain ends when every run has ended (polled every 0.25 s,
   as the peers' harness polls its record file: the poll is a query in the measured
   process, and every 20 ms it took about 5 % of the drain's CPU).
   With ``--driver pool`` (the default), a ``WorkerPool`` (``bench/pool.py``) of ``-w``
   threads; free workers claim runs (as many as are free plus one per worker, at most
   ``--claim-batch``) without admission. Either way each run is: claim and
   first step start (QUEUED -> RUNNING, one step run row, STEP_STARTED,
   two INFO log lines), the step in a thread, step end and run end (STEP_SUCCEEDED,
   RUN_FINISHED, two log lines). The writes of concurrent workers share
   commits (group commit; on PostgreSQL claims are transactions of their own).

With ``--requires``, the job needs one member of a pool ``units`` (``requires = { units = 1
}``; ``--pool-size`` members, default twice the workers, cooldown ``0s``): each run's claim
leases a unit (AVAILABLE -> LEASED, or COOLDOWN -> AVAILABLE -> LEASED), its first step
start moves it RUNNING and its end releases it (RUNNING -> COOLDOWN), with their events, in
the transactions that exist anyway. The pool is big enough that no run waits for a unit:
the figure is the cost of leasing, to compare with the same command without
``--requires`` (docs/pools.md, target: at most 15 % slower).

It checks that every run ended SUCCEEDED with one SUCCEEDED step run, counts commits with an
engine ``commit`` listener, and prints one JSON object: drain runs/s, end-to-end runs/s
(enqueue + drain), commits per run, median and min-max over ``--reps``. On SQLite it also
counts, with ``--count-statements``, the statements the drain executes per run, by kind
(``statements_per_run``: every statement SQLite runs on the store's connections, writes and
reads, BEGIN and COMMIT included, trigger bodies not). It counts with sqlite3's trace
callback, a Python call per statement in the writer's thread, under the write lock: ~6 % of
the drain (docs/benchmarks.md), so the timed figures of a counting run are not comparable
with the others, and the counts come only when asked for.

``--nodes K`` (``--driver node``, PostgreSQL) drains with K nodes, each a process of its own
on the same home and store, as ``cadenza serve --no-web --no-scheduler`` on one machine
would: ``-w`` workers in all, ``-w / K`` each. The figures are the store's (recorded) and
this process's clock; ``drain_cpu_ms_per_run`` then counts this process's node only.

``--cap N`` sets the home's ``[workers] max_concurrent_runs`` (the product's default, 16,
otherwise): the runs a node claims ahead of its workers count against it, so it bounds the
size of a decision. ``--step-work N`` makes the step compute ``sum(range(N))``: the Python
a step adds to the node's one interpreter (3,000 is about 75 µs here).

``--compare-requires K`` runs K such pairs (without and with ``--requires``, each side the
median of ``--reps``) in alternating order and prints each pair's change and the median.

Usage::

    python bench/runs.py --store sqlite --sync NORMAL -n 10000 -w 4 [--driver node]
    python bench/runs.py --store sqlite --sync NORMAL -n 3000 -w 16 --reps 2 --compare-requires 8
    python bench/runs.py --store postgresql -n 5000 -w 4 [--pg-url postgresql+psycopg://...]
    python bench/runs.py --driver node --store postgresql -n 10000 -w 4 --nodes 2
    python bench/runs.py --driver node --store postgresql -n 10000 -w 4 --cap 32 --step-work 3000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import scratch_pg_database, serve_logging
from pool import DrainStats, WorkerPool

from cadenza.audit import Redactor
from cadenza.clock import SystemClock
from cadenza.config import load_home
from cadenza.executor.group_commit import GroupCommit
from cadenza.home import Home
from cadenza.node import Node
from cadenza.store import Store
from cadenza.store.boundary import NewRun
from cadenza.store.engine import READ_ONLY
from cadenza.store.tables import event_log, run_logs, runs, step_runs

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
JOBS = """
[jobs.noop]
max_concurrency = 1000
[[jobs.noop.steps]]
name = "nothing"
type = "python"
callable = "MODULE:noop"
isolation = "thread"
"""


@contextmanager
def database(args: argparse.Namespace, home: Path) -> Iterator[str]:
    """A fresh store URL (a SQLite file in the home, or a scratch PostgreSQL database)."""
    if args.store == "sqlite":
        yield f"sqlite:///{(home / 'data' / 'cadenza.db').as_posix()}"
        return
    with scratch_pg_database(args.pg_url) as url:
        yield url


def write_home(home: Path, url: str, sync: str, units: int = 0, cap: int = 0,
               work: int = 0) -> None:
    (home / "plugins").mkdir(parents=True, exist_ok=True)
    (home / "data").mkdir(exist_ok=True)
    pools = ""
    # A module name of its own per home: a repetition's home is new, and a module already
    # imported from the previous home's plugins/ would be refused (code runs only from the
    # home's own plugins/ folder).
    module = f"bench_noop_{uuid.uuid4().hex[:8]}"
    jobs = JOBS.replace("MODULE", module)
    if units:
        pools = '[pools.units]\nkind = "unit"\ncooldown = "0s"\n' + "".join(
            f'[[pools.units.members]]\nid = "unit-{k:03d}"\n' for k in range(units))
        jobs = jobs.replace("[jobs.noop]\n", "[jobs.noop]\nrequires = { units = 1 }\n")
    workers = f"[workers]\nmax_concurrent_runs = {cap}\n" if cap else ""
    (home / "cadenza.toml").write_text(
        f'[store]\nurl = "{url}"\nsqlite_synchronous = "{sync}"\n{workers}{pools}',
        encoding="utf-8")
    (home / "jobs.toml").write_text(jobs, encoding="utf-8")
    (home / "plugins" / f"{module}.py").write_text(
        "def noop():\n" + (f"    sum(range({work}))\n" if work else "") + "    return None\n",
        encoding="utf-8")


def enqueue(store: Store, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        store.create_runs([NewRun("noop", "manual:bench")
                           for _ in range(min(batch, n - start))])


def node_drain(home: Path, config: Any, store: Store, workers: int,
               total: int, poll: float = 0.25, *, log: bool = True,
               log_name: str = "serve.log") -> tuple[DrainStats, GroupCommit]:
    """Drain the QUEUED runs with a real node (``cadenza serve``'s dispatcher and workers,
    no scheduler, its log lines unless not ``log``); return when ``total`` runs have ended
    (polled every ``poll`` seconds)."""
    where = Home(home)
    node = Node(where, config, store, clock=SystemClock(), workers=workers,
                scheduler=False)
    stats = DrainStats()
    started = time.monotonic()
    with serve_logging(where.redactor, home / log_name, enabled=log):
        _drain(node, store, total, poll)
    stats.seconds = time.monotonic() - started
    return stats, node.recorder


def other_nodes(args: argparse.Namespace, home: Path) -> list[subprocess.Popen[bytes]]:
    """``--nodes K``: the K - 1 nodes beside this process's, each a process of its own on
    the same home and store (as ``cadenza serve --no-web --no-scheduler`` would be), each
    with its share of ``-w``; each returns once every run has ended."""
    each = args.workers // args.nodes
    return [subprocess.Popen([sys.executable, __file__, "--node-of", str(home),
                              "-w", str(each), "-n", str(args.n + args.warmup),
                              "--poll", str(args.poll)]
                             + (["--no-serve-log"] if args.no_serve_log else []))
            for _ in range(args.nodes - 1)]


def node_of(args: argparse.Namespace) -> None:
    """A node process of ``--nodes``: drain the home's store beside the others."""
    home = Path(args.node_of)
    config = load_home(home)
    store = Home(home).open_store(config)
    try:
        node_drain(home, config, store, args.workers, args.n, args.poll,
                   log=not args.no_serve_log, log_name=f"serve-{os.getpid()}.log")
    finally:
        store.close()


def _drain(node: Node, store: Store, total: int, poll: float) -> None:
    node.start()
    try:
        node.dispatcher.wake()
        while True:
            with store.read() as c:
                ended = int(c.execute(sa.select(sa.func.count()).select_from(runs).where(
                    runs.c.state.in_(("SUCCEEDED", "FAILED", "CANCELED")))).scalar_one())
            if ended >= total:
                break
            time.sleep(poll)
    finally:
        node.stop(timeout=30)


def recorded_span(store: Store, since: datetime) -> float:
    """Seconds from the first step start to the last run end the store recorded, over the
    runs created at or after ``since`` (the timed ones): how the peers' harness measures
    their drains (first task start to last task end), with Cadenza's own records."""
    with store.read() as c:
        first = c.execute(sa.select(sa.func.min(step_runs.c.started_at)).select_from(
            step_runs.join(runs, runs.c.id == step_runs.c.run_id)).where(
            runs.c.created_at >= since)).scalar_one()
        last = c.execute(sa.select(sa.func.max(runs.c.finished_at)).where(
            runs.c.created_at >= since)).scalar_one()
    return float((last - first).total_seconds())


def counts(store: Store) -> dict[str, Any]:
    with store.read() as c:
        def count(table: sa.Table, *where: Any) -> int:
            query = sa.select(sa.func.count()).select_from(table).where(*where)
            return int(c.execute(query).scalar_one())

        return {
            "runs_succeeded": count(runs, runs.c.state == "SUCCEEDED"),
            "runs_other": count(runs, runs.c.state != "SUCCEEDED"),
            "step_runs_succeeded": count(step_runs, step_runs.c.state == "SUCCEEDED"),
            "events": count(event_log),
            "log_lines": count(run_logs),
        }


def one_rep(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        home = Path(tmp)
        with database(args, home) as url:
            units = (args.pool_size or 2 * args.workers) if args.requires else 0
            write_home(home, url, args.sync, units, args.cap, args.step_work)
            config = load_home(home)
            # The product always writes through a redactor; so does the benchmark.
            redactor = Redactor(["bench-secret-value-1", "bench-secret-value-2"])
            store = (Home(home).open_store(config) if args.driver == "node"  # as serve does
                     else Store.open(url, sqlite_synchronous=args.sync, redactor=redactor))
            commits = 0

            def count_commit(conn: sa.Connection) -> None:
                nonlocal commits
                if not conn.get_execution_options().get(READ_ONLY):  # writes only
                    commits += 1

            statements: dict[str, int] = {}
            tracing = False
            last = [""]

            def trace(sql: str) -> None:
                # SQLite traces a statement again each time a trigger of it runs (the
                # resource state guard, once per row changed): a repeat is no statement.
                if tracing and not sql.startswith("--") and sql != last[0]:
                    word = sql.split(None, 1)[0].upper() if sql.strip() else "?"
                    statements[word] = statements.get(word, 0) + 1
                last[0] = sql

            def traced(dbapi_conn: Any, *_: Any) -> None:
                if isinstance(dbapi_conn, sqlite3.Connection):
                    dbapi_conn.set_trace_callback(trace)

            if args.store == "sqlite" and args.count_statements:
                sa.event.listen(store.engine, "checkout", traced)
                writer = getattr(store, "_writer", None)  # the store's one writer, if open
                if writer is not None and not writer.closed:
                    traced(writer.connection.dbapi_connection)
            try:
                if args.warmup:  # import the plugin, warm caches and pools
                    enqueue(store, args.warmup, args.create_batch)
                    WorkerPool(store, config, workers=args.workers,
                               batch=args.claim_batch).drain()
                sa.event.listen(store.engine, "commit", count_commit)
                t0 = time.perf_counter()
                since = datetime.now(UTC)
                enqueue(store, args.n, args.create_batch)
                t1 = time.perf_counter()
                enqueue_commits = commits
                tracing = True
                c1 = time.process_time()
                if args.driver == "node":
                    others = other_nodes(args, home)
                    try:
                        stats, recorder = node_drain(home, config, store,
                                                     args.workers // args.nodes,
                                                     args.n + args.warmup, args.poll,
                                                     log=not args.no_serve_log)
                    finally:
                        for other in others:
                            if other.wait(60) != 0:
                                raise RuntimeError("a node process failed")
                else:
                    pool = WorkerPool(store, config, workers=args.workers,
                                      batch=args.claim_batch)
                    stats, recorder = pool.drain(), pool.recorder
                t2 = time.perf_counter()
                c2 = time.process_time()
                tracing = False
                sa.event.remove(store.engine, "commit", count_commit)
                if args.driver == "pool":
                    pool.close()
                found = counts(store)
                span = recorded_span(store, since)
            finally:
                store.close()
    expected = args.n + args.warmup
    if found["runs_succeeded"] != expected or found["step_runs_succeeded"] != expected \
            or stats.errors:
        raise RuntimeError(f"not every run succeeded: {found}, errors {stats.errors[:3]}")
    return {
        "enqueue_per_s": args.n / (t1 - t0),
        "drain_runs_per_s": args.n / (t2 - t1),
        "recorded_runs_per_s": args.n / span,
        "drain_cpu_ms_per_run": 1000 * (c2 - c1) / args.n,
        "end_to_end_runs_per_s": args.n / (t2 - t0),
        "commits_per_run": commits / args.n,
        "drain_commits_per_run": (commits - enqueue_commits) / args.n,
        "boundaries_per_commit": recorder.boundaries / max(1, recorder.batches),
        "claims": stats.claims,
        "events_per_run": found["events"] / expected,
        "log_lines_per_run": found["log_lines"] / expected,
        "statements_per_run": {k: round(v / args.n, 3) for k, v in sorted(statements.items())}
        if statements else None,
        "statements_total_per_run": round(sum(statements.values()) / args.n, 3)
        if statements else None,
    }


def versions(args: argparse.Namespace) -> dict[str, str]:
    found = {"python": platform.python_version(), "sqlalchemy": sa.__version__,
             "sqlite": sqlite3.sqlite_version}
    if args.store == "postgresql":
        import psycopg

        engine = sa.create_engine(args.pg_url)
        with engine.connect() as conn:
            found["postgresql"] = str(conn.exec_driver_sql("SHOW server_version").scalar())
        engine.dispose()
        found["psycopg"] = psycopg.__version__
    return found


def compare_requires(args: argparse.Namespace, argv: list[str] | None) -> None:
    """``requires``' cost (docs/pools.md): pairs of drains without and with a one-unit
    ``requires``, each side the median of ``--reps`` repetitions, the order alternating
    from pair to pair (this VM's speed drifts within minutes: a fixed order would charge
    the drift to one side)."""
    pairs: list[dict[str, Any]] = []
    changes: list[float] = []
    for k in range(args.compare_requires):
        drains: dict[bool, float] = {}
        for requires in ((False, True) if k % 2 == 0 else (True, False)):
            args.requires = requires
            drains[requires] = statistics.median(
                one_rep(args)["drain_runs_per_s"] for _ in range(args.reps))
        change = 100.0 * (drains[True] - drains[False]) / drains[False]
        changes.append(change)
        pairs.append({"without": round(drains[False], 1), "with": round(drains[True], 1),
                      "change_pct": round(change, 1),
                      "order": "without first" if k % 2 == 0 else "with first"})
        print(json.dumps(pairs[-1]), file=sys.stderr)
    print(json.dumps({
        "benchmark": "executor: requires' cost on the drain (alternating pairs)",
        "store": args.store, "synchronous": args.sync if args.store == "sqlite" else None,
        "n": args.n, "workers": args.workers, "reps_per_side": args.reps,
        "pairs": pairs, "median_change_pct": round(statistics.median(changes), 1),
        "within_15_pct": sum(1 for c in changes if c >= -15.0),
        "versions": versions(args),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])]),
    }, indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--sync", choices=["NORMAL", "FULL"], default="NORMAL")
    parser.add_argument("-n", type=int, default=10_000, help="timed runs per repetition")
    parser.add_argument("-w", "--workers", type=int, default=4)
    parser.add_argument("--driver", choices=["pool", "node"], default="pool",
                        help="drain with the benchmark's worker pool (bench/pool.py) or a "
                             "real node (cadenza serve's dispatcher and workers)")
    parser.add_argument("--create-batch", type=int, default=500)
    parser.add_argument("--claim-batch", type=int, default=16,
                        help="most runs one claim takes (for that many free workers)")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--poll", type=float, default=0.25,
                        help="--driver node: seconds between two counts of the ended runs")
    parser.add_argument("--no-serve-log", action="store_true",
                        help="the node logs nothing (node driver; by default it logs as "
                             "`cadenza serve` does, into serve.log in the home)")
    parser.add_argument("--pg-url", default=os.environ.get("CADENZA_BENCH_PG", DEFAULT_PG))
    parser.add_argument("--dir", default=None, help="where the temporary homes go")
    parser.add_argument("--requires", action="store_true",
                        help="the job requires one unit of a pool (leasing's cost)")
    parser.add_argument("--pool-size", type=int, default=0,
                        help="members of that pool (default: twice the workers)")
    parser.add_argument("--count-statements", action="store_true",
                        help="SQLite: count the drain's statements by kind (slows it ~6 %%)")
    parser.add_argument("--compare-requires", type=int, default=0, metavar="PAIRS",
                        help="PAIRS pairs of drains without and with --requires, in"
                             " alternating order; prints each pair's change and the median")
    parser.add_argument("--nodes", type=int, default=1,
                        help="--driver node, PostgreSQL: K nodes, each a process of its own"
                             " with -w / K workers (-w in all)")
    parser.add_argument("--cap", type=int, default=0,
                        help="[workers] max_concurrent_runs of the home (default: the"
                             " product's default, 16)")
    parser.add_argument("--step-work", type=int, default=0,
                        help="the step computes sum(range(N)) instead of nothing (the Python a"
                             " step adds to the node's one interpreter)")
    parser.add_argument("--node-of", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.node_of:
        node_of(args)
        return
    if args.nodes < 1 or args.workers % args.nodes:
        parser.error("--nodes: at least 1, and a divisor of -w")
    if args.nodes > 1 and (args.driver != "node" or args.store != "postgresql"):
        parser.error("--nodes: with --driver node --store postgresql only")
    if args.compare_requires < 0:
        parser.error("--compare-requires: a number of pairs, at least 1")
    if args.compare_requires:
        compare_requires(args, argv)
        return

    reps = [one_rep(args) for _ in range(args.reps)]

    def summary(key: str) -> dict[str, float]:
        values = [r[key] for r in reps]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    result = {
        "benchmark": "executor: one-step no-op runs end to end",
        "store": args.store,
        "synchronous": args.sync if args.store == "sqlite" else None,
        "n": args.n,
        "workers": args.workers,
        "driver": args.driver,
        "nodes": args.nodes,
        "serve_log": args.driver == "node" and not args.no_serve_log,
        "claim_batch": args.claim_batch,
        "requires": "units = 1" if args.requires else None,
        "reps": args.reps,
        "drain_runs_per_s": summary("drain_runs_per_s"),
        "recorded_runs_per_s": summary("recorded_runs_per_s"),
        "drain_cpu_ms_per_run": summary("drain_cpu_ms_per_run"),
        "end_to_end_runs_per_s": summary("end_to_end_runs_per_s"),
        "enqueue_per_s": summary("enqueue_per_s"),
        "commits_per_run": summary("commits_per_run"),
        "drain_commits_per_run": summary("drain_commits_per_run"),
        "statements_total_per_run": reps[-1]["statements_total_per_run"],
        "events_per_run": reps[-1]["events_per_run"],
        "repetitions": reps,
        "versions": versions(args),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])]),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
