"""The worker pool on SQLite and PostgreSQL: every queued run executed once, boundaries of
concurrent runs sharing commits, a failing run failing alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from executor_home import loaded

from cadenza.domain.states import RunState, StepState
from cadenza.executor.request import RunRequest
from cadenza.executor.worker import WorkerPool
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
def test_the_pool_drains_the_queue_with_few_commits(tmp_path: Path, store_url: str,
                                                    workers: int) -> None:
    with loaded(tmp_path / "home", JOBS, store_url=store_url) as bench:
        ids = bench.store.create_runs([NewRun("noop", "manual:t") for _ in range(120)])
        bad = bench.executor.enqueue("broken", RunRequest(), trigger="manual:t")
        commits = bench.count_commits()
        pool = WorkerPool(bench.store, bench.config, workers=workers)
        stats = pool.drain()
        pool.close()
        assert stats.errors == []
        assert stats.runs == 121 and stats.states == {"SUCCEEDED": 120, "FAILED": 1}
        runs = {r.id: r for r in bench.store.list_runs(limit=500)}
        assert all(runs[i].state is RunState.SUCCEEDED and runs[i].rows == 1 for i in ids)
        assert runs[bad].state is RunState.FAILED
        one, two = bench.store.list_step_runs(bad)
        assert one.state is StepState.FAILED and two.state is StepState.SKIPPED
        for run_id in ids[:5]:
            steps = bench.store.list_step_runs(run_id)
            assert [(s.step, s.state) for s in steps] == [("one", StepState.SUCCEEDED)]
            assert [e.event_type for e in bench.store.list_events(run_id=run_id)][-2:] == [
                "RUN_STATE_CHANGED", "RUN_FINISHED"]
        # A one-step run: its claim and start are one commit, and its end goes with the
        # next write of any worker (on SQLite, several workers' writes share commits).
        assert commits[0] / 121 <= 1.1, commits[0]
