"""Benchmark: ``file_export`` of a large PostgreSQL query per format, against PostgreSQL's own
``COPY (query) TO STDOUT (FORMAT csv)`` into a file (not a test).

A scratch database gets a table of ``-n`` rows and 7 columns (bigint, numeric(18,4), text
with non-ASCII characters, date, timestamptz, boolean, a bigint NULL in one row of ten).
Then, per format, the real step (``FileExportStep.run``) runs in a child process, which
reports the step's wall time, the file's size and its peak RSS (``ru_maxrss``) before and
after; the bulk reference is psycopg's ``COPY (SELECT * FROM t ORDER BY id) TO STDOUT
(FORMAT csv, HEADER)`` written to a file in 1 MiB blocks.

Usage::

    python bench/file_export.py [-n 1000000] [--formats csv,parquet,jsonl,xlsx] [--reps 1]

Prints one JSON object. Keep a run under about three minutes on a shared machine: xlsx
(openpyxl) is by far the slowest; measure it with a smaller ``-n``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import scratch_pg_database
from file_load import BenchContext, peak_rss_kb

DEFAULT_PG = os.environ.get("CADENZA_BENCH_PG",
                            "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
QUERY = "SELECT * FROM t ORDER BY id"
SEED = """CREATE TABLE t AS SELECT i AS id, (i * 1.2345)::numeric(18,4) AS amount,
  'name ' || i || ' é😀' AS name, DATE '2026-01-01' + mod(i, 365) AS day,
  TIMESTAMPTZ '2026-01-01 00:00:00+00' + i * interval '1 second' AS at,
  (mod(i, 2) = 0) AS flag, CASE WHEN mod(i, 10) = 0 THEN NULL ELSE i END AS maybe
  FROM generate_series(1, {n}) AS i"""


def seed(url: str, n: int) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(SEED.format(n=n).replace("%", "%%"))
            conn.exec_driver_sql("ANALYZE t")
    finally:
        engine.dispose()


def bulk(url: str, path: Path) -> float:
    """Seconds for PostgreSQL's COPY of the query to a CSV file."""
    import psycopg

    conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(conninfo) as conn:
        started = time.perf_counter()
        with conn.cursor() as cur, path.open("wb") as fh, cur.copy(
                f"COPY ({QUERY}) TO STDOUT (FORMAT csv, HEADER true)") as copy:
            for block in copy:
                fh.write(block)
        return time.perf_counter() - started


def child(url: str, directory: Path, fmt: str) -> None:
    """Run file_export once; print {seconds, rows, bytes, rss_before_kb, rss_peak_kb}."""
    from cadenza.steps.builtin.file_export import FileExportStep

    ctx = BenchContext(directory, url)
    config = FileExportStep.Config.model_validate({
        "name": "export", "type": "file_export", "connection": "w", "query": QUERY,
        "path": f"out.{fmt}", "overwrite": True})
    ctx.sql_engine("w").connect().close()  # connect before timing, as a warm executor would
    before = peak_rss_kb()
    started = time.perf_counter()
    result = FileExportStep().run(ctx, config)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    peak = peak_rss_kb()
    ctx.connections.close()
    print(json.dumps({"seconds": seconds, "rows": result.rows,
                      "bytes": result.output["bytes"], "rss_before_kb": before,
                      "rss_peak_kb": peak}))


def export(url: str, directory: Path, fmt: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", url, str(directory), fmt],
                         check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1_000_000)
    parser.add_argument("--formats", default="csv,parquet,jsonl")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--child", nargs=3, metavar=("URL", "DIR", "FORMAT"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), args.child[2])
        return
    results: dict[str, Any] = {}
    with scratch_pg_database(args.pg_url) as url, tempfile.TemporaryDirectory() as tmp:
        seed(url, args.n)
        directory = Path(tmp)
        copies = [bulk(url, directory / "copy.csv") for _ in range(args.reps)]
        results["copy_to_csv_s"] = round(statistics.median(copies), 3)
        for fmt in args.formats.split(","):
            reps = [export(url, directory, fmt) for _ in range(args.reps)]
            assert all(r["rows"] == args.n for r in reps), reps
            seconds = statistics.median(r["seconds"] for r in reps)
            results[fmt] = {
                "seconds": round(seconds, 3), "rows_per_s": round(args.n / seconds),
                "bytes": reps[0]["bytes"],
                "rss_before_mib": round(reps[0]["rss_before_kb"] / 1024, 1),
                "rss_peak_mib": round(max(r["rss_peak_kb"] for r in reps) / 1024, 1)}
            if fmt == "csv":
                results[fmt]["speed_vs_copy"] = round(results["copy_to_csv_s"] / seconds, 3)
    print(json.dumps({"rows": args.n, "reps": args.reps, **results,
                      "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
                      "python": platform.python_version()}, indent=2))


if __name__ == "__main__":
    main()
