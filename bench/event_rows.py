"""Benchmark: what one audit event costs to write on SQLite, per index it enters (not a test).

Every state change writes an ``event_log`` row in its transaction, and every index of the
table is one more B-tree insert for it. The script opens a fresh migrated store (a SQLite
file, WAL, ``synchronous=NORMAL``), then writes ``-n`` events in transactions of
``--batch`` rows (one multi-row INSERT each, as the executor's group commit does), shaped
like the drain's: a run's events (actor ``system``, no resource) and, one in four, a pool
member's (a resource named). It measures the CPU time per event row (``process_time``:
INSERT and COMMIT) with the store's indexes as they are (``current``), with the
partial ones of migration 0016 made full again (``full``: what 0015 had), and with none but
the primary key (``none``), in rounds that alternate the three.

Usage::

    python bench/event_rows.py [-n 40000] [--batch 43] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from cadenza.store import Store
from cadenza.store.hotsql import AUDIT_COLUMNS

PAYLOAD = json.dumps({"epoch": 1, "fields": {"lease_owner": "node-a:4242:worker-3",
                                            "lease_until": "2026-12-02T16:40:00.123456+00:00"},
                      "from": "QUEUED", "job_id": "noop", "reason": None, "to": "RUNNING"},
                     separators=(",", ":"))
TYPES = ("RUN_STATE_CHANGED", "STEP_STARTED", "STEP_SUCCEEDED", "RUN_FINISHED",
         "RESOURCE_LEASED", "RESOURCE_RELEASED")


def indexes(con: sqlite3.Connection) -> list[tuple[str, str]]:
    return [(name, sql) for name, sql in con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'event_log'"
        " AND sql IS NOT NULL")]


def reshape(con: sqlite3.Connection, kept: list[tuple[str, str]], variant: str) -> None:
    """Put the event log's indexes as ``variant`` says (from the store's own, ``kept``)."""
    for name, _sql in indexes(con):
        con.execute(f'DROP INDEX "{name}"')
    if variant == "none":
        return
    for _name, sql in kept:
        if variant == "full" and " WHERE " in sql:
            sql = sql.split(" WHERE ")[0]
        con.execute(sql)


def one(path: Path, n: int, batch: int) -> float:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA synchronous = NORMAL")
    marks = "(" + ", ".join("?" * len(AUDIT_COLUMNS)) + ")"
    sql = (f"INSERT INTO event_log ({', '.join(AUDIT_COLUMNS)}) VALUES "
           + ", ".join([marks] * batch))
    k = 0
    cpu = time.process_time()
    for _ in range(n // batch):
        params: list[object] = []
        for j in range(batch):
            k += 1
            run_id = f"01JD{k:022d}"
            resource = f"unit-{k % 32}" if j % 4 == 0 else None
            kind = TYPES[4 + k % 2] if resource else TYPES[k % 4]
            params += [run_id, resource, kind, "INFO", f"run {run_id} QUEUED -> RUNNING",
                       PAYLOAD, f"2026-12-02T16:{k // 60000 % 60:02d}:{k // 1000 % 60:02d}."
                       f"{k % 1000:06d}+00:00", "system"]
        con.execute("BEGIN IMMEDIATE")
        con.execute(sql, params)
        con.execute("COMMIT")
    spent = time.process_time() - cpu
    con.close()
    return 1e6 * spent / (n // batch * batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=40000)
    parser.add_argument("--batch", type=int, default=43)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found: dict[str, list[float]] = {"current": [], "full": [], "none": []}
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template.db"
        Store.open(f"sqlite:///{template.as_posix()}").close()
        con = sqlite3.connect(template)
        kept = indexes(con)
        con.close()
        for round_ in range(args.rounds):
            for variant in found:
                path = Path(tmp) / f"{variant}-{round_}.db"
                path.write_bytes(template.read_bytes())
                con = sqlite3.connect(path, isolation_level=None)
                reshape(con, kept, variant)
                con.execute("PRAGMA journal_mode = WAL")
                con.close()
                found[variant].append(one(path, args.n, args.batch))
    print(json.dumps({
        "benchmark": "event_log rows on SQLite: CPU microseconds per row",
        "n": args.n, "batch": args.batch, "rounds": args.rounds,
        "indexes_current": [name for name, _ in kept],
        "us_per_row": {k: {"median": round(statistics.median(v), 1),
                           "all": [round(x, 1) for x in v]} for k, v in found.items()},
        "sqlite": sqlite3.sqlite_version, "python": platform.python_version(),
        "command": f"bench/event_rows.py -n {args.n} --batch {args.batch}"
                   f" --rounds {args.rounds}",
    }, indent=2))


if __name__ == "__main__":
    main()
