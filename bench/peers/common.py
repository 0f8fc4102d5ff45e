"""Shared helpers for the peer benchmarks: task-side recording, stats, env info."""
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata

BASE = os.environ.get("PEERBENCH_DIR", os.path.join(tempfile.gettempdir(), "peerbench"))
RESULTS = os.path.join(BASE, "results")


class Recorder:
    """Append-only file; each task writes one line 'id start end' with a single write()."""

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(self, task_id, t_start):
        os.write(self.fd, f"{task_id} {t_start:.6f} {time.time():.6f}\n".encode())


def count_lines(path):
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def analyse(path, expected_ids):
    """Return drain rate (first start -> last finish), lost and duplicate counts."""
    seen, starts, ends = {}, [], []
    with open(path) as f:
        for line in f:
            tid, s, e = line.split()
            seen[tid] = seen.get(tid, 0) + 1
            starts.append(float(s))
            ends.append(float(e))
    expected = {str(i) for i in expected_ids}
    lost = len(expected - seen.keys())
    dup = sum(c - 1 for c in seen.values() if c > 1)
    extra = len(seen.keys() - expected)
    span = (max(ends) - min(starts)) if starts else float("nan")
    return {
        "executed": len(starts),
        "lost": lost,
        "dup": dup,
        "unexpected": extra,
        "drain_span_s": span,
        "drain_rate": len(seen) / span if starts else 0.0,
        "first_start": min(starts) if starts else None,
    }


def pct(values, p):
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100 * len(v) + 0.5)) - 1))
    return v[k]


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def env_info():
    pkgs = {}
    for name in ("huey", "APScheduler", "SQLAlchemy", "procrastinate", "psycopg",
                 "psycopg-binary", "psycopg-pool", "psutil"):
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    import sqlite3
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_save": os.getloadavg(),  # 1/5/15-min load when results were saved
        "sqlite": sqlite3.sqlite_version,
        "packages": pkgs,
    }


def save(name, payload):
    os.makedirs(RESULTS, exist_ok=True)
    payload = dict(payload, env=env_info(), saved_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=str)
    print(f"saved {path}")
    return path
