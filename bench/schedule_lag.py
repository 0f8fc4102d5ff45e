"""Schedule lag and idle CPU of `cadenza serve`. A benchmark, not a test.

lag: N jobs, all `* * * * *` in UTC, each one python no-op step (thread isolation); a real
node (scheduler with look-ahead + dispatcher + W workers, `[workers] count = W` and
`max_concurrent_runs` written in the home's cadenza.toml) on a SQLite or PostgreSQL store
fires them at the next minute boundary. Two lags per run: the step run's recorded start −
the run's scheduled time, and the moment the no-op function is really entered (recorded in
memory, written out after the node stopped) − the scheduled time. Also counts missed and
doubled fires (runs per (job, scheduled_for)) and functions called twice.

idle: a real `cadenza serve --no-web` process with N jobs scheduled far away (`0 3 1 1 *`);
its CPU time (with its child processes) over a quiet interval, as a share of one core.
With `--against SRC` (a checkout's `src`, e.g. of `git worktree add /tmp/base <commit>`), a
second server runs that code on a copy of the home beside the first, and both are measured
over the same `--windows` windows of `--seconds` each: on a VM whose idle figure drifts
within minutes, an A/B that measures one after the other compares the drift, not the code.
On Linux this mode reads the threads' nanosecond counts (`/proc/<pid>/task/*/schedstat`),
not the 10 ms ticks of the single mode.

    .venv/bin/python bench/schedule_lag.py lag --jobs 1000 --workers 4 [--store postgresql]
    .venv/bin/python bench/schedule_lag.py lag --jobs 1000 --workers 64 --max-runs 1000
    .venv/bin/python bench/schedule_lag.py idle --jobs 1000 --seconds 30
    .venv/bin/python bench/schedule_lag.py idle --jobs 1000 --seconds 30 --windows 8 \
        --against /tmp/base/src
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import psutil
import sqlalchemy as sa
from common import scratch_pg_database, serve_logging

from cadenza.clock import SystemClock
from cadenza.domain.states import RunState
from cadenza.home import Home, create_home
from cadenza.node import Node
from cadenza.store.tables import runs

NOOP = """import time

ENTRIES = []
_OUT = {path!r}


def noop(job):
    ENTRIES.append((job, time.time()))  # the moment the function is entered (in memory)


def dump():  # the bench calls this once the node stopped
    with open(_OUT, "w") as fh:
        fh.write("".join(f"{{job}} {{t:.6f}}\\n" for job, t in ENTRIES))
"""


def dump_entries() -> None:
    """Write the entries the no-op recorded in this process (the node runs in-process) and
    forget the module (the next repetition imports its own)."""
    module = sys.modules.pop("bench_tasks", None)
    if module is not None:
        module.dump()


def write_home(root: Path, jobs: int, schedule: str, store_url: str | None,
               workers: int = 4, max_runs: int = 16) -> tuple[Home, Path]:
    """A home with ``jobs`` no-op jobs; returns it and the file where :func:`dump_entries`
    writes ``job entry_time`` lines, the moments the step's function was entered."""
    home = create_home(root / "home", example=False)
    entries = root / "entries.txt"
    (home.path / "plugins" / "bench_tasks.py").write_text(NOOP.format(path=str(entries)))
    lines = []
    for k in range(jobs):
        lines.append(f'[jobs.j{k:05d}]\nschedule = "{schedule}"\ntimezone = "UTC"\n'
                     f'[[jobs.j{k:05d}.steps]]\nname = "noop"\ntype = "python"\n'
                     'callable = "bench_tasks:noop"\nisolation = "thread"\n'
                     f'op_kwargs = {{ job = "j{k:05d}" }}\n')
    home.jobs_file.write_text("\n".join(lines))
    text = home.config_file.read_text()
    if store_url:
        text = text.replace('url = "sqlite:///data/cadenza.db"', f'url = "{store_url}"')
    text += f"\n[workers]\ncount = {workers}\nmax_concurrent_runs = {max_runs}\n"
    home.config_file.write_text(text)
    return home, entries


def lag(args: argparse.Namespace) -> dict[str, object]:
    with ExitStack() as stack:
        url = stack.enter_context(scratch_pg_database()) if args.store == "postgresql" else None
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        home, entries = write_home(Path(tmp), args.jobs, "* * * * *", url, args.workers,
                                   args.max_runs or max(16, args.workers))
        config = home.load_config()
        store = home.open_store(config)
        node = Node(home, config, store, clock=SystemClock(), workers=args.workers)
        stack.enter_context(serve_logging(home.redactor, Path(tmp) / "serve.log",
                                          enabled=not args.no_serve_log))
        node.start()
        now = datetime.now(UTC)
        boundary = now.replace(second=0, microsecond=0).timestamp() + 60
        if boundary - now.timestamp() < 5:
            boundary += 60
        fire = datetime.fromtimestamp(boundary, UTC)
        deadline = boundary + args.timeout
        me = psutil.Process()
        rss_before = rss_peak = me.memory_info().rss
        while time.time() < deadline:
            rss = me.memory_info().rss
            rss_peak = max(rss_peak, rss)
            if time.time() < boundary - 4:  # before the fires are recorded (3 s ahead)
                rss_before = rss
            with store.read() as c:  # the runs of this fire (the node may fire one earlier)
                done = c.execute(sa.select(sa.func.count()).where(
                    runs.c.state == "SUCCEEDED", runs.c.scheduled_for == fire)).scalar()
            if done and done >= args.jobs:
                break
            time.sleep(0.5)
        node.stop(timeout=60)
        dump_entries()
        entered = entries.read_text().split() if entries.exists() else []
        with store.read() as c:
            rows = c.execute(sa.text(
                "SELECT r.job_id, r.scheduled_for, r.state, s.started_at, r.created_at FROM runs r "
                "LEFT JOIN step_runs s ON s.run_id = r.id")).all()
        store.close()

    def aware(value: object) -> datetime:
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    at_fire = [r for r in rows if aware(r.scheduled_for) == fire]
    per_job: dict[str, int] = {}
    for r in at_fire:
        per_job[r.job_id] = per_job.get(r.job_id, 0) + 1
    lags = sorted((aware(r.started_at) - fire).total_seconds() * 1000
                  for r in at_fire if r.started_at is not None)

    created = sorted((aware(r.created_at) - fire).total_seconds() * 1000 for r in at_fire)
    # Entries of this fire only (a node started less than a minute before it fires once more).
    pairs = [(job, float(t)) for job, t in zip(entered[0::2], entered[1::2], strict=True)
             if float(t) > fire.timestamp() - 30]
    entry = sorted((t - fire.timestamp()) * 1000 for _, t in pairs)
    calls: dict[str, int] = {}
    for job, _ in pairs:
        calls[job] = calls.get(job, 0) + 1

    def pct(p: float, values: list[float] | None = None) -> float:
        v = lags if values is None else values
        return round(v[min(len(v) - 1, int(p * len(v)))], 1) if v else float("nan")

    return {
        "bench": "schedule_lag", "store": args.store, "jobs": args.jobs,
        "workers": args.workers, "fire": fire.isoformat(),
        "executed": len(lags),
        "missed": args.jobs - len(per_job),
        "doubled": sum(1 for n in per_job.values() if n > 1),
        "states": {s.value: sum(1 for r in at_fire if r.state == s.value) for s in RunState},
        "created_ms": {"p0": pct(0, created), "p50": pct(0.5, created),
                       "max": pct(1, created)},
        "lag_ms": {"p0": pct(0), "p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99),
                   "max": round(lags[-1], 1) if lags else None},
        "entry_ms": {"p0": pct(0, entry), "p50": pct(0.5, entry), "p90": pct(0.9, entry),
                     "p99": pct(0.99, entry), "max": round(entry[-1], 1) if entry else None},
        "entered": len(calls), "entered_twice": sum(1 for n in calls.values() if n > 1),
        "max_concurrent_runs": args.max_runs or max(16, args.workers),
        "rss_mib": round(psutil.Process().memory_info().rss / 2**20, 1),
        "rss_before_fire_mib": round(rss_before / 2**20, 1),
        "rss_peak_mib": round(rss_peak / 2**20, 1),
    }


def idle(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        home, _ = write_home(Path(tmp), args.jobs, "0 3 1 1 *", None, args.workers,
                             max(16, args.workers))
        proc = subprocess.Popen([sys.executable, "-m", "cadenza", "--home", str(home.path),
                                 "serve", "--no-web"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(args.settle)
            # The server and its children (the claimer process of a node with >= 64
            # workers, executor/claimer.py).
            procs = [psutil.Process(proc.pid)]
            procs += procs[0].children(recursive=True)

            def cpu() -> float:
                return sum(t.user + t.system for t in (p.cpu_times() for p in procs))

            before = cpu()
            time.sleep(args.seconds)
            used = cpu() - before
            rss = [round(p.memory_info().rss / 2**20, 1) for p in procs]
        finally:
            proc.terminate()
            proc.wait(30)
    return {"bench": "idle_cpu", "jobs": args.jobs, "workers": args.workers,
            "seconds": args.seconds, "processes": len(procs), "rss_mib": rss,
            "cpu_seconds": round(used, 3),
            "cpu_percent_of_one_core": round(100 * used / args.seconds, 2)}


def _serve(home: Path, src: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    return subprocess.Popen([sys.executable, "-m", "cadenza", "--home", str(home), "serve",
                             "--no-web"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)


def _cpu_seconds(proc: psutil.Process) -> float:
    """The CPU time of ``proc``: from the scheduler's nanosecond counts of its threads where
    Linux has them (``/proc/<pid>/task/*/schedstat``), else the tick-rounded figures (10 ms
    steps: 3 steps are 0.1 % of a 30 s window)."""
    tasks = Path(f"/proc/{proc.pid}/task")
    if tasks.is_dir():
        total = 0
        for task in tasks.iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):  # a thread that just ended
                continue
        return total / 1e9
    times = proc.cpu_times()
    return float(times.user + times.system)


def idle_against(args: argparse.Namespace) -> dict[str, object]:
    """This code's server and the one of ``--against`` side by side, the same windows."""
    with tempfile.TemporaryDirectory() as tmp:
        home, _ = write_home(Path(tmp), args.jobs, "0 3 1 1 *", None, args.workers,
                             max(16, args.workers))
        other = Path(tmp) / "against"
        shutil.copytree(home.path, other, ignore=shutil.ignore_patterns("*.db-*", "*.lock"))
        procs = {"head": _serve(home.path, None), "against": _serve(other, args.against)}
        try:
            time.sleep(args.settle)
            trees = {k: [psutil.Process(p.pid), *psutil.Process(p.pid).children(True)]
                     for k, p in procs.items()}

            def cpu(k: str) -> float:
                return sum(_cpu_seconds(p) for p in trees[k])

            windows: dict[str, list[float]] = {k: [] for k in procs}
            for _ in range(args.windows):
                before = {k: cpu(k) for k in procs}
                time.sleep(args.seconds)
                for k in procs:
                    windows[k].append(round(100 * (cpu(k) - before[k]) / args.seconds, 3))
            rss = {k: round(sum(p.memory_info().rss for p in trees[k]) / 2**20, 1)
                   for k in procs}
        finally:
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                p.wait(30)
    return {"bench": "idle_cpu_side_by_side", "jobs": args.jobs, "workers": args.workers,
            "seconds": args.seconds, "against": args.against,
            "cpu_percent_of_one_core": windows,
            "median": {k: statistics.median(v) for k, v in windows.items()},
            "rss_mib": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p_lag = sub.add_parser("lag")
    p_lag.add_argument("--jobs", type=int, default=1000)
    p_lag.add_argument("--workers", type=int, default=4)
    p_lag.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    p_lag.add_argument("--timeout", type=float, default=120)
    p_lag.add_argument("--max-runs", type=int, default=0,
                       help="[workers].max_concurrent_runs (default: max(16, workers))")
    p_lag.add_argument("--no-serve-log", action="store_true",
                       help="the node logs nothing (by default as `cadenza serve` does)")
    p_idle = sub.add_parser("idle")
    p_idle.add_argument("--jobs", type=int, default=1000)
    p_idle.add_argument("--seconds", type=float, default=30)
    p_idle.add_argument("--settle", type=float, default=10)
    p_idle.add_argument("--workers", type=int, default=4)
    p_idle.add_argument("--against", default=None, metavar="SRC",
                        help="also run the code of SRC (a checkout's src) beside, same windows")
    p_idle.add_argument("--windows", type=int, default=1,
                        help="with --against: how many windows of --seconds")
    args = parser.parse_args()
    result = (lag(args) if args.what == "lag" else
              idle_against(args) if args.against else idle(args))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
