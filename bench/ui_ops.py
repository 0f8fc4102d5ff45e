"""Benchmark: the operations pages on a big store (not a test).

Builds a demo home (SQLite) whose store holds ``-n`` runs spread over the last 7 days
(created with ``Store.create_runs``, each with its RUN_CREATED event, then marked
SUCCEEDED with their times) and a route pool of ``--members`` members, then times, through
the app in process (FastAPI's TestClient, one client, sequential), ``--reps`` requests of
each page: ``/resources``, ``/audit`` (first page, a type filter, an actor filter that
matches nothing — the worst case, a keyset page deep in the log), ``/dashboard`` (24 h and
7 d; kept 30 s, and "cold": recomputed at each request). Prints one JSON object: p50 and
p95 in ms per page.

Usage::

    python bench/ui_ops.py -n 200000 --reps 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.security import hash_password
from cadenza.services import Actor, Services
from cadenza.services.config import init_home
from cadenza.store.boundary import NewRun
from cadenza.store.tables import runs
from cadenza.web.app import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

ORIGIN = "http://testserver"


def build(root: Path, n: int, members: int) -> tuple[Services, FakeClock]:
    clock = FakeClock("2027-03-03T00:00:00+00:00")
    home = init_home(root / "home", example=True, actor=Actor("cli", "bench"), clock=clock)
    pool = "".join(f'[[pools.egress.members]]\nid = "r-{i}"\nproxy = "http://127.0.0.1:9"\n'
                   for i in range(members))
    settings = home.path / "cadenza.toml"
    settings.write_text(settings.read_text(encoding="utf-8")
                        + f'\n[pools.egress]\nkind = "route"\n{pool}', encoding="utf-8")
    services = Services.at(home.path, actor=Actor("cli", "bench"), clock=clock)
    store = services.store()
    store.add_user("admin2", hash_password("correct horse battery"), ["admin"])
    batch = 2000
    step = timedelta(days=7) / max(1, n // batch)
    for start in range(0, n, batch):
        store.create_runs([NewRun("hello", "manual:bench")
                           for _ in range(min(batch, n - start))])
        clock.advance(step.total_seconds())
    with store.write() as conn:
        conn.execute(sa.update(runs).values(state="SUCCEEDED", started_at=runs.c.created_at,
                                            finished_at=runs.c.created_at))
    return services, clock


def timed(client: TestClient, path: str, reps: int, cold: bool = False) -> dict[str, float]:
    """p50 and p95 of ``reps`` GETs of ``path``; ``cold``: the dashboard's kept figures
    dropped before each (what the first reader of a window waits)."""
    answer = client.get(path)
    assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    seconds = []
    for _ in range(reps):
        if cold:
            vars(client.app.state).pop("cadenza_dashboard", None)  # type: ignore[attr-defined]
        began = time.perf_counter()
        assert client.get(path).status_code == 200
        seconds.append(time.perf_counter() - began)
    seconds.sort()
    return {"p50_ms": round(statistics.median(seconds) * 1000, 1),
            "p95_ms": round(seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))] * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="runs in the store")
    parser.add_argument("--members", type=int, default=50, help="routes in the pool")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        services, _clock = build(Path(tmp), args.n, args.members)
        built = time.perf_counter() - began
        store = services.store()
        app = create_app(store, home=services.home)
        with TestClient(app, base_url=ORIGIN) as client:
            login = client.post("/api/login", json={"username": "admin2",
                                                    "password": "correct horse battery"})
            assert login.status_code == 200
            middle = store.list_events(limit=1, newest_first=True)[0].event_id // 2
            pages = {"/resources": "/resources", "/audit": "/audit",
                     "/audit?type=RUN_CREATED": "/audit?type=RUN_CREATED",
                     "/audit?actor=nobody": "/audit?actor=user:nobody",
                     "/audit?before=<middle>": f"/audit?before={middle}",
                     "/dashboard?window=24h": "/dashboard?window=24h",
                     "/dashboard?window=7d": "/dashboard?window=7d"}
            figures: dict[str, Any] = {name: timed(client, path, args.reps)
                                       for name, path in pages.items()}
            for window in ("24h", "7d"):
                figures[f"/dashboard?window={window} (cold)"] = timed(
                    client, f"/dashboard?window={window}", args.reps, cold=True)
        services.close()
    print(json.dumps({"runs": args.n, "members": args.members, "reps": args.reps,
                      "build_s": round(built, 1), "pages": figures}, indent=1))


if __name__ == "__main__":
    main()
