"""The soak: the fault harness under a steady load and a random fault every few seconds to
minutes, then the invariants and the nodes' resources (``make soak MINUTES=30``; a short
version runs in the suite, tests/faults/test_soak.py).

Load: the ``tick`` job every minute, and a stream of manual ``load`` runs (one every two
seconds). Faults, drawn at random with a seeded generator: kill -9 of a
node (started again at once), SIGSTOP of a node for twice the lease (then SIGCONT), a node
cut from the database for a few seconds (then healed), PostgreSQL restarted; every kind
once, in a shuffled order, then again. Each node's
RSS and open files are sampled every few seconds; a node that was not restarted must end
within ±10 % of its median after the warm-up (or within 8 MiB and 8 files, for small
figures). Prints a JSON report; exits 1 when an invariant or a resource check fails.

    .venv/bin/python -m tests.faults.soak --minutes 30 [--seed 7] [--fault-every 120]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

from cadenza.store.boundary import NewRun
from tests.e2e.serve_helpers import Served
from tests.faults.cluster import LEASE, Cluster, check_invariants
from tests.support.pg_cluster import private_postgres

FAULTS = ("kill", "pause", "cut", "restart_db")


@dataclass
class Samples:
    """One node process's RSS (bytes) and open files over time."""

    rss: list[int] = field(default_factory=list)
    files: list[int] = field(default_factory=list)

    def add(self, pid: int) -> None:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                rss = proc.memory_info().rss
                files = proc.num_fds() if hasattr(proc, "num_fds") else len(proc.open_files())
        except psutil.Error:
            return
        self.rss.append(rss)
        self.files.append(files)

    def flat(self, warmup: int) -> tuple[bool, dict[str, Any]]:
        """Whether the last sample is within ±10 % of the median after ``warmup`` samples
        (or within 8 MiB / 8 files)."""
        if len(self.rss) <= warmup + 2:
            return True, {"samples": len(self.rss)}
        rss_median = statistics.median(self.rss[warmup:])
        files_median = statistics.median(self.files[warmup:])
        last_rss, last_files = self.rss[-1], self.files[-1]
        ok = (abs(last_rss - rss_median) <= max(0.10 * rss_median, 8 << 20)
              and abs(last_files - files_median) <= max(0.10 * files_median, 8))
        return ok, {"rss_mib": [round(rss_median / 2**20, 1), round(last_rss / 2**20, 1)],
                    "files": [files_median, last_files], "samples": len(self.rss)}


def soak(root: Path, minutes: float, *, seed: int = 7, fault_every: float = 60.0,
         every: float = 2.0, sample_every: float = 5.0) -> dict[str, Any]:
    """Run the soak for ``minutes`` in ``root``; returns the report (``ok`` and why)."""
    rng = random.Random(seed)
    with private_postgres() as pg:
        if pg is None:
            return {"ok": False, "why": "PostgreSQL's server binaries (initdb) are missing"}
        cluster = Cluster(root, pg)
        faults: list[dict[str, Any]] = []
        samples: dict[int, Samples] = {}
        restarted: set[int] = set()
        deck: list[str] = []
        try:
            cluster.start()
            started = datetime.now(UTC)
            end = time.monotonic() + minutes * 60
            next_fault = time.monotonic() + fault_every / 2
            next_run = next_sample = time.monotonic()
            while time.monotonic() < end:
                now = time.monotonic()
                if now >= next_run:
                    with cluster.store() as store:
                        store.create_runs([NewRun("load", "manual:soak")])
                    next_run = now + every
                if now >= next_sample:
                    for node in cluster.nodes:
                        samples.setdefault(node.proc.pid, Samples()).add(node.proc.pid)
                    next_sample = now + sample_every
                if now >= next_fault:
                    faults.append(_inject(cluster, rng, restarted, deck))
                    next_fault = time.monotonic() + fault_every * rng.uniform(0.5, 1.5)
                time.sleep(0.2)
            # Settle: no fault for a while, every node healthy, the last fires run.
            for i in range(len(cluster.nodes)):
                cluster.heal(i)
            time.sleep(4 * LEASE + 5)
            first = started.replace(second=0, microsecond=0) + timedelta(minutes=1)
            last = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
            minutes_due = [first + timedelta(minutes=k)
                           for k in range(int((last - first).total_seconds() // 60) + 1)
                           if first + timedelta(minutes=k) <= last]
            report: dict[str, Any] = {"ok": True, "minutes": minutes, "seed": seed,
                                      "faults": faults, "fires_checked": len(minutes_due)}
            try:
                check_invariants(cluster, minutes_due)
            except AssertionError as exc:
                report.update(ok=False, why=str(exc)[:2000])
            warmup = max(2, int(30 / sample_every))
            resources = {}
            for pid, seen in samples.items():
                if pid in restarted:
                    continue
                flat, figures = seen.flat(warmup)
                resources[str(pid)] = figures
                if not flat:
                    report.update(ok=False, why=f"node {pid} grew: {figures}")
            report["resources"] = resources
            return report
        finally:
            cluster.close()


def _inject(cluster: Cluster, rng: random.Random, restarted: set[int],
            deck: list[str]) -> dict[str, Any]:
    """The next fault of ``deck`` (every kind once, shuffled, then again)."""
    if not deck:
        deck.extend(rng.sample(FAULTS, len(FAULTS)))
    kind = deck.pop()
    i = rng.randrange(len(cluster.nodes))
    at = datetime.now(UTC).isoformat(timespec="seconds")
    if kind == "kill":
        restarted.add(cluster.nodes[i].proc.pid)
        cluster.kill(i)
        cluster.outputs[cluster.nodes[i].proc.pid] = cluster.nodes[i].output()
        cluster.nodes[i] = Served(cluster.homes[i])
        cluster.nodes[i].wait_ready(60)
    elif kind == "pause":
        cluster.pause(i)
        time.sleep(2 * LEASE + 1)
        cluster.resume(i)
    elif kind == "cut":
        cluster.cut(i)
        time.sleep(LEASE + 2)
        cluster.heal(i)
    else:
        cluster.pg.restart()
    return {"at": at, "fault": kind, "node": None if kind == "restart_db" else i}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fault-every", type=float, default=120.0,
                        help="seconds between faults, on average")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cadenza-soak-") as tmp:
        report = soak(Path(tmp), args.minutes, seed=args.seed, fault_every=args.fault_every)
    print(json.dumps(report, indent=2, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
