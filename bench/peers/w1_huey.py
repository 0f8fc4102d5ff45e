"""W1a: Huey SqliteHuey -- enqueue N no-op tasks, then drain with a 4-thread consumer.

Usage: python w1_huey.py [--n 10000] [--reps 3] [--workers 4]
"""
import argparse
import os
import time

from common import BASE, Recorder, analyse, count_lines, save, summary
from huey import SqliteHuey


def one_run(rep, n, workers):
    d = os.path.join(BASE, "huey-w1")
    os.makedirs(d, exist_ok=True)
    db = os.path.join(d, f"rep{rep}.db")
    rec_path = os.path.join(d, f"rep{rep}.log")
    for p in (db, db + "-wal", db + "-shm", rec_path):
        if os.path.exists(p):
            os.remove(p)

    huey = SqliteHuey(f"w1rep{rep}", filename=db)  # library defaults (journal_mode='wal')
    rec = Recorder(rec_path)

    @huey.task()
    def noop(i):
        t0 = time.time()
        rec.record(i, t0)

    journal = huey.storage.sql("pragma journal_mode", results=True)[0][0]
    sync = huey.storage.sql("pragma synchronous", results=True)[0][0]

    t0 = time.perf_counter()
    for i in range(n):
        noop(i)
    enqueue_s = time.perf_counter() - t0
    assert huey.pending_count() == n

    consumer = huey.create_consumer(workers=workers, worker_type="thread")
    wall0 = time.time()
    consumer.start()
    deadline = time.time() + 600
    while count_lines(rec_path) < n and time.time() < deadline:
        time.sleep(0.25)
    consumer.stop(graceful=True)
    time.sleep(0.5)
    res = analyse(rec_path, range(n))
    res.update(
        enqueue_s=enqueue_s,
        enqueue_rate=n / enqueue_s,
        wall_from_consumer_start_s=max(0.0, res["first_start"] - wall0) + res["drain_span_s"],
        pending_after=huey.pending_count(),
        journal_mode=journal,
        synchronous=sync,
    )
    huey.storage.close()
    print(f"huey rep{rep}: enqueue {res['enqueue_rate']:.0f}/s drain {res['drain_rate']:.0f}/s "
          f"lost={res['lost']} dup={res['dup']} journal={journal} sync={sync}", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    a = ap.parse_args()
    runs = [one_run(r, a.n, a.workers) for r in range(a.reps)]
    save("w1_huey", {
        "workload": "W1a", "system": "huey SqliteHuey", "n": a.n, "workers": a.workers,
        "runs": runs,
        "enqueue_rate": summary([r["enqueue_rate"] for r in runs]),
        "drain_rate": summary([r["drain_rate"] for r in runs]),
    })


if __name__ == "__main__":
    main()
