"""W1d: PgQueuer on PostgreSQL -- enqueue N no-op jobs one by one, then drain them with
`--concurrency` PgQueuer consumers (one QueueManager + one DB connection each, all in this
process, mode=drain so each exits when the queue is empty).

PgQueuer's own tools/benchmark.py runs the same shape (`--dequeue 5 --dequeue-batch-size 10`).
Its speed comes from: one `FOR UPDATE SKIP LOCKED ... LIMIT batch_size` claim per round trip,
a trigger-driven LISTEN/NOTIFY wake-up, asyncpg (binary protocol, cached prepared
statements), and completions that are buffered (flushed every `batch_size` jobs or 0.1 s)
and written as ONE statement per batch (DELETE from the queue + INSERT into pgqueuer_log).
History stays durable (logged tables, synchronous_commit as the server has it), but a job
is acknowledged up to 0.1 s after it finished: at-least-once, a crash re-runs that window.

Concurrency: with the same `--concurrency 4` as w1_procrastinate.py, PgQueuer runs 4
consumers; each holds up to `--batch-size` picked jobs (default 10 = PgQueuer's default),
so in-flight jobs can reach concurrency x batch size. `--batch-size 1` is the closest to
one-claim-per-job; `--batch-size 2 --max-tasks 4` would cap one consumer at 4 in flight.

Usage: python w1_pgqueuer.py [--n 10000] [--reps 3] [--concurrency 4] [--batch-size 10]
       [--driver apg|psy] [--uvloop] [--dsn postgresql://postgres@127.0.0.1:55432/bench]
Output: one line per rep, "pgqueuer repN: enqueue X/s drain Y/s lost= dup= statuses=...",
then the bulk-enqueue probe line, then results/w1_pgqueuer[_variant].json.
"""
import argparse
import asyncio
import os
import time
from datetime import timedelta

import psycopg
from common import BASE, Recorder, analyse, save, summary

DSN = "postgresql://postgres@127.0.0.1:55432/bench"


def reset_db(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")


async def make_driver(kind, dsn):
    from pgqueuer.db import AsyncpgDriver, PsycopgDriver
    if kind == "apg":
        import asyncpg
        return AsyncpgDriver(await asyncpg.connect(dsn=dsn))
    return PsycopgDriver(await psycopg.AsyncConnection.connect(conninfo=dsn, autocommit=True))


async def one_run(rep, a):
    from pgqueuer import PgQueuer
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    d = os.path.join(BASE, "pgqueuer-w1")
    os.makedirs(d, exist_ok=True)
    rec_path = os.path.join(d, f"rep{rep}.log")
    if os.path.exists(rec_path):
        os.remove(rec_path)
    reset_db(a.dsn)
    rec = Recorder(rec_path)

    q = Queries(await make_driver(a.driver, a.dsn))
    await q.install()

    t0 = time.perf_counter()
    for i in range(a.n):
        await q.enqueue("noop", str(i).encode(), 0)
    enqueue_s = time.perf_counter() - t0

    pgqs = []
    for _ in range(a.concurrency):
        pgq = PgQueuer(await make_driver(a.driver, a.dsn))

        @pgq.entrypoint("noop")
        async def noop(job):
            t = time.time()
            rec.record(int(job.payload), t)

        pgqs.append(pgq)

    wall0 = time.time()
    await asyncio.gather(*(
        p.run(batch_size=a.batch_size, mode=QueueExecutionMode.drain,
              max_concurrent_tasks=a.max_tasks or None,
              dequeue_timeout=timedelta(seconds=1))
        for p in pgqs))
    wall1 = time.time()

    with psycopg.connect(a.dsn) as c:
        statuses = dict(c.execute(
            "SELECT status::text, count(*) FROM pgqueuer_log GROUP BY 1").fetchall())
        left = c.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]
        last_ack = c.execute(
            "SELECT extract(epoch FROM max(created)) FROM pgqueuer_log "
            "WHERE status = 'successful'").fetchone()[0]
    res = analyse(rec_path, range(a.n))
    # Completions are batched, so also report the rate up to the last committed ack
    # (server-side now() of the final log flush; same host clock).
    ack_span = (float(last_ack) - res["first_start"]) if last_ack and res["first_start"] else None
    res.update(enqueue_s=enqueue_s, enqueue_rate=a.n / enqueue_s,
               worker_wall_s=wall1 - wall0, left_in_queue=left, db_statuses=statuses,
               drain_to_last_ack_rate=(a.n / ack_span) if ack_span else None)
    print(f"pgqueuer rep{rep}: enqueue {res['enqueue_rate']:.0f}/s "
          f"drain {res['drain_rate']:.0f}/s (to last ack {res['drain_to_last_ack_rate'] or 0:.0f}/s, "
          f"worker wall {res['worker_wall_s']:.2f}s) lost={res['lost']} dup={res['dup']} "
          f"left={left} statuses={statuses}", flush=True)
    return res


async def batch_enqueue_probe(a):
    """Extra data point: one enqueue() call with lists for all N jobs (single INSERT)."""
    from pgqueuer.queries import Queries
    reset_db(a.dsn)
    q = Queries(await make_driver(a.driver, a.dsn))
    await q.install()
    t0 = time.perf_counter()
    await q.enqueue(["noop"] * a.n, [str(i).encode() for i in range(a.n)], [0] * a.n)
    return a.n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4,
                    help="number of PgQueuer consumers (QueueManagers), one connection each")
    ap.add_argument("--batch-size", type=int, default=10,
                    help="jobs claimed per dequeue round trip (PgQueuer default 10)")
    ap.add_argument("--max-tasks", type=int, default=0,
                    help="max_concurrent_tasks per consumer (0 = unlimited; must be >= 2*batch)")
    ap.add_argument("--driver", choices=("apg", "psy"), default="apg",
                    help="apg = asyncpg (PgQueuer's fast path), psy = async psycopg 3")
    ap.add_argument("--uvloop", action="store_true", help="run on uvloop (PgQueuer's own bench does)")
    ap.add_argument("--dsn", default=DSN)
    a = ap.parse_args()
    runner = asyncio.run
    if a.uvloop:
        import uvloop
        runner = uvloop.run
    runs = [runner(one_run(r, a)) for r in range(a.reps)]
    batch = [runner(batch_enqueue_probe(a)) for _ in range(a.reps)]
    print(f"pgqueuer batch enqueue: {[round(b) for b in batch]} jobs/s")
    with psycopg.connect(a.dsn) as c:
        server = c.execute("SHOW server_version").fetchone()[0]
        sc = c.execute("SHOW synchronous_commit").fetchone()[0]
    from importlib import metadata
    versions = {p: metadata.version(p) for p in ("pgqueuer", "asyncpg", "uvloop")
                if _installed(p)}
    # Non-default variants get their own result file so they don't overwrite the default.
    suffix = "".join([f"_{a.driver}" if a.driver != "apg" else "",
                      f"_b{a.batch_size}" if a.batch_size != 10 else "",
                      f"_m{a.max_tasks}" if a.max_tasks else "",
                      "_uvloop" if a.uvloop else ""])
    save("w1_pgqueuer" + suffix, {
        "workload": "W1d", "system": f"pgqueuer-{a.driver}" + ("-uvloop" if a.uvloop else ""),
        "n": a.n, "concurrency": a.concurrency, "batch_size": a.batch_size,
        "max_concurrent_tasks": a.max_tasks or None, "driver": a.driver, "uvloop": a.uvloop,
        "pg_server": server, "synchronous_commit": sc, "versions": versions,
        "runs": runs,
        "enqueue_rate": summary([r["enqueue_rate"] for r in runs]),
        "drain_rate": summary([r["drain_rate"] for r in runs]),
        "drain_to_last_ack_rate": summary([r["drain_to_last_ack_rate"] or 0 for r in runs]),
        "batch_defer_rate": summary(batch),
    })


def _installed(p):
    from importlib import metadata
    try:
        metadata.version(p)
        return True
    except metadata.PackageNotFoundError:
        return False


if __name__ == "__main__":
    main()
