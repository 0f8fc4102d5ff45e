"""Benchmark: ``sql_copy`` PostgreSQL → PostgreSQL against psql's own pipe (not a test).

A source database holds table ``src`` (``-n`` rows, 7 columns: bigint, text, numeric(12,2),
integer, date, timestamptz, text; made by ``generate_series``, the same every time). One
repetition copies it twice into a fresh target database:

Each repetition runs both, sql_copy first in odd repetitions and psql first in even ones.

- **psql**: ``psql -c "\\copy src TO STDOUT" | psql -c "\\copy dst FROM STDIN"`` into a
  table of the same shape made beforehand (two processes, text format, one transaction).
- **sql_copy**: the real step (``SqlCopyStep.run``) in a child process, ``mode =
  overwrite`` into a missing table (so: reflection, CREATE TABLE of ``dst__new``, the
  batches, each committed with its progress row, the swap, the final count), with a
  context that keeps checkpoints (per-batch commits, as under the executor). The child
  reports the step's wall time and its peak RSS (``ru_maxrss``) before and after.
  ``--trim-strings`` makes the rows pass through Python (the path of every copy that is
  not PostgreSQL → PostgreSQL without coercion).

Usage::

    python bench/sql_copy.py [-n 5000000] [--reps 1] [--batch-size 10000] [--trim-strings]
                             [--pg-url postgresql+psycopg://...]

Prints one JSON object with every repetition and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import scratch_pg_database

DEFAULT_PG = os.environ.get("CADENZA_BENCH_PG",
                            "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
SHAPE = ("id BIGINT, customer TEXT, amount NUMERIC(12,2), quantity INTEGER, sold_on DATE, "
         "sold_at TIMESTAMPTZ, note TEXT")
FILL = ("INSERT INTO src SELECT g, 'C' || lpad(mod(g::bigint * 7919, 100000)::text, 6, '0'), "
        "mod(g, 100000) / 100.0, mod(g, 50), date '2026-01-01' + mod(g, 365)::int, "
        "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', "
        "CASE mod(g, 4) WHEN 0 THEN 'ok' WHEN 1 THEN 'late, but \"fine\"' WHEN 2 THEN '' "
        "ELSE NULL END FROM generate_series(1, {n}) g")


def libpq(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(False)


def psql_pipe(src: str, dst: str) -> float:
    """Seconds for psql's ``\\copy`` out of the source piped into psql's ``\\copy`` in."""
    with sa.create_engine(dst).begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS dst")
        conn.exec_driver_sql(f"CREATE TABLE dst ({SHAPE})")
    script = (f"set -o pipefail; psql -X -q -v ON_ERROR_STOP=1 -c '\\copy src TO STDOUT' "
              f"'{libpq(src)}' | psql -X -q -v ON_ERROR_STOP=1 -c '\\copy dst FROM STDIN' "
              f"'{libpq(dst)}'")
    started = time.perf_counter()
    subprocess.run(["bash", "-c", script], check=True)
    return time.perf_counter() - started


class _Log:
    def debug(self, message: str, *args: object) -> None:
        pass

    info = warning = error = debug


class BenchContext:
    """The StepContext protocol, as much as sql_copy uses, with checkpoints in memory."""

    def __init__(self, home: Path, src: str, dst: str) -> None:
        from cadenza.config.schema_settings import Settings
        from cadenza.domain.params import Scope
        from cadenza.executor.connections import Connections
        from cadenza.steps.runtime import RunInfo, StepInfo

        self.home = home
        self.settings = Settings.model_validate({"connections": {
            "src": {"type": "sql", "url": src}, "dst": {"type": "sql", "url": dst}}})
        self.params: Mapping[str, Any] = {}
        self.run = RunInfo("bench", "bench", "manual:bench", datetime.now(UTC), "INFO")
        self.step = StepInfo("copy", "sql_copy", 1, 3600)
        self.log = _Log()
        self.scope = Scope()
        self.connections = Connections(home, self.settings)
        self.saved: Any = None

    @property
    def job(self) -> Any:
        return self.run

    def sql_engine(self, name: str) -> sa.Engine:
        return self.connections.sql_engine(name)

    def event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def cancelled(self) -> bool:
        return False

    def remaining(self) -> float:
        return 3600.0

    def previous(self, step: str) -> None:
        return None

    def checkpoint(self, state: Any) -> None:
        self.saved = state

    @property
    def last_checkpoint(self) -> Any:
        return self.saved


def peak_rss_kb() -> int:
    """This process's peak resident set size, in KiB."""
    try:
        import resource
    except ImportError:  # Windows
        import psutil  # type: ignore[import-untyped]

        return int(psutil.Process().memory_info().peak_wset) // 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def child(src: str, dst: str, batch: int, trim: bool) -> None:
    """Run sql_copy once and print {seconds, rows, rss_before_kb, rss_peak_kb}."""
    from cadenza.steps.builtin.sql_copy import SqlCopyStep

    ctx = BenchContext(Path.cwd(), src, dst)
    config = SqlCopyStep.Config.model_validate({
        "name": "copy", "type": "sql_copy", "source": {"connection": "src", "table": "src"},
        "target": {"connection": "dst", "table": "copied"}, "batch_size": batch,
        "trim_strings": trim})
    for name in ("src", "dst"):
        ctx.sql_engine(name).connect().close()  # connected before timing, as a warm executor
    before = peak_rss_kb()
    started = time.perf_counter()
    result = SqlCopyStep().run(ctx, config)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    peak = peak_rss_kb()
    ctx.connections.close()
    print(json.dumps({"seconds": seconds, "rows": result.output["target_rows"],
                      "batches": result.output["batches"], "rss_before_kb": before,
                      "rss_peak_kb": peak}))


def sql_copy(src: str, dst: str, batch: int, trim: bool) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", src, dst, str(batch),
                          "1" if trim else "0"], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5_000_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--trim-strings", action="store_true")
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--child", nargs=4, metavar=("SRC", "DST", "BATCH", "TRIM"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]), args.child[3] == "1")
        return
    reps = []
    with scratch_pg_database(args.pg_url) as src:
        engine = sa.create_engine(src)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE TABLE src ({SHAPE})")
            conn.exec_driver_sql(FILL.format(n=args.n))
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE src")
            size = conn.exec_driver_sql("SELECT pg_total_relation_size('src')").scalar()
        engine.dispose()
        for rep in range(args.reps):
            # the machine's load drifts: each repetition runs the two in the other order
            for which in (("sql_copy", "psql") if rep % 2 == 0 else ("psql", "sql_copy")):
                with scratch_pg_database(args.pg_url) as dst:
                    if which == "psql":
                        pipe_s = psql_pipe(src, dst)
                    else:
                        copied = sql_copy(src, dst, args.batch_size, args.trim_strings)
            assert copied["rows"] == args.n, copied
            reps.append({"psql_s": round(pipe_s, 3), "sql_copy_s": round(copied["seconds"], 3),
                         "speed_vs_psql": round(pipe_s / copied["seconds"], 3),
                         "batches": copied["batches"],
                         "rss_before_mib": round(copied["rss_before_kb"] / 1024, 1),
                         "rss_peak_mib": round(copied["rss_peak_kb"] / 1024, 1)})
    med = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
    print(json.dumps({
        "rows": args.n, "source_bytes": size, "batch_size": args.batch_size,
        "path": "python rows" if args.trim_strings else "COPY text passthrough",
        "sql_copy_rows_per_s": round(args.n / med["sql_copy_s"]),
        "psql_rows_per_s": round(args.n / med["psql_s"]), "median": med, "reps": reps,
        "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(), "sqlalchemy": sa.__version__,
    }, indent=2))


if __name__ == "__main__":
    main()
