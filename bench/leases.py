"""Benchmark W4: resource leases under contention, with a worker killed (not a test).

8 worker processes (``-w``) contend for a pool of 4 units (``--units``) over N leases
(``-n``, default 20,000), each held ``--hold`` (5 ms). A lease is the product's path: a run
of job ``lease`` claimed through ``Store.claim_runs`` as ``Executor.claim_and_start`` does
(by job ids the pools are asked first: while no unit is free nothing is claimed; then its
claim hook leases one unit, all or nothing), its first step start in the same transaction
(LEASED -> RUNNING, one event with the lease), the hold,
then the run's end through ``Store.record_boundaries`` (the run end hook releases the
unit, RUNNING -> COOLDOWN; cooldown 0: the next claim takes it back). A worker that finds
every unit held waits up to 2 ms for a release before it claims again.

Once a third of the leases are done the script kills one worker process with SIGKILL
(TerminateProcess on Windows) while it holds a unit. The script's own reaper (what a
node's reaper does, every 100 ms here) re-queues that run once its lease (``--ttl``, 2 s)
expires, which returns the unit (RUNNING -> COOLDOWN); **recovery** is the time from the
kill to that unit's next lease by another worker, to compare with TTL + 1 s.

Then the **ceiling**: the same workers and holds on a bare table of 4 rows, each lease one
conditional UPDATE (``... SET owner = :me WHERE id = :id AND owner IS NULL``, success when
one row changed) and each release another, one transaction each, no run, no event.

Printed (JSON): leases/s through the product (also in each fifth of the leases: a rate that
moves with the history or the queue shows there) and on the bare table (and their ratio;
the target is at least half), p50/p99 of the wait for a lease, double leases found in the
intervals the workers recorded (a unit held by two workers at one instant) and in the
audit log (a unit leased again before its release), the recovery time.

Usage::

    python bench/leases.py --store sqlite -n 20000
    python bench/leases.py --store postgresql -n 20000 [--pg-url ...] [--keep-db]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import scratch_pg_database

from cadenza.clock import SystemClock
from cadenza.config.schema_settings import Pool, PoolMember
from cadenza.domain.states import RunState, StepState
from cadenza.resources.plan import PoolPlan
from cadenza.resources.pools import install_leaser, sync_members
from cadenza.store import Store
from cadenza.store.boundary import Boundary, NewRun, RunEnd, StepEnd, StepStart
from cadenza.store.state_guard import drop_guard

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BARE = "bench_units"


def plan(units: int) -> PoolPlan:
    pool = Pool(kind="unit", cooldown=timedelta(0),
                members=[PoolMember(id=f"u-{k}") for k in range(1, units + 1)])
    return PoolPlan({"units": pool}, {m.id: ("units", m) for m in pool.members},
                    {"lease": {"units": 1}})


def micros() -> int:
    return time.time_ns() // 1000


# -- worker processes ---------------------------------------------------------------------


def product_worker(url: str, units: int, hold: float, ttl: float, out: str, stop: str) -> None:
    """Lease through the claim until no run is left (or ``stop`` exists)."""
    store = Store.open(url, migrate=False)
    leaser = install_leaser(store, plan(units))
    # PostgreSQL: how many failed claims saw a unit free but lost it to another claim's
    # lock (``_reserve``), the costlier kind (a transaction more).
    reserves = [0, 0]
    reserve = getattr(leaser, "_reserve", None)
    if reserve is not None:
        def counted(*a: Any, **k: Any) -> bool:
            ok = bool(reserve(*a, **k))
            reserves[0] += 1
            reserves[1] += not ok
            return ok
        leaser._reserve = counted  # type: ignore[method-assign]
    clock = SystemClock()
    owner = f"bench:{os.getpid()}"
    pause = threading.Event()
    # As Executor.claim_and_start (older code, for an A/B: the claim alone).
    starting = "starting" in inspect.signature(store.claim_runs).parameters
    extra: dict[str, Any] = {"starting": True} if starting else {}
    next_look = 0.0
    cpu_claim = cpu_fail = cpu_end = 0.0
    fails = leases = 0
    with open(out, "a", encoding="utf-8", buffering=1) as fh:
        while not os.path.exists(stop):
            asked = micros()
            cpu = time.process_time()
            with store.write() as conn:
                # As Executor.claim_and_start: the claim, then the first step's start in
                # the same transaction (one event per unit for its lease and its start).
                claimed = store.claim_runs(owner, clock.now() + timedelta(seconds=ttl),
                                           job_ids=["lease"], conn=conn, **extra)
                if claimed:
                    run = claimed[0]
                    started = store.record_boundaries(
                        [Boundary(run.id, run.lease_epoch,
                                  starts=[StepStart("s", "python", run.lease_epoch)])],
                        conn=conn)
                if starting:
                    store.claim_written(conn)
            if not claimed:
                fails += 1
                cpu_fail += time.process_time() - cpu
                # Is anything left? Asked at most every 50 ms (asked at every failed try,
                # it was one more query per failed claim, ~4.7 per lease; the bare
                # workers ask once per lease, with one statement on a one-row table). One
                # row, not every queued id: the bare workers' check is one row too.
                if time.monotonic() >= next_look:
                    next_look = time.monotonic() + 0.05
                    if not store.list_runs(state=RunState.QUEUED, limit=1):
                        # Nothing queued: done, unless a run is still out (a killed
                        # worker's, which the reaper re-queues when its lease expires).
                        if not store.list_runs(state=RunState.RUNNING, limit=1):
                            break
                        pause.wait(0.05)
                        continue
                pause.wait(0.002)
                continue
            cpu_claim += time.process_time() - cpu
            got = micros()
            # What the claim leased, as ctx.resources shows it (no read); older code: a read.
            held = leaser.held_by(run.id) if hasattr(leaser, "held_by") else None
            if held:
                unit = held[0][0]
            else:
                with store.read() as c:
                    unit = c.exec_driver_sql(
                        "SELECT resource_id FROM resources WHERE lease_owner = "
                        + ("%s" if store.dialect == "postgresql" else "?"),
                        (run.id,)).scalar_one()
            # The unit is held: the interval below lies inside the real hold.
            fh.write(f"L {unit} {asked} {got}\n")
            pause.wait(hold)
            ending = micros()
            fh.write(f"I {unit} {got} {ending} {run.id}\n")
            step_run_id = started[0].step_run_ids[0]
            cpu = time.process_time()
            store.record_boundaries([Boundary(
                run.id, run.lease_epoch,
                step_end=StepEnd(step_run_id, "s", "python", run.lease_epoch,
                                 StepState.SUCCEEDED),
                run_end=RunEnd(RunState.SUCCEEDED))])
            cpu_end += time.process_time() - cpu
            leases += 1
        # This process's CPU: in claims that leased, claims that found nothing, run ends.
        fh.write(f"C {cpu_claim:.6f} {cpu_fail:.6f} {fails} {cpu_end:.6f} {leases}"
                 f" {time.process_time():.6f} {reserves[0]} {reserves[1]}\n")
    store.close()


def bare_worker(url: str, units: int, hold: float, leases: int, out: str, counter: str) -> None:
    """Lease rows of the bare table with one conditional UPDATE each way."""
    engine = sa.create_engine(url)
    sqlite = url.startswith("sqlite")
    me = os.getpid()
    pause = threading.Event()
    done = 0
    with engine.connect() as conn, open(out, "a", encoding="utf-8", buffering=1) as fh:
        if sqlite:
            conn.exec_driver_sql("PRAGMA busy_timeout = 10000")
            conn.commit()
        k = me % units
        while True:
            with conn.begin():
                left = conn.exec_driver_sql(f"SELECT n FROM {BARE}_left").scalar_one()
                if left <= 0:
                    break
            asked = micros()
            got_unit = None
            while got_unit is None:
                for step in range(units):
                    unit = (k + step) % units
                    with conn.begin():
                        changed = conn.exec_driver_sql(
                            f"UPDATE {BARE} SET owner = {me} WHERE id = {unit}"
                            " AND owner IS NULL").rowcount
                    if changed == 1:
                        got_unit = unit
                        break
                else:
                    pause.wait(0.002)
            got = micros()
            fh.write(f"L {got_unit} {asked} {got}\n")
            pause.wait(hold)
            with conn.begin():
                conn.exec_driver_sql(f"UPDATE {BARE} SET owner = NULL WHERE id = {got_unit}"
                                     f" AND owner = {me}")
                conn.exec_driver_sql(f"UPDATE {BARE}_left SET n = n - 1")
            done += 1
            k = got_unit + 1
    engine.dispose()


# -- the run ------------------------------------------------------------------------------


@contextmanager
def database(args: argparse.Namespace, tmp: Path) -> Iterator[str]:
    if args.store == "sqlite":
        yield f"sqlite:///{(tmp / 'cadenza.db').as_posix()}"
        return
    with scratch_pg_database(args.pg_url, keep=args.keep_db) as url:
        yield url


def spawn(args: list[str]) -> subprocess.Popen[bytes]:
    here = Path(__file__).resolve()
    return subprocess.Popen([sys.executable, str(here), *args])


def kill(proc: subprocess.Popen[bytes]) -> None:
    if sys.platform == "win32":
        proc.kill()  # TerminateProcess
    else:
        os.kill(proc.pid, signal.SIGKILL)


def suspend(proc: subprocess.Popen[bytes], stop: bool) -> None:
    """Freeze (``stop``) or thaw a worker while the script looks at what it holds (POSIX;
    on Windows the look and the kill stay a few milliseconds apart)."""
    if sys.platform != "win32":
        os.kill(proc.pid, signal.SIGSTOP if stop else signal.SIGCONT)


def read_lines(paths: list[Path]) -> list[list[str]]:
    lines: list[list[str]] = []
    for path in paths:
        if path.exists():
            lines.extend(line.split() for line in path.read_text().splitlines() if line)
    return lines


def count_new_ends(paths: list[Path], offsets: list[int]) -> int:
    """The ``I`` lines (a lease ended) written since the last call: only the new bytes are
    read (reading every file whole at every poll cost the product phase O(N^2) parsing,
    ~10 % of a core by the time of the kill)."""
    found = 0
    for k, path in enumerate(paths):
        if not path.exists():
            continue
        with path.open("rb") as fh:
            fh.seek(offsets[k])
            chunk = fh.read()
        whole = chunk[:chunk.rfind(b"\n") + 1]  # a line being written waits for next time
        offsets[k] += len(whole)
        found += sum(1 for line in whole.split(b"\n") if line.startswith(b"I "))
    return found


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def overlaps(intervals: dict[str, list[tuple[int, int]]]) -> int:
    found = 0
    for spans in intervals.values():
        spans.sort()
        found += sum(1 for (_, e1), (s2, _) in pairwise(spans) if s2 < e1)
    return found


def product(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, Any]:
    store = Store.open(url)
    if args.without_state_guard:  # the A of an A/B: the database's state check dropped
        with store.engine.begin() as conn:
            for statement in drop_guard(store.dialect):
                conn.exec_driver_sql(statement)
    install_leaser(store, plan(args.units))
    sync_members(store, plan(args.units))
    for first in range(0, args.n, 1000):
        store.create_runs([NewRun("lease", "manual:bench")] * min(1000, args.n - first))
    stop = tmp / "stop"
    outs = [tmp / f"product-{k}.txt" for k in range(args.workers)]
    t0 = time.perf_counter()
    procs = [spawn(["--worker", "product", url, str(args.units), str(args.hold), str(args.ttl),
                    str(out), str(stop)]) for out in outs]
    clock = SystemClock()
    killed_at: int | None = None
    victim_unit: str | None = None
    victim = procs[0]
    reaped = 0
    done = 0
    offsets = [0] * len(outs)
    while any(p.poll() is None for p in procs if p is not victim) or victim.poll() is None:
        time.sleep(0.1)
        # The reaper of a node: re-queue runs whose lease expired (every 100 ms here).
        reaped += len(store.reap_expired_run_leases(now=clock.now()))
        if killed_at is None:
            done += count_new_ends(outs, offsets)
            if done >= args.n // 3:
                # Frozen while looked at (POSIX): a worker seen holding a unit could
                # otherwise release it between the look and the kill, and the "recovery"
                # measured would be its own release (0.03 s once).
                suspend(victim, True)
                with store.read() as c:
                    row = c.execute(sa.text(
                        "SELECT resource_id FROM resources WHERE lease_owner IN (SELECT id"
                        " FROM runs WHERE lease_owner = :o AND state = 'RUNNING')"),
                        {"o": f"bench:{victim.pid}"}).first()
                if row is not None:  # kill it while it holds a unit
                    kill(victim)
                    victim.wait()
                    killed_at = micros()
                    victim_unit = row[0]
                else:
                    suspend(victim, False)
        if killed_at is not None and all(p.poll() is not None for p in procs):
            break
    t1 = time.perf_counter()
    lines = read_lines(outs)
    waits = [(int(line[3]) - int(line[2])) / 1000 for line in lines if line[0] == "L"]
    intervals: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for line in lines:
        if line[0] == "I":
            intervals[line[1]].append((int(line[2]), int(line[3])))
    recovery = None
    if killed_at is not None and victim_unit is not None:
        after = sorted(int(line[3]) for line in lines
                       if line[0] == "L" and line[1] == victim_unit and int(line[3]) > killed_at)
        recovery = (after[0] - killed_at) / 1e6 if after else None
    double_in_log = 0
    for k in range(1, args.units + 1):
        holder = None
        for event in store.list_events(resource_id=f"u-{k}", limit=20 * args.n):
            if event.event_type == "RESOURCE_LEASED":
                double_in_log += holder is not None
                holder = event.run_id
            elif event.event_type == "RESOURCE_RELEASED":
                double_in_log += holder != event.run_id
                holder = None
    succeeded = len(store.list_runs(state=RunState.SUCCEEDED, limit=args.n + 1))
    # The workers that ended normally (not the killed one) say where their CPU went.
    cpu = [[float(v) for v in line[1:]] for line in lines if line[0] == "C"]
    counted = sum(c[4] for c in cpu) or 1.0
    store.close()
    # The rate in each fifth of the leases, in the order they ended: a rate that falls as
    # the history grows shows here (the kill's pause falls in the second fifth).
    ends = sorted(int(line[3]) for line in lines if line[0] == "I")
    fifths = [ends[len(ends) * k // 5:len(ends) * (k + 1) // 5] for k in range(5)]
    by_fifth = [round(len(f) / ((f[-1] - f[0]) / 1e6), 1) if len(f) > 1 and f[-1] > f[0]
                else None for f in fifths]
    return {
        "leases": succeeded, "seconds": t1 - t0, "leases_per_s": succeeded / (t1 - t0),
        "leases_per_s_by_fifth": by_fifth,
        "wait_ms_p50": percentile(waits, 0.5), "wait_ms_p99": percentile(waits, 0.99),
        "double_leases_in_intervals": overlaps(intervals),
        "double_leases_in_audit_log": double_in_log,
        "killed_worker_unit": victim_unit, "recovery_s": recovery,
        "recovery_limit_s": args.ttl + 1, "runs_reaped": reaped,
        "per_lease_of_surviving_workers": {
            "failed_claims": round(sum(c[2] for c in cpu) / counted, 2),
            "cpu_ms_claims_that_leased": round(1000 * sum(c[0] for c in cpu) / counted, 3),
            "cpu_ms_claims_that_failed": round(1000 * sum(c[1] for c in cpu) / counted, 3),
            "cpu_ms_run_ends": round(1000 * sum(c[3] for c in cpu) / counted, 3),
            "cpu_ms_whole_process": round(1000 * sum(c[5] for c in cpu) / counted, 3),
            "reserves": round(sum(c[6] for c in cpu) / counted, 2),
            "reserves_lost": round(sum(c[7] for c in cpu) / counted, 2),
        },
    }


def bare(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, Any]:
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {BARE} (id INTEGER PRIMARY KEY, owner INTEGER)")
        c.exec_driver_sql(f"CREATE TABLE {BARE}_left (n INTEGER NOT NULL)")
        for k in range(args.units):
            c.exec_driver_sql(f"INSERT INTO {BARE} (id, owner) VALUES ({k}, NULL)")
        c.exec_driver_sql(f"INSERT INTO {BARE}_left (n) VALUES ({args.n})")
    if url.startswith("sqlite"):
        with engine.connect() as c:
            c.exec_driver_sql("PRAGMA journal_mode = WAL")
            c.commit()
    engine.dispose()
    outs = [tmp / f"bare-{k}.txt" for k in range(args.workers)]
    t0 = time.perf_counter()
    procs = [spawn(["--worker", "bare", url, str(args.units), str(args.hold), str(args.n),
                    str(out), ""]) for out in outs]
    for proc in procs:
        proc.wait()
    t1 = time.perf_counter()
    lines = read_lines(outs)
    waits = [(int(line[3]) - int(line[2])) / 1000 for line in lines if line[0] == "L"]
    return {"leases": len(waits), "seconds": t1 - t0, "leases_per_s": len(waits) / (t1 - t0),
            "wait_ms_p50": percentile(waits, 0.5), "wait_ms_p99": percentile(waits, 0.99)}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        kind, url, units, hold = argv[1], argv[2], int(argv[3]), float(argv[4])
        if kind == "product":
            product_worker(url, units, hold, float(argv[5]), argv[6], argv[7])
        else:
            bare_worker(url, units, hold, int(argv[5]), argv[6], argv[7])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("-n", type=int, default=20_000, help="leases")
    parser.add_argument("-w", "--workers", type=int, default=8, help="worker processes")
    parser.add_argument("--units", type=int, default=4)
    parser.add_argument("--hold", type=float, default=0.005, help="seconds each lease is held")
    parser.add_argument("--ttl", type=float, default=2.0, help="the run lease's length, s")
    parser.add_argument("--keep-db", action="store_true",
                        help="PostgreSQL: keep the databases (their names go to stderr)")
    parser.add_argument("--pg-url", default=os.environ.get("CADENZA_BENCH_PG", DEFAULT_PG))
    parser.add_argument("--without-state-guard", action="store_true",
                        help="drop the trigger that refuses illegal resource state changes "
                             "(to measure what it costs)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        with database(args, Path(tmp)) as url:
            leased = product(args, url, Path(tmp))
        with database(args, Path(tmp)) as url:
            ceiling = bare(args, url.replace("cadenza.db", "bare.db"), Path(tmp))
    result = {
        "benchmark": "W4: resource leases under contention, one worker killed",
        "store": args.store, "n": args.n, "workers": args.workers, "units": args.units,
        "hold_s": args.hold, "ttl_s": args.ttl,
        "product": leased, "bare_conditional_update": ceiling,
        "ratio_to_ceiling": leased["leases_per_s"] / ceiling["leases_per_s"],
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *argv]),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
