"""Benchmark: a burst of N runs due at the same instant on a real node, without waiting for
a minute boundary (a quicker proxy of ``schedule_lag.py lag``; not a test).

N one-step no-op jobs (python, thread isolation, the function records ``job time.time()``
when entered), a :class:`~cadenza.node.Node` with W workers and no scheduler on a
SQLite file; N QUEUED runs are created with ``scheduled_for = not_before = T`` (T = now +
2.5 s, as the scheduler's look-ahead records them), and the node's dispatcher claims them
at T. Prints entry lag (function entered − T) p0/p50/p90/p99/max in ms, the recorded start
of the step runs and the time until every run SUCCEEDED.

Usage::

    python bench/burst.py -n 1000 -w 1000 [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from common import serve_logging
from schedule_lag import dump_entries, write_home

from cadenza.clock import SystemClock
from cadenza.node import Node
from cadenza.store.boundary import NewRun
from cadenza.store.tables import runs, step_runs


def one(n: int, workers: int, log: bool = True) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        home, entries = write_home(Path(tmp), n, "0 3 1 1 *", None, workers, n)
        config = home.load_config()
        store = home.open_store(config)
        node = Node(home, config, store, clock=SystemClock(), workers=workers, scheduler=False)
        with serve_logging(home.redactor, Path(tmp) / "serve.log", enabled=log):
            node.start()
            due = (datetime.now(UTC) + timedelta(seconds=2.5)).replace(microsecond=0)
            store.create_runs([NewRun(f"j{k:05d}", "scheduled", scheduled_for=due, not_before=due)
                               for k in range(n)])
            node.dispatcher.wake()  # as the scheduler does after recording fires ahead
            done = 0
            while done < n and time.time() < due.timestamp() + 120:
                time.sleep(0.1)
                with store.read() as c:
                    done = int(c.execute(sa.select(sa.func.count()).where(
                        runs.c.state == "SUCCEEDED")).scalar_one())
            all_done = time.time() - due.timestamp()
            node.stop(timeout=30)
        dump_entries()
        with store.read() as c:
            first, last = c.execute(sa.select(sa.func.min(step_runs.c.started_at),
                                              sa.func.max(step_runs.c.started_at))).one()
        store.close()
        times = sorted((float(t) - due.timestamp()) * 1000
                       for t in entries.read_text().split()[1::2])

    def pct(p: float) -> float:
        return round(times[min(len(times) - 1, int(p * len(times)))], 1)

    def since(value: datetime) -> float:
        return round((value.replace(tzinfo=UTC) - due).total_seconds() * 1000, 1)

    return {"entered": len(times), "succeeded": done,
            "entry_ms": {"p0": pct(0), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
                         "max": round(times[-1], 1)},
            "recorded_ms": [since(first), since(last)], "all_succeeded_s": round(all_done, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("-w", "--workers", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--no-serve-log", action="store_true",
                        help="the node logs nothing (by default as `cadenza serve` does)")
    args = parser.parse_args()
    reps = [one(args.n, args.workers, not args.no_serve_log) for _ in range(args.reps)]
    summary = {key: statistics.median(r["entry_ms"][key] for r in reps)  # type: ignore[index]
               for key in ("p0", "p50", "p90", "p99", "max")}
    json.dump({"bench": "burst", "n": args.n, "workers": args.workers, "reps": reps,
               "median_entry_ms": summary, "command": " ".join(["bench/burst.py", *sys.argv[1:]])},
              sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
