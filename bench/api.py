"""Benchmark W6: the API on a million runs, under 10 concurrent clients (not a test).

1. **fill** (``bench/api_fill.py``): a store with ``--runs`` runs (default 1,000,000) and
   ``--events`` audit events (default 3,000,000) over ``--jobs`` jobs and a year; with
   ``--reuse`` the filled database (a SQLite file, or a PostgreSQL database named after the
   sizes) and its sidecar ``.json`` under ``--cache`` are kept and used again.
2. **serve**: a home over that store (the fill's jobs and a job ``stream``, each one no-op
   ``python`` step), a real ``cadenza serve`` process on 127.0.0.1 (uvicorn, scheduler,
   ``--workers`` workers), a viewer API token made by the token service; while measuring, this
   process queues ``--drain-rate`` runs of ``stream`` a second and the node drains them.
3. **measure**: ``--clients`` threads (``http.client``, keep-alive), each cycling over the
   endpoints for ``--seconds`` after ``--warmup`` seconds; p50/p95/p99/max per endpoint,
   errors, the runs drained meanwhile. Exit status 1 when a request failed.

Endpoints are ``NAME=TEMPLATE`` paths (``--path``, repeatable, replacing the defaults) with
placeholders drawn per request: ``{job}`` a job of the fill, ``{state}`` a run state,
``{run}`` a run anywhere in history, ``{deep}`` a run among the oldest fifth (a keyset cursor
deep in history). Defaults: ``GET /api/runs`` (newest 50; by job; by state; a cursor page deep
in history), ``GET /api/runs/{run}``, ``GET /api/events?run={run}``. ``--ui`` switches the
defaults to the runs page (``/runs`` and ``/runs?state=FAILED``) and the target to
100 ms; ``--auth session`` logs a viewer in (cookie) instead of a bearer token.
``--base-url`` measures a server already running (give ``--token`` or ``--cookie``).

``--direct`` times the store calls under the endpoints in this process (no HTTP, one
thread); ``--explain`` prints the query plans of the SQL they run (EXPLAIN QUERY PLAN on
SQLite, EXPLAIN ANALYZE on PostgreSQL).

Usage::

    python bench/api.py --store sqlite --reuse
    python bench/api.py --store postgresql --reuse
    python bench/api.py --store sqlite --reuse --ui --path runs=/runs \\
        --path failed='/runs?state=FAILED'
    python bench/api.py --store sqlite --reuse --explain --direct --no-serve
"""

from __future__ import annotations

import argparse
import http.client as http_client
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import sqlalchemy as sa
from api_fill import FillInfo, fill
from common import PG_ADMIN

from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.boundary import NewRun

API_PATHS = {
    "runs_newest": "/api/runs?limit=50",
    "runs_by_job": "/api/runs?job={job}&limit=50",
    "runs_by_state": "/api/runs?state={state}&limit=50",
    "runs_deep_page": "/api/runs?cursor={deep}&limit=50",
    "run": "/api/runs/{run}",
    "events_of_run": "/api/events?run={run}",
}
UI_PATHS = {"runs_page": "/runs", "runs_page_failed": "/runs?state=FAILED"}
STATES = tuple(s.value for s in RunState)
STREAM_JOB = "stream"
NOOP_STEP = ('[[jobs.{job}.steps]]\nname = "main"\ntype = "python"\n'
             'callable = "bench_noop:noop"\nisolation = "thread"\n')


# --- the store ----------------------------------------------------------------------


@dataclass
class Target:
    """The filled database: its URL and the sidecar describing it."""

    url: str
    info: FillInfo


def _pg_url(admin: str, name: str) -> str:
    return sa.make_url(admin).set(database=name).render_as_string(hide_password=False)


def _pg_exists(admin: str, name: str) -> bool:
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as c:
            return c.exec_driver_sql("SELECT 1 FROM pg_database WHERE datname = %(n)s",
                                     {"n": name}).first() is not None
    finally:
        engine.dispose()


def _pg_admin(admin: str, sql: str) -> None:
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as c:
            c.exec_driver_sql(sql)
    finally:
        engine.dispose()


@contextmanager
def filled_store(args: argparse.Namespace) -> Iterator[Target]:
    """The filled database (made now, or the cached one with ``--reuse``); without
    ``--reuse`` it is deleted afterwards."""
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    key = f"api-{args.store}-{args.runs}-{args.events}-{args.jobs}"
    sidecar = cache / f"{key}.json"
    if args.store == "sqlite":
        path = cache / f"{key}.db"
        url = f"sqlite:///{path.as_posix()}"
        exists = path.exists()
    else:
        name = args.pg_database or key.replace("-", "_").replace("api_postgresql",
                                                                 "cadenza_bench_api")
        url = _pg_url(args.pg_url, name)
        exists = _pg_exists(args.pg_url, name)
    if not (args.reuse and exists and sidecar.exists()):
        _drop(args, url)
        if args.store == "postgresql":
            _pg_admin(args.pg_url, f'CREATE DATABASE "{sa.make_url(url).database}"')
        print(f"filling {url} with {args.runs:,} runs and {args.events:,} events ...",
              file=sys.stderr, flush=True)
        info = fill(url, args.runs, args.events, args.jobs)
        info.save(sidecar)
        print(f"filled in {info.seconds} s", file=sys.stderr, flush=True)
    try:
        yield Target(url, FillInfo.load(sidecar))
    finally:
        if not args.reuse:
            _drop(args, url)
            sidecar.unlink(missing_ok=True)


def _drop(args: argparse.Namespace, url: str) -> None:
    if args.store == "sqlite":
        database = sa.make_url(url).database
        assert database is not None
        for suffix in ("", "-wal", "-shm"):
            Path(database + suffix).unlink(missing_ok=True)
    else:
        _pg_admin(args.pg_url,
                  f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)')


# --- the server ---------------------------------------------------------------------


def write_home(home: Path, url: str, port: int, jobs: list[str]) -> None:
    """cadenza.toml over ``url``, jobs.toml with every job of the fill and ``stream``."""
    (home / "plugins").mkdir(parents=True, exist_ok=True)
    (home / "data").mkdir(exist_ok=True)
    (home / "cadenza.toml").write_text(
        f'[store]\nurl = "{url}"\n\n[server]\nhost = "127.0.0.1"\nport = {port}\n',
        encoding="utf-8")
    text = "".join(f'[jobs.{job}]\n{NOOP_STEP.format(job=job)}\n' for job in
                   [*jobs, STREAM_JOB])
    (home / "jobs.toml").write_text(text, encoding="utf-8")
    (home / "plugins" / "bench_noop.py").write_text("def noop():\n    return None\n",
                                                     encoding="utf-8")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SERVER_PID: list[int] = []  # the served process, for its CPU time


@contextmanager
def served(args: argparse.Namespace, target: Target) -> Iterator[str]:
    """A ``cadenza serve`` process over the store; its base URL."""
    home = Path(args.cache) / f"home-{args.store}"
    port = free_port()
    write_home(home, target.url, port, target.info.jobs)
    log = (home / "serve.log").open("w", encoding="utf-8")
    command = [sys.executable, "-m", "cadenza", "--home", str(home), "serve",
               "--workers", str(args.workers)]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                            env=os.environ.copy())
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"cadenza serve exited {proc.returncode}; see {log.name}")
            try:
                if httpx.get(base + "/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"cadenza serve did not answer; see {log.name}")
            time.sleep(0.2)
        SERVER_PID[:] = [proc.pid]
        yield base
    finally:
        SERVER_PID.clear()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def credentials(args: argparse.Namespace, store: Store | None,
                base: str) -> tuple[dict[str, str], dict[str, str], Any]:
    """(headers, cookies, cleanup) for the clients."""
    if args.token:
        return {"Authorization": f"Bearer {args.token}"}, {}, lambda: None
    if args.cookie:
        name, _, value = args.cookie.partition("=")
        return {}, {name: value}, lambda: None
    assert store is not None, "--base-url needs --token or --cookie"
    tag = f"bench-api-{os.getpid()}"
    if args.auth == "session":
        from cadenza.security import hash_password

        password = f"bench-{random.getrandbits(64):x}-password"
        store.add_user(tag, hash_password(password), ["viewer"], actor="bench")
        answer = httpx.post(base + "/api/login", json={"username": tag,
                                                       "password": password}, timeout=10)
        answer.raise_for_status()
        return {}, dict(answer.cookies), lambda: None
    from cadenza.services.tokens import TokenService

    tokens = TokenService(store)
    token = tokens.create(tag, "viewer", actor="bench").token
    return ({"Authorization": f"Bearer {token}"}, {},
            lambda: tokens.revoke(tag, actor="bench"))


# --- the load -----------------------------------------------------------------------


@dataclass
class Samples:
    """Latencies (ms) per endpoint name, and failures."""

    times: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, ms: float) -> None:
        with self.lock:
            self.times.setdefault(name, []).append(ms)

    def fail(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)


def pick(template: str, info: FillInfo, rng: random.Random) -> str:
    """``template`` with its placeholders drawn."""
    values = {"job": rng.choice(info.jobs), "state": rng.choice(STATES),
              "run": rng.choice(info.sample_runs), "deep": rng.choice(info.deep_runs)}
    return template.format(**values)


def client(k: int, args: argparse.Namespace, base: str, paths: dict[str, str],
           info: FillInfo, auth: tuple[dict[str, str], dict[str, str]], warm_until: float,
           stop_at: float, samples: Samples) -> None:
    rng = random.Random(1000 + k)
    names = list(paths)
    turn = k
    # The standard library's HTTP/1.1 client on one kept-alive connection: a load
    # generator should cost the machine little (httpx took ~2.5 ms of CPU per request on
    # this machine's two cores, which the server then lacked).
    split = urlsplit(base)
    headers = dict(auth[0])
    if auth[1]:
        headers["Cookie"] = "; ".join(f"{n}={v}" for n, v in auth[1].items())
    http = http_client.HTTPConnection(split.hostname, split.port, timeout=30)
    try:
        while True:
            now = time.perf_counter()
            if now >= stop_at:
                return
            name = names[turn % len(names)]
            turn += 1
            path = pick(paths[name], info, rng)
            t0 = time.perf_counter()
            try:
                http.request("GET", path, headers=headers)
                answer = http.getresponse()
                body = answer.read()
            except (OSError, http_client.HTTPException) as exc:
                samples.fail(f"{name} {path}: {exc!r}")
                http.close()
                continue
            ms = (time.perf_counter() - t0) * 1000
            if answer.status != 200:
                samples.fail(f"{name} {path}: HTTP {answer.status} {body[:200]!r}")
            elif t0 >= warm_until:
                samples.add(name, ms)
    finally:
        http.close()


class Producer(threading.Thread):
    """Queues ``rate`` runs of ``stream`` a second (in batches every 0.25 s)."""

    def __init__(self, store: Store, rate: float) -> None:
        super().__init__(name="producer", daemon=True)
        self.store, self.rate = store, rate
        self.stop = threading.Event()
        self.queued = 0

    def run(self) -> None:
        owed = 0.0
        while not self.stop.wait(0.25):
            owed += self.rate / 4
            count = int(owed)
            if count:
                owed -= count
                self.store.create_runs([NewRun(STREAM_JOB, "manual:bench")
                                        for _ in range(count)])
                self.queued += count


def stream_done(store: Store) -> int:
    from cadenza.store.tables import runs

    with store.read() as c:
        return int(c.execute(sa.select(sa.func.count()).select_from(runs).where(
            runs.c.job_id == STREAM_JOB, runs.c.state == "SUCCEEDED")).scalar_one())


def forget_stream(store: Store) -> None:
    """Delete the runs of ``stream`` and their events: a reused database stays the fill."""
    from cadenza.store.tables import event_log, runs

    mine = sa.select(runs.c.id).where(runs.c.job_id == STREAM_JOB).scalar_subquery()
    with store.write() as c:
        c.execute(sa.delete(event_log).where(event_log.c.run_id.in_(mine)))
        c.execute(sa.delete(runs).where(runs.c.job_id == STREAM_JOB))  # steps, logs: cascade


def vacuum(store: Store) -> None:
    """PostgreSQL: VACUUM ANALYZE what :func:`forget_stream` deleted. This machine's server
    runs with autovacuum off (``conf.d/90-ci.conf``): without it the dead stream runs pile
    up at the newest end of the indexes that every history page walks, and each later
    measurement of a reused database is slower than the one before (measured: 20 % fewer
    requests per second after three runs); a server with autovacuum does this itself."""
    if store.dialect != "postgresql":
        return
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.exec_driver_sql("VACUUM ANALYZE runs, step_runs, event_log, run_logs")


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"n": len(ordered), "p50": round(statistics.median(ordered), 1), "p95": at(0.95),
            "p99": at(0.99), "max": round(ordered[-1], 1)}


def measure(args: argparse.Namespace, base: str, paths: dict[str, str], info: FillInfo,
            store: Store | None) -> dict[str, Any]:
    headers, cookies, cleanup = credentials(args, store, base)
    samples = Samples()
    producer = Producer(store, args.drain_rate) if store is not None and args.drain_rate \
        else None
    done_before = stream_done(store) if store is not None else 0
    try:
        if producer is not None:
            producer.start()
        start = time.perf_counter()
        warm_until = start + args.warmup
        stop_at = warm_until + args.seconds
        threads = [threading.Thread(target=client, args=(k, args, base, paths, info,
                                                         (headers, cookies), warm_until,
                                                         stop_at, samples))
                   for k in range(args.clients)]
        load = os.getloadavg()[0]
        for t in threads:
            t.start()
        cpu: dict[str, float] = {}
        time.sleep(max(0.0, warm_until - time.perf_counter()))
        cpu_at = (time.process_time(), *(cpu_seconds(p) for p in SERVER_PID))
        for t in threads:
            t.join()
        spent = [time.process_time() - cpu_at[0],
                 *(cpu_seconds(p) - c for p, c in zip(SERVER_PID, cpu_at[1:], strict=True))]
        load = max(load, os.getloadavg()[0])
    finally:
        if producer is not None:
            producer.stop.set()
            producer.join()
        cleanup()
    done = sum(map(len, samples.times.values()))
    cpu["clients_ms_per_request"] = round(spent[0] * 1000 / max(1, done), 2)
    if len(spent) > 1:  # the server's threads: HTTP, and the node draining runs
        cpu["server_ms_per_request"] = round(spent[1] * 1000 / max(1, done), 2)
        cpu["server_share_of_a_core"] = round(spent[1] / args.seconds, 2)
    result: dict[str, Any] = {
        "endpoints": {name: percentiles(samples.times[name]) | {"path": paths[name]}
                      for name in paths if name in samples.times},
        "errors": len(samples.errors), "first_errors": samples.errors[:5],
        "requests_per_s": round(done / args.seconds, 1), "cpu": cpu,
        "load_average_1m_max": round(load, 2),
    }
    if producer is not None and store is not None:
        result["drain"] = {"queued": producer.queued,
                           "succeeded": stream_done(store) - done_before,
                           "queued_per_s": args.drain_rate}
    worst = max((e["p95"] for e in result["endpoints"].values()), default=0.0)
    result["worst_p95_ms"] = worst
    result["target_p95_ms"] = args.target_ms
    result["target_met"] = worst <= args.target_ms and not samples.errors
    return result


# --- in-process: the store calls and their plans ------------------------------------


def store_calls(store: Store, info: FillInfo,
                rng: random.Random) -> dict[str, Any]:
    """What each default endpoint asks of the history service and the store (the calls of
    web/api/runs.py; the runs page is to call ``runs_page`` too)."""
    from cadenza.services.history import HistoryService, RunPageQuery

    history = HistoryService(lambda: store, store.clock)

    def page(**query: Any) -> Any:
        return history.runs_page(RunPageQuery(limit=50, **query))

    return {
        "runs_newest": lambda: page(),
        "runs_by_job": lambda: page(job=rng.choice(info.jobs)),
        "runs_by_state": lambda: page(states=(RunState(rng.choice(STATES)),)),
        "runs_deep_page": lambda: page(before=rng.choice(info.deep_runs)),
        "runs_by_job_deep": lambda: page(job=rng.choice(info.jobs),
                                         before=rng.choice(info.deep_runs)),
        "runs_failed_or_review": lambda: page(states=(RunState.FAILED,
                                                      RunState.NEEDS_REVIEW)),
        "run": lambda: history.get_run(rng.choice(info.sample_runs)),
        "events_of_run": lambda: store.list_events(run_id=rng.choice(info.sample_runs),
                                                   limit=201),
    }


def direct(store: Store, info: FillInfo, reps: int) -> dict[str, Any]:
    rng = random.Random(5)
    out: dict[str, Any] = {}
    for name, call in store_calls(store, info, rng).items():
        call()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = percentiles(times)
    return out


def explain(store: Store, info: FillInfo) -> None:
    """Each store call's statements, with their plans (the worst state for ``state``)."""
    captured: list[tuple[str, Any]] = []

    def listen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "EXPLAIN" not in statement:
            captured.append((statement, parameters))

    rng = random.Random(9)
    pg = store.dialect == "postgresql"
    for name, call in store_calls(store, info, rng).items():
        captured.clear()
        sa.event.listen(store.engine, "before_cursor_execute", listen)
        try:
            call()
        finally:
            sa.event.remove(store.engine, "before_cursor_execute", listen)
        print(f"== {name}")
        raw = store.engine.raw_connection()
        try:
            cur = raw.cursor()
            for statement, params in list(captured):
                print("  " + " ".join(statement.split())[:300])
                prefix = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " if pg \
                    else "EXPLAIN QUERY PLAN "
                cur.execute(prefix + statement, params)
                for row in cur.fetchall():
                    print("    " + (row[0] if pg else str(row[-1])))
        finally:
            raw.close()


# --- main ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--reuse", action="store_true",
                        help="keep the filled database under --cache and use it again")
    parser.add_argument("--cache", default=os.environ.get("CADENZA_BENCH_CACHE",
                                                          "/tmp/cadenza-bench-api"))
    parser.add_argument("--pg-url", default=os.environ.get("CADENZA_BENCH_PG", PG_ADMIN),
                        help="an admin URL; the bench's database is created beside it")
    parser.add_argument("--pg-database", default=None,
                        help="the PostgreSQL database to fill or reuse (default: named "
                             "after the sizes)")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--workers", type=int, default=4, help="the node's workers")
    parser.add_argument("--drain-rate", type=float, default=20,
                        help="runs of `stream` queued per second while measuring (0: none)")
    parser.add_argument("--path", action="append", default=[], metavar="NAME=TEMPLATE",
                        help="an endpoint to measure (repeatable; replaces the defaults)")
    parser.add_argument("--ui", action="store_true",
                        help="the runs page: /runs paths, target 100 ms")
    parser.add_argument("--target-ms", type=float, default=None)
    parser.add_argument("--auth", choices=["token", "session"], default="token")
    parser.add_argument("--token", default=None, help="a bearer token (with --base-url)")
    parser.add_argument("--cookie", default=None, help="NAME=VALUE (with --base-url)")
    parser.add_argument("--base-url", default=None,
                        help="measure this running server (no fill check, no drain)")
    parser.add_argument("--no-serve", action="store_true",
                        help="only fill (and --direct / --explain)")
    parser.add_argument("--direct", action="store_true",
                        help="time the store calls in this process first")
    parser.add_argument("--direct-reps", type=int, default=200)
    parser.add_argument("--explain", action="store_true",
                        help="print the plans of the store calls' SQL")
    args = parser.parse_args(argv)
    paths = dict(p.split("=", 1) for p in args.path) or (UI_PATHS if args.ui else API_PATHS)
    if args.target_ms is None:
        args.target_ms = 100.0 if args.ui else 50.0

    report: dict[str, Any] = {"store": args.store, "runs": args.runs, "events": args.events,
                              "clients": args.clients, "seconds": args.seconds,
                              "workers": args.workers, "versions": versions(args)}
    with filled_store(args) as target:
        report["fill_seconds"] = target.info.seconds
        store = Store.open(target.url)  # migrates a cached database made before a migration
        try:
            if args.explain:
                explain(store, target.info)
            if args.direct:
                report["direct_ms"] = direct(store, target.info, args.direct_reps)
            if not args.no_serve:
                if args.base_url:
                    report["http"] = measure(args, args.base_url, paths, target.info, None)
                else:
                    try:
                        with served(args, target) as base:
                            report["http"] = measure(args, base, paths, target.info, store)
                    finally:
                        forget_stream(store)
                        vacuum(store)
        finally:
            store.close()
    print(json.dumps(report, indent=1))
    if report.get("http", {}).get("errors"):
        sys.exit(1)


def versions(args: argparse.Namespace) -> dict[str, str]:
    import sqlite3

    found = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
             "sqlalchemy": sa.__version__}
    if args.store == "postgresql":
        engine = sa.create_engine(args.pg_url)
        try:
            with engine.connect() as c:
                found["postgresql"] = str(c.exec_driver_sql("SHOW server_version").scalar())
        finally:
            engine.dispose()
    return found


if __name__ == "__main__":
    main()
