"""Benchmark: ``file_load`` of a large CSV against the database's own bulk path (not a test).

One repetition loads the same CSV (``-n`` rows, 6 columns: int, text, float, int, date,
text with quotes, commas and empty values) twice, each time into a fresh database:

- **bulk**: SQLite: the ``sqlite3`` CLI, ``.import --csv --skip 1`` into a table created
  with the types file_load infers; PostgreSQL: psycopg ``COPY t FROM STDIN (FORMAT csv,
  HEADER)`` fed the file's bytes in 1 MiB blocks, into the same table, one transaction.
- **file_load**: the real step (``FileLoadStep.run``) in a child process, mode append into
  a missing table (so: path checks, two SHA-256 passes, type inference, CREATE TABLE,
  the batched load, the ``cadenza_loaded_files`` record, one commit). The child reports its
  wall time for the step and its peak RSS (``ru_maxrss``) before and after.

Usage::

    python bench/file_load.py --db sqlite [-n 1000000] [--reps 3] [--dir DIR]
    python bench/file_load.py --db postgresql [--pg-url postgresql+psycopg://...]

Prints one JSON object with every repetition and the medians. The CSV is generated once
per ``-n`` into ``--dir`` (default: the system temporary directory) and kept.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import scratch_pg_database

DEFAULT_PG = os.environ.get("CADENZA_BENCH_PG",
                            "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
SCHEMA = ("id INTEGER, customer TEXT, amount {float}, quantity INTEGER, sold_on DATE, "
          "note TEXT")
NOTES = ["ok", 'late, but "fine"', "", "n/a"]


def generate(path: Path, n: int) -> None:
    """A CSV of ``n`` rows (seeded, so every run loads the same file)."""
    rnd = random.Random(1)
    start = date(2026, 1, 1)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "customer", "amount", "quantity", "sold_on", "note"])
        for i in range(n):
            out.writerow([i, f"C{rnd.randrange(100_000):06d}", f"{rnd.random() * 1000:.2f}",
                          rnd.randrange(1, 50), (start + timedelta(days=i % 365)).isoformat(),
                          rnd.choice(NOTES)])
    tmp.replace(path)


@contextmanager
def database(kind: str, workdir: Path, pg_url: str) -> Iterator[str]:
    """A fresh, empty database URL, removed afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            yield f"sqlite:///{(Path(tmp) / 'bench.db').as_posix()}"
        return
    with scratch_pg_database(pg_url) as url:
        yield url


def bulk(kind: str, url: str, path: Path) -> float:
    """Seconds for the database's own bulk load of ``path`` into table ``bulk``."""
    if kind == "sqlite":
        db = sa.make_url(url).database or ""
        script = (f"CREATE TABLE bulk ({SCHEMA.format(float='REAL')});\n"
                  f".import --csv --skip 1 {path.as_posix()} bulk\n")
        started = time.perf_counter()
        subprocess.run(["sqlite3", db], input=script.encode(), check=True)
        return time.perf_counter() - started
    import psycopg

    conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(conninfo) as conn:
        conn.execute(f"CREATE TABLE bulk ({SCHEMA.format(float='DOUBLE PRECISION')})")
        conn.commit()
        started = time.perf_counter()
        with conn.cursor() as cur, path.open("rb") as fh, cur.copy(
                "COPY bulk FROM STDIN (FORMAT csv, HEADER true)") as copy:
            while block := fh.read(1 << 20):
                copy.write(block)
        conn.commit()
        return time.perf_counter() - started


class _Log:
    def debug(self, message: str, *args: object) -> None:
        pass

    info = warning = error = debug


class BenchContext:
    """The StepContext protocol, as much as file_load uses (the executor's stand-in)."""

    def __init__(self, home: Path, url: str) -> None:
        from cadenza.config.schema_settings import Settings
        from cadenza.domain.params import Scope
        from cadenza.executor.connections import Connections
        from cadenza.steps.runtime import RunInfo, StepInfo

        self.home = home
        self.settings = Settings.model_validate({
            "files": {"roots": [str(home)]},
            "connections": {"w": {"type": "sql", "url": url}}})
        self.params: Mapping[str, Any] = {}
        self.run = RunInfo("bench", "bench", "manual:bench", datetime.now(UTC), "INFO")
        self.step = StepInfo("load", "file_load", 1, 3600)
        self.log = _Log()
        self.scope = Scope()
        self.connections = Connections(home, self.settings)

    @property
    def job(self) -> Any:
        return self.run

    def connection(self, name: str) -> Any:
        return self.sql_engine(name).connect()  # (file_load manages its own transaction)

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


def peak_rss_kb() -> int:
    """This process's peak resident set size, in KiB."""
    try:
        import resource
    except ImportError:  # Windows
        import psutil  # type: ignore[import-untyped]

        return int(psutil.Process().memory_info().peak_wset) // 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def child(url: str, path: Path) -> None:
    """Run file_load once and print {seconds, rows, rss_before_kb, rss_peak_kb}."""
    from cadenza.steps.builtin.file_load import FileLoadStep

    ctx = BenchContext(path.parent, url)
    config = FileLoadStep.Config.model_validate({
        "name": "load", "type": "file_load", "path": path.name, "connection": "w",
        "table": "loaded", "mode": "append"})
    ctx.sql_engine("w").connect().close()  # connect before timing, as a warm executor would
    before = peak_rss_kb()
    started = time.perf_counter()
    result = FileLoadStep().run(ctx, config)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    peak = peak_rss_kb()
    ctx.connections.close()
    print(json.dumps({"seconds": seconds, "rows": result.rows, "rss_before_kb": before,
                      "rss_peak_kb": peak}))


def file_load(url: str, path: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", url, str(path)], check=True,
                         capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("-n", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--child", nargs=2, metavar=("URL", "CSV"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    if args.db == "sqlite" and shutil.which("sqlite3") is None:
        sys.exit("the sqlite3 CLI is needed for the bulk path (Debian: apt-get install sqlite3)")
    workdir = args.dir / "cadenza-bench-file-load"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"sales-{args.n}.csv"
    if not path.exists():
        generate(path, args.n)
    reps = []
    for _ in range(args.reps):
        with database(args.db, workdir, args.pg_url) as url:
            bulk_s = bulk(args.db, url, path)
        with database(args.db, workdir, args.pg_url) as url:
            loaded = file_load(url, path)
        assert loaded["rows"] == args.n, loaded
        reps.append({"bulk_s": round(bulk_s, 3), "file_load_s": round(loaded["seconds"], 3),
                     "speed_vs_bulk": round(bulk_s / loaded["seconds"], 3),
                     "rss_before_mib": round(loaded["rss_before_kb"] / 1024, 1),
                     "rss_peak_mib": round(loaded["rss_peak_kb"] / 1024, 1)})
    med = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
    print(json.dumps({
        "db": args.db, "rows": args.n, "csv_bytes": path.stat().st_size,
        "file_load_rows_per_s": round(args.n / med["file_load_s"]),
        "bulk_rows_per_s": round(args.n / med["bulk_s"]), "median": med, "reps": reps,
        "python": platform.python_version(), "sqlalchemy": sa.__version__,
    }, indent=2))


if __name__ == "__main__":
    main()
