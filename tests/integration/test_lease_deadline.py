"""A worker that cannot renew its run's lease stops its steps before the lease ends
(docs/leases.md "The child's own deadline", "Thread isolation").

The worker here has a lease keeper whose thread is stopped: it registers the run (the lease
of the claim, 3 s) and never renews it, as a worker whose heartbeat hangs or cannot reach
the store. Nobody reaps the run in these tests, so what is seen is the old holder's own
doing: a python step's child stops itself at the lease's end minus the margin; a thread
step commits nothing once that time passed. Real parts: a SQLite store, spawned child
processes, a SQLite database behind ``ctx.connection``. The serve-level version, with
SIGSTOP and a second node, is tests/e2e/test_zombie_child.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from executor_home import Bench, gone, loaded

from cadenza.domain.states import StepState

LATE = '''
"""A thread step that writes, then takes longer than the lease."""

import time


def write_then_wait(ctx, seconds=4):
    conn = ctx.connection("wh")
    conn.exec_driver_sql("INSERT INTO late (v) VALUES (1)")
    time.sleep(float(seconds))
    return 1
'''


@contextmanager
def _stuck_worker(root: Path, jobs: str) -> Iterator[Bench]:
    """A home with a 3 s lease and an executor whose lease keeper never renews."""
    with loaded(root, jobs, settings='\n[workers]\nlease = "3s"\n', stuck_lease=True) as bench:
        (root / "plugins" / "cz_lease_late.py").write_text(LATE, encoding="utf-8")
        yield bench


def test_a_process_step_stops_itself_when_its_lease_is_not_extended(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    jobs = f"""
    [jobs.slow]
    [jobs.slow.retry]
    attempts = 1
    [[jobs.slow.steps]]
    name = "nap"
    type = "python"
    callable = "cz_exec_tasks:sleep"
    timeout = "12s"
    op_kwargs = {{ seconds = 600, pid_file = "{pid_file.as_posix()}", grandchild = true }}
    """
    with _stuck_worker(tmp_path / "home", jobs) as bench:
        started = time.monotonic()
        run_id, _ = bench.run("slow")
        elapsed = time.monotonic() - started
        pids = json.loads(pid_file.read_text())
        assert all(gone(pid) for pid in pids)
        nap = bench.store.list_step_runs(run_id)[0]
        assert nap.state is StepState.FAILED
        assert "stopped itself because the run's lease was not extended in time" in (
            nap.error or ""), nap.error
        # The claim's lease is 3 s, its margin 0.6 s: stopped at about 2.4 s (not at 12 s).
        assert elapsed < 4.0, f"the step ran {elapsed:.1f}s"


def test_a_thread_step_commits_nothing_once_its_lease_passed(tmp_path: Path) -> None:
    jobs = """
    [jobs.late]
    [jobs.late.retry]
    attempts = 1
    [[jobs.late.steps]]
    name = "write"
    type = "python"
    isolation = "thread"
    callable = "cz_lease_late:write_then_wait"
    op_kwargs = { seconds = 4 }
    """
    root = tmp_path / "home"
    (root / "data").mkdir(parents=True)
    with sqlite3.connect(root / "data" / "wh.db") as db:
        db.execute("CREATE TABLE late (v INTEGER)")
    with _stuck_worker(root, jobs) as bench:
        run_id, _ = bench.run("late")
        write = bench.store.list_step_runs(run_id)[0]
        assert write.state is StepState.FAILED
        assert "lease ran out before its work could be committed" in (write.error or ""), (
            write.error)
        assert write.error_class == "retryable"
    with sqlite3.connect(root / "data" / "wh.db") as db:
        assert db.execute("SELECT count(*) FROM late").fetchone()[0] == 0
