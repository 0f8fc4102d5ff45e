"""The fault harness: real ``cadenza serve`` nodes on one PostgreSQL database, each through a
TCP proxy the test controls, and the invariants checked from the store afterwards.

:class:`Cluster` starts N nodes, each with a home of its own (the same jobs; its store URL
points at its own :class:`~tests.support.tcp_proxy.TcpProxy` in front of a private
PostgreSQL, :mod:`tests.support.pg_cluster`), a run lease and a leader lease of 3 s. The
jobs: ``tick`` every minute (a step of one second), ``load`` and ``long`` on demand (steps
of half a second and of eight seconds), ``spool`` on demand (eight seconds of writing a file
in the node's own ``data/``, retried after a second on a failure); every step appends what
it did to ``effects.jsonl``: the run, the process and its node (the step's parent), the
attempt, when it began and ended, and the error it failed with ("" when none). Faults:
:meth:`Cluster.kill` (SIGKILL), :meth:`Cluster.pause` / :meth:`Cluster.resume` (SIGSTOP /
SIGCONT), :meth:`Cluster.cut` / :meth:`Cluster.blackhole` / :meth:`Cluster.heal` (the node's
road to the database), and the database itself (``cluster.pg.restart()``).

:func:`check_invariants` reads the store: every minute of the window fired exactly once and
not MISSED, no fire recorded twice, no run RUNNING past its lease, and no run's step
executed by two processes at once (from the effects).
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cadenza.domain.states import RunState
from cadenza.store import Store
from tests.e2e.serve_helpers import Served, eventually
from tests.support.netns import Netns
from tests.support.pg_cluster import PrivatePostgres
from tests.support.tcp_proxy import TcpProxy

LEASE = 3.0
TASKS = '''
"""The fault harness's steps: each appends what it did to an effects file."""

import json
import os
import time


def _effect(effects, ctx, began, error=""):
    line = {"run": ctx.run.id, "pid": os.getpid(), "attempt": ctx.step.attempt,
            "began": began, "ended": time.time(), "node": os.getppid(), "error": error}
    with open(effects, "a") as fh:
        fh.write(json.dumps(line) + "\\n")


def record(effects, seconds=1, ctx=None):
    began = time.time()
    time.sleep(float(seconds))
    _effect(effects, ctx, began)
    return 1


def spool(effects, directory, seconds=8, ctx=None):
    """Write 16 KiB to a file of the node's data directory every quarter of a second for
    ``seconds``, then remove it: a step that needs its node's disk."""
    began = time.time()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{ctx.run.id}-{ctx.step.attempt}.part")
    try:
        with open(path, "wb") as fh:
            while time.time() - began < float(seconds):
                fh.write(b"\\0" * 16384)
                fh.flush()
                time.sleep(0.25)
    except OSError as exc:
        _effect(effects, ctx, began, f"{exc.strerror or exc}")
        raise
    finally:
        if os.path.exists(path):
            os.unlink(path)
    _effect(effects, ctx, began)
    return 1
'''


def jobs_toml(effects: Path, data: Path | None = None) -> str:
    """The jobs of a node whose home's data directory is ``data`` (``spool`` writes there)."""
    spooled = (data or effects.parent / "data") / "spool"
    return textwrap.dedent(f"""
    [jobs.tick]
    schedule = "* * * * *"
    timezone = "UTC"
    [[jobs.tick.steps]]
    name = "work"
    type = "python"
    callable = "cz_fault_tasks:record"
    op_kwargs = {{ effects = "{effects.as_posix()}", seconds = 1 }}

    [jobs.load]
    max_concurrency = 4
    [[jobs.load.steps]]
    name = "work"
    type = "python"
    callable = "cz_fault_tasks:record"
    op_kwargs = {{ effects = "{effects.as_posix()}", seconds = 0.5 }}

    [jobs.long]
    max_concurrency = 4
    [[jobs.long.steps]]
    name = "work"
    type = "python"
    callable = "cz_fault_tasks:record"
    op_kwargs = {{ effects = "{effects.as_posix()}", seconds = 8 }}

    [jobs.spool]
    max_concurrency = 4
    retry = {{ attempts = 6, backoff = "fixed", base_seconds = 1, jitter = 0 }}
    [[jobs.spool.steps]]
    name = "work"
    type = "python"
    callable = "cz_fault_tasks:spool"
    op_kwargs = {{ effects = "{effects.as_posix()}", directory = "{spooled.as_posix()}" }}
    """)


class Cluster:
    """N ``cadenza serve`` nodes on one database (see the module docstring)."""

    def __init__(self, root: Path, pg: PrivatePostgres, nodes: int = 3,
                 netns: Netns | None = None,
                 skewed: dict[int, timedelta] | None = None) -> None:
        """``netns``: node 0 runs in that network namespace, its proxy listening on the
        host's end of the namespace's link (:meth:`partition` drops its packets).
        ``skewed``: node index → how far its wall clock is off (``CADENZA_FAKE_NOW``: the
        real time plus that offset, from its start on)."""
        self.root = root
        self.pg = pg
        self.netns = netns
        self.skewed = skewed or {}
        self.effects = root / "effects.jsonl"
        self.proxies = [TcpProxy("127.0.0.1", pg.port, listen=netns.host_ip
                                 if netns is not None and i == 0 else "127.0.0.1")
                        for i in range(nodes)]
        self.homes = [self._home(root / f"node{i}", proxy)
                      for i, proxy in enumerate(self.proxies)]
        self.nodes: list[Served] = []
        self.outputs: dict[int, str] = {}
        self.started = datetime.now(UTC)

    def _home(self, home: Path, proxy: TcpProxy) -> Path:
        (home / "plugins").mkdir(parents=True)
        (home / "data").mkdir(exist_ok=True)  # a test may have mounted a small disk there
        (home / "plugins" / "cz_fault_tasks.py").write_text(TASKS, encoding="utf-8")
        url = self.pg.url(port=proxy.port).replace("@127.0.0.1:", f"@{proxy.listen}:")
        host = self.netns.ns_ip if self.netns is not None and proxy.listen != "127.0.0.1" \
            else "127.0.0.1"
        (home / "cadenza.toml").write_text(
            f'[store]\nurl = "{url}"\n\n'
            f'[workers]\ncount = 2\nlease = "{LEASE:g}s"\n\n'
            f'[server]\nleader_lease = "{LEASE:g}s"\nhost = "{host}"\n', encoding="utf-8")
        (home / "jobs.toml").write_text(jobs_toml(self.effects, home / "data"),
                                        encoding="utf-8")
        return home

    # -- the nodes ----------------------------------------------------------------------

    def _serve(self, i: int) -> Served:
        if self.netns is not None and i == 0:
            return Served(self.homes[0], host=self.netns.ns_ip, wrap=self.netns.command)
        if i in self.skewed:
            return Served(self.homes[i],
                          fake_now=(datetime.now(UTC) + self.skewed[i]).isoformat())
        return Served(self.homes[i])

    def start(self, first: int | None = None,
              alone: Callable[[], object] | None = None) -> None:
        """Start every node; with ``first``, that one alone until it leads, and ``alone``
        called then, before the others start (to give it work no other node can take)."""
        self.nodes = [None] * len(self.homes)  # type: ignore[list-item]
        if first is not None:
            self.nodes[first] = self._serve(first)
            self.nodes[first].wait_ready(60)
            eventually(lambda: self.leader() == first, 30, f"node {first} leading")
            if alone is not None:
                alone()
        for i in range(len(self.homes)):
            if self.nodes[i] is None:
                self.nodes[i] = self._serve(i)
        for i, node in enumerate(self.nodes):
            node.wait_ready(60, degraded=i in self.skewed)
        eventually(lambda: self.leader() is not None, 30, "a leader")

    def store(self) -> Store:
        """The store, straight to the database (not through a node's proxy)."""
        return Store.open(self.pg.url(), migrate=False)

    def sessions(self) -> str:
        """The database's sessions and who blocks whom, one line each: what a failed
        wait of a test prints (a partitioned node's session holding a lock is otherwise
        invisible once the test has torn the cluster down)."""
        engine = sa.create_engine(self.pg.url(), poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text(
                    "SELECT pid, client_addr, client_port, state, wait_event_type,"
                    " wait_event, pg_blocking_pids(pid) AS blocked_by,"
                    " round(extract(epoch FROM clock_timestamp() - xact_start)::numeric, 1)"
                    " AS xact_s, left(query, 120) AS query FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " ORDER BY xact_start NULLS LAST")).all()
                locks = conn.execute(sa.text(
                    "SELECT pid, locktype, mode, granted, relation::regclass::text AS rel,"
                    " objid FROM pg_locks WHERE locktype IN ('advisory', 'transactionid')"
                    " OR NOT granted")).all()
        except Exception as exc:  # the database itself may be the fault under test
            return f"(sessions not readable: {exc})"
        finally:
            engine.dispose()
        proxies = {port: i for i, p in enumerate(self.proxies) for port in p.upstream_ports()}
        lines = [f"session {r.pid} node {proxies.get(r.client_port, '?')} from"
                 f" {r.client_addr}:{r.client_port} {r.state} wait={r.wait_event_type}/"
                 f"{r.wait_event} blocked_by={r.blocked_by} xact={r.xact_s}s {r.query!r}"
                 for r in rows]
        lines += [f"lock {r.pid} {r.locktype} {r.mode} granted={r.granted} {r.rel or ''}"
                  f" {r.objid or ''}" for r in locks]
        return "\n".join(lines)

    def leader(self) -> int | None:
        """The index of the node whose lease runs, or None."""
        with self.store() as store, store.read() as conn:
            row = conn.execute(sa.text(
                "SELECT holder FROM leadership WHERE until > clock_timestamp()")).first()
        if row is None:
            return None
        pid = int(str(row.holder).split(":")[1])
        return next((i for i, n in enumerate(self.nodes)
                     if n is not None and n.proc.pid == pid), None)

    def kill(self, i: int) -> None:
        os.kill(self.nodes[i].proc.pid, signal.SIGKILL)

    def pause(self, i: int) -> None:
        os.kill(self.nodes[i].proc.pid, signal.SIGSTOP)

    def resume(self, i: int) -> None:
        os.kill(self.nodes[i].proc.pid, signal.SIGCONT)

    def cut(self, i: int) -> None:
        self.proxies[i].cut()

    def blackhole(self, i: int) -> None:
        self.proxies[i].blackhole()

    def heal(self, i: int) -> None:
        self.proxies[i].heal()

    def partition(self) -> None:
        """Node 0 (in its namespace) loses every packet to and from the database."""
        assert self.netns is not None
        self.netns.drop()

    def unpartition(self) -> None:
        assert self.netns is not None
        self.netns.heal()

    def close(self) -> None:
        if self.netns is not None:
            self.netns.heal()
        self.nodes = [node for node in self.nodes if node is not None]
        for node in self.nodes:
            if node.proc.poll() is None:
                os.kill(node.proc.pid, signal.SIGCONT)
        for proxy in self.proxies:
            proxy.heal()
        for node in self.nodes:
            self.outputs[node.proc.pid] = node.stop()
        for proxy in self.proxies:
            proxy.close()

    # -- time -------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The wall clock (the nodes' and the database's: one machine)."""
        return datetime.now(UTC)

    def before_next_minute(self, seconds: float, at_least: float = 10.0) -> datetime:
        """Sleep until ``seconds`` before the next minute boundary that is at least
        ``at_least`` seconds away; returns that boundary."""
        now = datetime.now(UTC)
        boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        if (boundary - now).total_seconds() < at_least:
            boundary += timedelta(minutes=1)
        time.sleep(max((boundary - now).total_seconds() - seconds, 0))
        return boundary


@dataclass
class Effect:
    run: str
    pid: int
    attempt: int
    began: float
    ended: float
    node: int = 0
    """The pid of the node whose child ran the step."""
    error: str = ""
    """What the step failed with ("" when it did not)."""


def effects(path: Path) -> list[Effect]:
    if not path.exists():
        return []
    return [Effect(**json.loads(line)) for line in path.read_text().splitlines() if line]


def check_invariants(cluster: Cluster, minutes: list[datetime]) -> dict[str, Any]:
    """The invariants of the module docstring over the fires of ``minutes``; returns what
    was seen (for the failure messages)."""
    with cluster.store() as store:
        runs = store.list_runs(limit=10_000)
    ticks = [r for r in runs if r.job_id == "tick" and r.trigger == "scheduled"]
    fires = [r.scheduled_for for r in ticks]
    seen = {"ticks": [(r.scheduled_for, r.state.value, r.reason) for r in ticks]}
    assert len(fires) == len(set(fires)), f"a fire recorded twice: {seen}"
    for minute in minutes:
        mine = [r for r in ticks if r.scheduled_for == minute]
        assert len(mine) == 1, f"the fire of {minute} is not recorded once: {seen}"
        assert mine[0].state is not RunState.MISSED, f"{minute} MISSED: {seen}"
    stale = datetime.now(UTC) - timedelta(seconds=3 * LEASE)
    stuck = [r.id for r in runs if r.state is RunState.RUNNING
             and r.lease_until is not None and r.lease_until < stale]
    assert stuck == [], f"runs RUNNING past their lease: {stuck}"
    by_run: dict[str, list[Effect]] = {}
    for effect in effects(cluster.effects):
        by_run.setdefault(effect.run, []).append(effect)
    for run_id, done in by_run.items():
        for a in done:
            for b in done:
                if a is not b and a.pid != b.pid:
                    assert a.ended <= b.began or b.ended <= a.began, (
                        f"run {run_id}'s step ran in two processes at once: {a} {b}")
    return seen
