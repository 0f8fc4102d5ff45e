"""W1b: procrastinate on PostgreSQL -- defer N no-op jobs one by one, then drain with
one worker (concurrency 4, wait=False so it exits when the queue is empty).

Usage: python w1_procrastinate.py [--n 10000] [--reps 3] [--concurrency 4]
       [--dsn postgresql://postgres@127.0.0.1:55432/bench]
"""
import argparse
import asyncio
import os
import time

import procrastinate
import psycopg
from common import BASE, Recorder, analyse, save, summary

DSN = "postgresql://postgres@127.0.0.1:55432/bench"


def reset_db(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")


async def one_run(rep, n, concurrency, dsn):
    d = os.path.join(BASE, "procrastinate-w1")
    os.makedirs(d, exist_ok=True)
    rec_path = os.path.join(d, f"rep{rep}.log")
    if os.path.exists(rec_path):
        os.remove(rec_path)
    reset_db(dsn)

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    rec = Recorder(rec_path)

    @app.task(name="noop")
    async def noop(i):
        t0 = time.time()
        rec.record(i, t0)

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        t0 = time.perf_counter()
        for i in range(n):
            await noop.defer_async(i=i)
        enqueue_s = time.perf_counter() - t0

        wall0 = time.time()
        await app.run_worker_async(concurrency=concurrency, wait=False)
        worker_wall_s = time.time() - wall0

    with psycopg.connect(dsn) as c:
        statuses = dict(c.execute(
            "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1").fetchall())
    res = analyse(rec_path, range(n))
    res.update(enqueue_s=enqueue_s, enqueue_rate=n / enqueue_s,
               worker_wall_s=worker_wall_s, db_statuses=statuses)
    print(f"procrastinate rep{rep}: enqueue {res['enqueue_rate']:.0f}/s "
          f"drain {res['drain_rate']:.0f}/s lost={res['lost']} dup={res['dup']} "
          f"statuses={statuses}", flush=True)
    return res


async def batch_enqueue_probe(n, dsn):
    """Extra data point: one batch_defer_async call for all N jobs (single INSERT)."""
    reset_db(dsn)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop(i):
        pass

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        t0 = time.perf_counter()
        await noop.batch_defer_async(*({"i": i} for i in range(n)))
        return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--dsn", default=DSN)
    a = ap.parse_args()
    runs = [asyncio.run(one_run(r, a.n, a.concurrency, a.dsn)) for r in range(a.reps)]
    batch = [asyncio.run(batch_enqueue_probe(a.n, a.dsn)) for _ in range(a.reps)]
    print(f"procrastinate batch_defer: {[round(b) for b in batch]} jobs/s")
    with psycopg.connect(a.dsn) as c:
        server = c.execute("SHOW server_version").fetchone()[0]
        sc = c.execute("SHOW synchronous_commit").fetchone()[0]
    save("w1_procrastinate", {
        "workload": "W1b", "system": "procrastinate", "n": a.n,
        "concurrency": a.concurrency, "pg_server": server, "synchronous_commit": sc,
        "runs": runs,
        "enqueue_rate": summary([r["enqueue_rate"] for r in runs]),
        "drain_rate": summary([r["drain_rate"] for r in runs]),
        "batch_defer_rate": summary(batch),
    })


if __name__ == "__main__":
    main()
