"""A serve node's workers on SQLite and PostgreSQL: every queued run executed once, boundaries
of concurrent runs sharing commits, a failing run failing alone."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from executor_home import loaded

from cadenza.clock import SystemClock
from cadenza.domain.states import TERMINAL_RUN_STATES, RunState, StepState
from cadenza.executor.request import RunRequest
from cadenza.home import Home
from cadenza.node import Node
from cadenza.store.boundary import NewRun

JOBS = """
[jobs.noop]
[[jobs.noop.steps]]
name = "one"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
op_kwargs = { n = 1 }

[jobs.broken]
[[jobs.broken.steps]]
name = "one"
type = "python"
callable = "cz_exec_tasks:fail"
isolation = "thread"
[[jobs.broken.steps]]
name = "two"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
"""


@pytest.mark.parametrize("workers", [1, 4])
def test_a_node_drains_the_queue_with_few_commits(tmp_path: Path, store_url: str,
                                                  workers: int) -> None:
    with loaded(tmp_path / "home", JOBS, store_url=store_url) as bench:
        ids = bench.store.create_runs([NewRun("noop", "manual:t") for _ in range(120)])
        bad = bench.executor.enqueue("broken", RunRequest(), trigger="manual:t")
        commits = bench.count_commits()
        node = Node(Home(bench.home), bench.config, bench.store, clock=SystemClock(),
                    workers=workers, scheduler=False)
        node.start()
        done = threading.Event()
        try:
            for _ in range(600):  # real runs on a real node: at most 60 s
                runs = bench.store.list_runs(limit=500)
                if all(r.state in TERMINAL_RUN_STATES for r in runs):
                    done.set()
                    break
                SystemClock().wait(threading.Event(), 0.1)
        finally:
            node.stop(timeout=30)
        assert done.is_set(), "the node did not run every queued run within 60 s"
        runs_by_id = {r.id: r for r in bench.store.list_runs(limit=500)}
        assert len(runs_by_id) == 121
        assert all(runs_by_id[i].state is RunState.SUCCEEDED and runs_by_id[i].rows == 1
                   for i in ids)
        assert runs_by_id[bad].state is RunState.FAILED
        one, two = bench.store.list_step_runs(bad)
        assert one.state is StepState.FAILED and two.state is StepState.SKIPPED
        for run_id in ids:
            steps = bench.store.list_step_runs(run_id)
            assert [(s.step, s.state) for s in steps] == [("one", StepState.SUCCEEDED)]
        for run_id in ids[:5]:
            assert [e.event_type for e in bench.store.list_events(run_id=run_id)][-2:] == [
                "STEP_SUCCEEDED", "RUN_FINISHED"]
        # A one-step run costs two commits at most: its claim and first step start are one
        # (shared with the other runs of the dispatcher's decision), its step and run end
        # another (shared with the next write of any worker). Measured: 2.0 per run.
        assert commits[0] / 121 <= 2.5, commits[0]
