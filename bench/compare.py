"""Cadenza beside its peers, in one sitting (``make bench``; not a test).

W1: N one-step no-op jobs enqueued, then drained by 4 workers, history kept by every
system, measured back to back and interleaved (each round runs every system once, in a
rotated order), so that the machine's mood of the moment weighs on all of them alike.
Every system's figure is measured the same way: jobs / (last job end − first job start),
from what the system recorded (the peers' harness records each task's start and end in a
file; Cadenza's figure comes from its own step starts and run ends, ``bench/runs.py``'s
``recorded_runs_per_s``), and every harness polls for the end at most every 0.25 s.

============================  ==============================================================
``cadenza-sqlite``            ``bench/runs.py --driver node --store sqlite``: a real node
                              (serve's dispatcher and workers) on a SQLite file
``huey``                      Huey's ``SqliteHuey`` (WAL), a 4-thread consumer
``cadenza-postgresql``        the same node on the private PostgreSQL cluster
``pgqueuer``                  PgQueuer (asyncpg), 4 consumers, batch 10, on that cluster
``procrastinate``             procrastinate, concurrency 4, on that cluster (not with QUICK)
============================  ==============================================================

The peers run from their own venv (``bench/.peers-venv``, made on first use from
``bench/peers/requirements.txt``), never from Cadenza's. PostgreSQL is a private cluster
this script starts (``initdb`` in a temporary directory, a free port on 127.0.0.1, stock
settings: fsync and synchronous_commit on) and removes afterwards; without PostgreSQL's
server binaries the PostgreSQL lines are left out. It prints a Markdown table (median and
range of the rounds, the ratio to the peer, the load average and the machine) and with
``--write`` puts it in docs/benchmarks.md between its markers.

Usage::

    python bench/compare.py [--quick] [--rounds 3] [--n 10000] [--write]

Linux (and macOS) only: the private cluster is started with ``pg_ctl`` (as the
``postgres`` user when run as root). Not tried on Windows.
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
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS = BENCH / "peers"
PEERS_VENV = BENCH / ".peers-venv"
DOC = ROOT / "docs" / "benchmarks.md"
sys.path.insert(0, str(ROOT))  # for the private cluster the tests start too
from tests.support.pg_cluster import private_postgres as private_cluster  # noqa: E402

BEGIN, END = "<!-- make-bench: begin -->", "<!-- make-bench: end -->"
WORKERS = 4


def peers_python() -> Path:
    """The peers' interpreter, their venv made first if it is not there."""
    python = PEERS_VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    stamp = PEERS_VENV / ".installed"
    wanted = (PEERS / "requirements.txt").read_text(encoding="utf-8")
    if not python.exists() or not stamp.exists() or stamp.read_text() != wanted:
        print(f"making the peers' venv {PEERS_VENV} ...", file=sys.stderr, flush=True)
        venv.create(PEERS_VENV, with_pip=True, clear=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r",
                        str(PEERS / "requirements.txt")], check=True)
        stamp.write_text(wanted)
    return python


@contextmanager
def private_postgres() -> Iterator[int | None]:
    """A throwaway PostgreSQL cluster on a free port of 127.0.0.1 (its port), with a
    database ``bench``, or None (the tests' cluster: tests/support/pg_cluster.py)."""
    with private_cluster() as cluster:
        if cluster is None:
            print("no PostgreSQL server binaries (initdb): PostgreSQL lines left out",
                  file=sys.stderr)
            yield None
            return
        cluster.createdb("bench")
        yield cluster.port


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=BENCH)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def cadenza(store: str, n: int, port: int | None) -> float:
    cmd = [sys.executable, str(BENCH / "runs.py"), "--driver", "node", "--store", store,
           "-n", str(n), "-w", str(WORKERS), "--reps", "1"]
    if store == "postgresql":
        cmd += ["--pg-url", f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"]
    return float(json.loads(_run(cmd))["recorded_runs_per_s"]["median"])


def peer(python: Path, script: str, n: int, port: int | None) -> float:
    with tempfile.TemporaryDirectory(prefix="cadenza-bench-peer-") as tmp:
        env = dict(os.environ, PEERBENCH_DIR=tmp)
        cmd = [str(python), str(PEERS / f"{script}.py"), "--n", str(n), "--reps", "1"]
        if port is not None:
            cmd += ["--dsn", f"postgresql://postgres@127.0.0.1:{port}/bench"]
        if script != "w1_huey":
            cmd += ["--concurrency", str(WORKERS)]
        else:
            cmd += ["--workers", str(WORKERS)]
        _run(cmd, env)
        result = json.loads((Path(tmp) / "results" / f"{script}.json").read_text())
        return float(result["drain_rate"]["median"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="fewer jobs, no procrastinate: a few minutes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=0, help="jobs per system per round")
    parser.add_argument("--write", action="store_true",
                        help="put the table in docs/benchmarks.md between its markers")
    args = parser.parse_args(argv)
    n = args.n or (3000 if args.quick else 10_000)
    python = peers_python()
    started = time.monotonic()
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    figures: dict[str, list[float]] = {}
    with private_postgres() as port:
        systems: list[tuple[str, Any]] = [
            ("cadenza-sqlite", lambda: cadenza("sqlite", n, None)),
            ("huey", lambda: peer(python, "w1_huey", n, None)),
        ]
        if port is not None:
            systems += [("cadenza-postgresql", lambda: cadenza("postgresql", n, port)),
                        ("pgqueuer", lambda: peer(python, "w1_pgqueuer", n, port))]
            if not args.quick:
                systems.append(("procrastinate",
                                lambda: peer(python, "w1_procrastinate", n, port)))
        for k in range(args.rounds):
            order = systems[k % len(systems):] + systems[:k % len(systems)]
            for name, measure in order:
                figure = measure()
                figures.setdefault(name, []).append(figure)
                print(f"round {k + 1}: {name} {figure:,.0f} jobs/s", file=sys.stderr,
                      flush=True)
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    table = render(figures, n, args, load_before, load_after, time.monotonic() - started)
    print(table)
    if args.write:
        write(table)


def render(figures: dict[str, list[float]], n: int, args: argparse.Namespace,
           load_before: tuple[float, ...] | None, load_after: tuple[float, ...] | None,
           seconds: float) -> str:
    def cell(name: str) -> str:
        values = figures.get(name)
        if not values:
            return "—"
        return (f"**{statistics.median(values):,.0f}** "
                f"({min(values):,.0f}–{max(values):,.0f})")

    def ratio(ours: str, theirs: str) -> str:
        if not figures.get(ours) or not figures.get(theirs):
            return "—"
        return f"{statistics.median(figures[ours]) / statistics.median(figures[theirs]):.2f}×"

    load = "" if load_before is None or load_after is None else (
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; ")
    lines = [
        f"W1, {n:,} no-op jobs per system per round, {WORKERS} workers, {args.rounds} "
        f"interleaved rounds (jobs/s: median, range), measured "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `make bench"
        f"{' QUICK=1' if args.quick else ''}` in {seconds / 60:.1f} min; {load}"
        f"{os.cpu_count()} CPUs, {platform.platform(terse=True)}, Python "
        f"{platform.python_version()}.",
        "",
        "| store | Cadenza (a real node) | peer | peer's figure | Cadenza ÷ peer |",
        "|---|---|---|---|---|",
        f"| SQLite | {cell('cadenza-sqlite')} | Huey 3.5 (SqliteHuey, 4 threads) "
        f"| {cell('huey')} | {ratio('cadenza-sqlite', 'huey')} |",
        f"| PostgreSQL | {cell('cadenza-postgresql')} | PgQueuer 1.6 (asyncpg, 4 consumers) "
        f"| {cell('pgqueuer')} | {ratio('cadenza-postgresql', 'pgqueuer')} |",
    ]
    if figures.get("procrastinate"):
        lines.append(f"| PostgreSQL | {cell('cadenza-postgresql')} | procrastinate 3.10 "
                     f"(concurrency 4) | {cell('procrastinate')} "
                     f"| {ratio('cadenza-postgresql', 'procrastinate')} |")
    return "\n".join(lines)


def write(table: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    block = f"{BEGIN}\n{table}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Beside the peers (`make bench`)\n\n" + block + "\n"
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
