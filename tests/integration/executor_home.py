"""A throwaway home for executor and ``cadenza run`` tests: real files, a real SQLite store
(or the PostgreSQL database of the ``pg_url`` fixture), python steps from ``plugins/``.

Every test home gets the same plugin module, ``cz_exec_tasks`` (with thread isolation a
plugin module is imported once per process, so its text must not differ between homes).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from cadenza.config import LoadedConfig
from cadenza.executor.request import RunRequest
from cadenza.executor.runner import Executor
from cadenza.executor.tracking import RunOutcome
from cadenza.home import Home
from cadenza.store import Store
from cadenza.store.engine import READ_ONLY

TASKS = '''
"""Python steps of the executor tests."""

import json
import os
import subprocess
import sys
import time
from datetime import datetime

import cadenza


def echo(ctx=None, **kwargs):
    """Return every keyword argument (the precedence tests read them back)."""
    return {"kwargs": kwargs}


def count(n=3):
    return int(n)


def fail(message="boom"):
    raise ValueError(message)


def retry_later():
    raise cadenza.Retryable("the service is busy")


def sleep(seconds=600, pid_file=None, grandchild=False):
    """Write this process's pid (and a grandchild's) to ``pid_file``, then sleep."""
    pids = [os.getpid()]
    if grandchild:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        pids.append(child.pid)
    if pid_file:
        with open(pid_file, "w") as fh:
            json.dump(pids, fh)
    time.sleep(float(seconds))
    return 0


def chatty(ctx):
    ctx.log.debug("a debug line %s", 1)
    ctx.log.info("an info line %s", 2)
    ctx.log.warning("a warning line")
    ctx.log.error("an error line")
    return {"pid": os.getpid()}


def not_json():
    return {"when": datetime(2027, 1, 1)}


def process_facts(**kwargs):
    """The process the step runs in (directory, user, environment) and what it was given."""
    return {"cwd": os.getcwd(), "uid": os.getuid() if hasattr(os, "getuid") else None,
            "env": sorted(k for k in os.environ if k != "CADENZA_STEP_MARKER"),
            "path": os.environ.get("PATH"), "kwargs": kwargs}


def text():
    return "a string"


def write_sql(ctx, connection="wh", value=1, then_fail=False):
    conn = ctx.connection(connection)
    conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (v INTEGER)")
    conn.exec_driver_sql("INSERT INTO t (v) VALUES (?)", (int(value),))
    if then_fail:
        raise ValueError("after the insert")
    return 1


def audit(ctx):
    ctx.event("HTTP_REQUEST", "GET https://example.org/x", {"status": 200})
    return None


def look_back(ctx, step):
    return {"seen": dict(ctx.previous(step) or {})}


def exit_now():
    sys.exit(3)


def steal(ctx, db):
    """Another node takes the run over: its lease epoch moves on."""
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("UPDATE runs SET lease_epoch = lease_epoch + 1 WHERE id = ?", (ctx.run.id,))
    con.commit()
    con.close()
    return 1
'''

SETTINGS = """\
[store]
url = "{url}"

[connections.wh]
type = "sql"
url = "sqlite:///data/wh.db"
"""


def make_home(root: Path, jobs: str, *, store_url: str | None = None) -> Path:
    """Write a home under ``root`` with ``jobs`` as jobs.toml; returns its path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugins").mkdir(exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "plugins" / "cz_exec_tasks.py").write_text(TASKS, encoding="utf-8")
    url = store_url or "sqlite:///data/cadenza.db"
    (root / "cadenza.toml").write_text(SETTINGS.format(url=url), encoding="utf-8")
    (root / "jobs.toml").write_text(textwrap.dedent(jobs), encoding="utf-8")
    return root


@dataclass
class Bench:
    """A loaded home: its config, store and executor."""

    home: Path
    config: LoadedConfig
    store: Store
    executor: Executor

    def run(self, job: str, request: RunRequest | None = None) -> tuple[str, RunOutcome]:
        run_id = self.executor.enqueue(job, request or RunRequest(), trigger="manual:test")
        return run_id, self.executor.execute(run_id)

    def steps(self, run_id: str) -> dict[str, object]:
        return {s.step: s for s in self.store.list_step_runs(run_id)}

    def log(self, run_id: str) -> list[tuple[str, str | None, str]]:
        return [(line.level, line.step, line.message) for line in self.store.list_logs(run_id)]

    def count_commits(self) -> list[int]:
        """A counter of the store's write commits from now on (a one-element list); the
        read-only transactions of ``Store.read()`` are not counted."""
        counter = [0]

        def on_commit(conn: sa.Connection) -> None:
            if not conn.get_execution_options().get(READ_ONLY):
                counter[0] += 1

        sa.event.listen(self.store.engine, "commit", on_commit)
        return counter


@contextmanager
def loaded(root: Path, jobs: str, *, store_url: str | None = None, settings: str = "",
           stuck_lease: bool = False) -> Iterator[Bench]:
    """A home with ``jobs`` (and ``settings`` appended to cadenza.toml), loaded, with its
    store and an executor; closed afterwards. ``stuck_lease``: the executor's lease keeper
    never renews (its thread is stopped: the claim's lease is the last one), as a worker
    whose heartbeat hangs or cannot reach the store."""
    home = Home(make_home(root, jobs, store_url=store_url).resolve())
    if settings:
        with home.config_file.open("a", encoding="utf-8") as fh:
            fh.write(settings)
    config = home.load_config()
    store = home.open_store(config)
    keeper = None
    if stuck_lease:
        from cadenza.executor.lease_keeper import LeaseKeeper

        keeper = LeaseKeeper(store, config.settings.workers.lease)
        keeper.stop()
    executor = Executor(store, config, keeper=keeper)
    try:
        yield Bench(home.path, config, store, executor)
    finally:
        executor.close()
        store.close()


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (or is a zombie waiting to be reaped)."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
