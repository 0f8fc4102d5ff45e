"""A node's workers run their runs' thread steps themselves (real node, real clock, SQLite).

A short step runs in its worker's thread. A step still running after a moment is taken
over: a new worker thread waits for it as a worker always did (its log lines are written
while it runs, its timeout and a cancel stop it), goes on with the run and then serves the
local queue in the first thread's place, which ends once the step returns. Stopping the
node waits for the run that was taken over.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cadenza.clock import SystemClock
from cadenza.domain.states import TERMINAL_RUN_STATES, RunState, StepState
from cadenza.home import Home
from cadenza.node import Node
from cadenza.store import Store
from cadenza.store.boundary import NewRun

TASKS = '''
import threading
import time


def where():
    return {"thread": threading.current_thread().name}


def slow(ctx, seconds=2.0):
    ctx.log.info("slow step started")
    time.sleep(float(seconds))
    return {"thread": threading.current_thread().name}


def hang(ctx, seconds=30.0):
    """Sleep until told to stop (ctx.cancelled()), at most ``seconds``."""
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end and not ctx.cancelled():
        time.sleep(0.02)
    return {"thread": threading.current_thread().name}
'''

JOBS = """
[jobs.quick]
[[jobs.quick.steps]]
name = "here"
type = "python"
callable = "cz_inline_tasks:where"
isolation = "thread"

[jobs.slow]
[[jobs.slow.steps]]
name = "nap"
type = "python"
callable = "cz_inline_tasks:slow"
isolation = "thread"
op_kwargs = { seconds = 2.5 }
[[jobs.slow.steps]]
name = "after"
type = "python"
callable = "cz_inline_tasks:where"
isolation = "thread"

[jobs.stuck]
retry = { attempts = 1 }
[[jobs.stuck.steps]]
name = "wait"
type = "python"
callable = "cz_inline_tasks:hang"
isolation = "thread"
timeout = "1s"

[jobs.long]
[[jobs.long.steps]]
name = "wait"
type = "python"
callable = "cz_inline_tasks:hang"
isolation = "thread"
"""


@contextmanager
def serving(tmp_path: Path, workers: int = 1) -> Iterator[tuple[Node, Store]]:
    root = tmp_path / "home"
    (root / "plugins").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "plugins" / "cz_inline_tasks.py").write_text(TASKS, encoding="utf-8")
    (root / "cadenza.toml").write_text('[store]\nurl = "sqlite:///data/cadenza.db"\n',
                                       encoding="utf-8")
    (root / "jobs.toml").write_text(textwrap.dedent(JOBS), encoding="utf-8")
    home = Home(root.resolve())
    config = home.load_config()
    store = home.open_store(config)
    node = Node(home, config, store, clock=SystemClock(), workers=workers, scheduler=False)
    node.start()
    try:
        yield node, store
    finally:
        node.stop(timeout=15)
        store.close()


def submit(node: Node, store: Store, job: str) -> str:
    (run_id,) = store.create_runs([NewRun(job, "manual:test")])
    node.dispatcher.wake()
    return run_id


def wait_for(check: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def ended(store: Store, run_id: str) -> bool:
    run = store.get_run(run_id)
    return run is not None and (run.state in TERMINAL_RUN_STATES
                                or run.state is RunState.NEEDS_REVIEW)


def outputs(store: Store, run_id: str) -> dict[str, dict[str, object]]:
    return {s.step: dict(s.output or {}) for s in store.list_step_runs(run_id)}


def worker_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("cadenza-worker-")}


def test_a_short_step_runs_in_its_worker_thread(tmp_path: Path) -> None:
    with serving(tmp_path, workers=2) as (node, store):
        run_ids = [submit(node, store, "quick") for _ in range(5)]
        wait_for(lambda: all(ended(store, r) for r in run_ids))
        for run_id in run_ids:
            run = store.get_run(run_id)
            assert run is not None and run.state is RunState.SUCCEEDED
            assert outputs(store, run_id)["here"]["thread"] in {"cadenza-worker-0",
                                                                "cadenza-worker-1"}
        assert worker_threads() == {"cadenza-worker-0", "cadenza-worker-1"}


def test_a_long_step_is_taken_over_and_its_lines_are_written_while_it_runs(
        tmp_path: Path) -> None:
    with serving(tmp_path) as (node, store):
        began = time.monotonic()
        run_id = submit(node, store, "slow")
        # The thread that took the run over writes the step's lines while it runs.
        wait_for(lambda: any("slow step started" in line.message
                             for line in store.list_logs(run_id)), seconds=10)
        run = store.get_run(run_id)
        assert run is not None and run.state is RunState.RUNNING
        assert time.monotonic() - began < 2.5
        assert "cadenza-worker-0+1" in worker_threads()
        wait_for(lambda: ended(store, run_id))
        run = store.get_run(run_id)
        assert run is not None and run.state is RunState.SUCCEEDED
        steps = store.list_step_runs(run_id)
        assert [(s.step, s.state, s.attempt) for s in steps] == [
            ("nap", StepState.SUCCEEDED, 1), ("after", StepState.SUCCEEDED, 1)]
        done = outputs(store, run_id)
        assert done["nap"]["thread"] == "cadenza-worker-0"  # the step ran where it began
        assert done["after"]["thread"] == "cadenza-worker-0+1"  # the run went on in the other
        # The first thread ended with its step; the other serves the queue in its place.
        wait_for(lambda: worker_threads() == {"cadenza-worker-0+1"})
        next_run = submit(node, store, "quick")
        wait_for(lambda: ended(store, next_run))
        assert outputs(store, next_run)["here"]["thread"] == "cadenza-worker-0+1"
        # A second long step there: its taker is named from the worker, not from the taker.
        again = submit(node, store, "slow")
        wait_for(lambda: ended(store, again))
        assert outputs(store, again)["after"]["thread"] == "cadenza-worker-0+2"


def test_a_step_run_by_its_worker_still_times_out_at_its_deadline(tmp_path: Path) -> None:
    with serving(tmp_path) as (node, store):
        began = time.monotonic()
        run_id = submit(node, store, "stuck")
        wait_for(lambda: ended(store, run_id), seconds=10)
        assert time.monotonic() - began < 4
        run = store.get_run(run_id)
        assert run is not None and run.state in (RunState.FAILED, RunState.NEEDS_REVIEW)
        (step,) = store.list_step_runs(run_id)
        assert step.state is StepState.FAILED and "timed out after 1s" in (step.error or "")


def test_a_cancel_stops_a_step_run_by_its_worker(tmp_path: Path) -> None:
    with serving(tmp_path) as (node, store):
        run_id = submit(node, store, "long")
        wait_for(lambda: (r := store.get_run(run_id)) is not None
                 and r.state is RunState.RUNNING)
        store.request_cancel(run_id, "alice")
        began = time.monotonic()
        wait_for(lambda: ended(store, run_id), seconds=10)
        assert time.monotonic() - began < 5
        run = store.get_run(run_id)
        assert run is not None and run.state is RunState.CANCELED


def test_a_stop_as_a_takeover_starts_waits_for_the_run(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The takeover's thread is slow to start (a loaded machine): the node is stopped
    # meanwhile. The stop used to join that thread before it had started, and failed with
    # "cannot join thread before it is started".
    starting = threading.Event()
    start = threading.Thread.start

    def slow_start(thread: threading.Thread) -> None:
        if thread.name.startswith("cadenza-worker-") and "+" in thread.name:
            starting.set()
            time.sleep(0.5)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    with serving(tmp_path) as (node, store):
        run_id = submit(node, store, "slow")
        assert starting.wait(10)
        node.stop(timeout=15)
        run = store.get_run(run_id)
        assert run is not None and run.state is RunState.SUCCEEDED


def test_stopping_the_node_waits_for_a_run_taken_over(tmp_path: Path) -> None:
    with serving(tmp_path) as (node, store):
        run_id = submit(node, store, "slow")
        wait_for(lambda: "cadenza-worker-0+1" in worker_threads(), seconds=10)
        node.stop(timeout=15)
        run = store.get_run(run_id)
        assert run is not None and run.state is RunState.SUCCEEDED
        assert [s.state for s in store.list_step_runs(run_id)] == [StepState.SUCCEEDED] * 2
