"""A home for the lease and cancel end-to-end tests: a SQLite store, a short lease, python
steps that write their pids and sleep, and optionally a PostgreSQL connection."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path
from typing import Any

import psutil

from cadenza.store import Store
from cadenza.store.boundary import NewRun

TASKS = '''
"""Python steps of the lease tests."""

import json
import os
import subprocess
import sys
import time


def sleep(seconds=600, pid_file=None):
    """Write this process's pid and a grandchild's to ``pid_file``, then sleep."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if pid_file:
        with open(pid_file, "w") as fh:
            json.dump([os.getpid(), child.pid], fh)
    time.sleep(float(seconds))
    child.kill()
    return 0


def work(log_file, seconds=5, once_marker=None):
    """Append this process's pid to ``log_file`` then sleep; with ``once_marker``, sleep
    only the first time (the marker file exists afterwards)."""
    with open(log_file, "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    if once_marker:
        if os.path.exists(once_marker):
            return 1
        open(once_marker, "w").close()
    time.sleep(float(seconds))
    return 1
'''


def make_home(root: Path, jobs: str, *, lease: str = "60s", extra: str = "",
              store_url: str = "sqlite:///data/cadenza.db") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugins").mkdir(exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "plugins" / "cz_lease_tasks.py").write_text(TASKS, encoding="utf-8")
    (root / "cadenza.toml").write_text(
        f'[store]\nurl = "{store_url}"\n\n[workers]\ncount = 2\n'
        f'lease = "{lease}"\n{extra}', encoding="utf-8")
    (root / "jobs.toml").write_text(textwrap.dedent(jobs), encoding="utf-8")
    return root


def open_store(home: Path) -> Store:
    """The home's store: its SQLite file, or the database its cadenza.toml names."""
    url = str(tomllib.loads((home / "cadenza.toml").read_text(encoding="utf-8"))
              ["store"]["url"])
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        url = f"sqlite:///{(home / url.removeprefix('sqlite:///')).as_posix()}"
    return Store.open(url)


def enqueue(home: Path, job: str) -> str:
    with open_store(home) as store:
        return store.create_runs([NewRun(job, "manual:test")])[0]


def run_state(home: Path, run_id: str) -> Any:
    with open_store(home) as store:
        return store.get_run(run_id)


def read_pids(path: Path, seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return list(json.loads(path.read_text()))
        except (OSError, ValueError):
            time.sleep(0.1)
    raise AssertionError(f"no pids in {path}")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cadenza", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))


def kill_tree(pid: int) -> None:
    """kill -9 a process and everything it started."""
    try:
        root = psutil.Process(pid)
        family = root.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for proc in [root, *family]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def freeze_outside_a_write(pid: int, home: Path) -> None:
    """SIGSTOP the server at an instant it holds no SQLite write lock.

    A process frozen inside a write transaction keeps SQLite's one write lock until it
    runs again, so no other server could write at all (SQLite has one writer; PostgreSQL
    would let the other server go on). This test is about a lost lease, not about that
    limit, so it freezes the server between two of its writes: when the write lock is
    taken, let it run a moment and freeze it again.
    """
    db = home / "data" / "cadenza.db"
    for _ in range(200):
        os.kill(pid, signal.SIGSTOP)
        probe = sqlite3.connect(db, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)  # real time: let the frozen write finish
        finally:
            probe.close()
    raise AssertionError("the server held the write lock at every try")
