"""Benchmark: the jobs pages on a big store (not a test).

Makes a demo home (``cadenza init --example``) with ``--jobs`` jobs in all (the demo's two
and copies of ``hello``), fills its SQLite store with ``-n`` finished runs spread over the
jobs (``sales-load`` gets a tenth of them) and one step run for each of the last 200 runs
of each job (what a job page's grid reads), then times, in-process through FastAPI's
TestClient with a logged-in viewer, ``--requests`` sequential GETs of:

* ``/jobs`` — the catalogue (every job's strip of 14 runs: one UNION ALL),
* ``/jobs?q=sales`` — a search,
* ``/jobs/sales-load`` — the busiest job's page (100 runs for the charts, 30 for the grid),
* ``/jobs/sales-load/run`` — Run with parameters.

Prints one JSON object: p50 / p95 / max milliseconds per page. Usage::

    python bench/ui_jobs.py -n 1000000 --jobs 50 --requests 200
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.web.api_env import api_env  # noqa: E402

from cadenza.clock import FakeClock  # noqa: E402
from cadenza.store.codec import RunIdFactory  # noqa: E402
from cadenza.store.tables import runs, step_runs  # noqa: E402

PAGES = ("/jobs", "/jobs?q=sales", "/jobs/sales-load", "/jobs/sales-load/run")
BATCH = 20_000
STEPS_PER_JOB = 200


def add_jobs(jobs_file: Path, count: int) -> list[str]:
    extra = [f"copy-{i:03d}" for i in range(max(0, count - 2))]
    text = jobs_file.read_text(encoding="utf-8")
    for job in extra:
        text += (f'\n[jobs.{job}]\ndescription = "a copy of hello"\ntags = ["bench"]\n'
                 f'schedule = "{len(job) % 60} 3 * * *"\n\n[[jobs.{job}.steps]]\n'
                 f'name = "count"\ntype = "python"\ncallable = "demo_tasks:count"\n')
    jobs_file.write_text(text, encoding="utf-8")
    return ["sales-load", "hello", *extra]


def fill(store: object, jobs: list[str], total: int, now: datetime) -> float:
    """``total`` SUCCEEDED/FAILED runs over the last 365 days, oldest first."""
    engine = store.engine  # type: ignore[attr-defined]
    ids = RunIdFactory()
    start = time.perf_counter()
    span = timedelta(days=365) / max(total, 1)
    busy = max(total // 10, 1)
    last: dict[str, list[str]] = {job: [] for job in jobs}
    with engine.begin() as conn:
        rows: list[dict[str, object]] = []
        for index in range(total):
            job = "sales-load" if index % 10 == 0 or len(jobs) == 1 else \
                jobs[1 + index % (len(jobs) - 1)]
            created = now - timedelta(days=365) + span * index
            run_id = ids(created)
            state = "FAILED" if index % 20 == 7 else "SUCCEEDED"
            rows.append({"id": run_id, "job_id": job, "state": state, "trigger": "schedule",
                         "created_at": created, "started_at": created,
                         "finished_at": created + timedelta(seconds=5 + index % 30),
                         "updated_at": created})
            keep = last[job]
            keep.append(run_id)
            if len(keep) > STEPS_PER_JOB:
                del keep[0]
            if len(rows) >= BATCH:
                conn.execute(runs.insert(), rows)
                rows = []
        if rows:
            conn.execute(runs.insert(), rows)
        steps = [{"run_id": r, "step": "count" if job != "sales-load" else "load-file",
                  "step_type": "python", "attempt": 1, "state": "SUCCEEDED",
                  "created_at": now, "updated_at": now}
                 for job, kept in last.items() for r in kept]
        conn.execute(step_runs.insert(), steps)
    del busy
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    now = datetime(2027, 3, 10, 9, tzinfo=UTC)
    with tempfile.TemporaryDirectory() as tmp, api_env(Path(tmp), clock=FakeClock(now)) as env:
        jobs = add_jobs(env.services.home.jobs_file, args.jobs)
        filled = fill(env.store, jobs, args.n, now)
        viewer = env.session("viewer")
        out: dict[str, object] = {"runs": args.n, "jobs": len(jobs), "fill_s": round(filled, 1),
                                  "requests": args.requests}
        for page in PAGES:
            assert viewer.get(page).status_code == 200, page  # warm
            times = []
            for _ in range(args.requests):
                begin = time.perf_counter()
                answer = viewer.get(page)
                times.append((time.perf_counter() - begin) * 1000)
                assert answer.status_code == 200
            times.sort()
            out[page] = {"p50_ms": round(statistics.median(times), 1),
                         "p95_ms": round(times[int(len(times) * 0.95) - 1], 1),
                         "max_ms": round(times[-1], 1)}
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
