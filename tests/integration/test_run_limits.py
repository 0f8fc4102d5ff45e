"""What one run may store: a step's output and its log lines are capped by
``[limits]`` (step_output_bytes, run_log_lines); real home, SQLite store, python steps in
threads and in child processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from executor_home import Bench, make_home

from cadenza.domain.states import RunState, StepState
from cadenza.executor.runner import Executor
from cadenza.home import Home

TASKS = '''
"""Python steps of the limits tests."""


def big(size=200_000):
    return {"blob": "x" * int(size), "n": 7}


def chatter(ctx, n=500):
    for i in range(int(n)):
        ctx.log.info("line %d", i)
    return {"said": int(n)}
'''


@contextmanager
def limited(root: Path, jobs: str, limits: str) -> Iterator[Bench]:
    """A home with ``jobs`` and ``[limits]`` set to ``limits``, loaded, with an executor."""
    make_home(root, jobs)
    (root / "plugins" / "cz_limits_tasks.py").write_text(TASKS, encoding="utf-8")
    with (root / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write(f"\n[limits]\n{limits}\n")
    home = Home(root.resolve())
    config = home.load_config()
    store = home.open_store(config)
    executor = Executor(store, config)
    try:
        yield Bench(home.path, config, store, executor)
    finally:
        executor.close()
        store.close()


def _big_then_use(isolation: str) -> str:
    return f"""
    [jobs.big]
    [[jobs.big.steps]]
    name = "big"
    type = "python"
    callable = "cz_limits_tasks:big"
    isolation = "{isolation}"
    [[jobs.big.steps]]
    name = "use"
    type = "python"
    callable = "cz_exec_tasks:echo"
    isolation = "thread"
    op_kwargs = {{ n = "${{steps.big.n}}" }}
    """


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_an_output_past_the_cap_is_stored_as_its_size_and_later_steps_say_why(
        tmp_path: Path, isolation: str) -> None:
    with limited(tmp_path / "home", _big_then_use(isolation),
                 "step_output_bytes = 65536") as bench:
        run_id, outcome = bench.run("big")
        steps = {s.step: s for s in bench.store.list_step_runs(run_id)}
        lines = bench.log(run_id)
        with bench.store.engine.connect() as conn:
            stored = conn.execute(sa.text(
                "SELECT output_json FROM step_runs WHERE run_id = :r AND step = 'big'"),
                {"r": run_id}).scalar_one()
            checkpoint = conn.execute(sa.text(
                "SELECT outputs_json FROM checkpoints WHERE run_id = :r"),
                {"r": run_id}).scalar_one_or_none()
    big, use = steps["big"], steps["use"]
    size = len(json.dumps({"blob": "x" * 200_000, "n": 7}))
    summary = {"truncated": True, "size": size, "limit": 65536, "keys": ["blob", "n"]}
    assert big.state is StepState.SUCCEEDED
    assert big.output == summary
    assert len(stored) < 200 and (checkpoint is None or len(checkpoint) < 1000)
    assert outcome.state is RunState.FAILED
    error = use.error or ""
    why = (f"the output of step 'big' was not kept: its JSON is {size:,} bytes, more than "
           "[limits].step_output_bytes (65,536); only its size and keys were stored")
    assert "${steps.big.n}" in error and why in error
    assert ("WARNING", "big", why) in lines


def test_an_output_within_the_cap_is_kept_whole(tmp_path: Path) -> None:
    with limited(tmp_path / "home", _big_then_use("thread").replace(
            'callable = "cz_limits_tasks:big"',
            'callable = "cz_limits_tasks:big"\nop_kwargs = { size = 60000 }'),
            "step_output_bytes = 65536") as bench:
        run_id, outcome = bench.run("big")
        steps = {s.step: s for s in bench.store.list_step_runs(run_id)}
    assert outcome.state is RunState.SUCCEEDED, outcome.error
    assert steps["big"].output == {"blob": "x" * 60000, "n": 7}
    assert steps["use"].output == {"kwargs": {"n": 7}}


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_log_lines_past_the_cap_are_dropped_and_counted_in_one_line(
        tmp_path: Path, isolation: str) -> None:
    jobs = f"""
    [jobs.talk]
    [[jobs.talk.steps]]
    name = "talk"
    type = "python"
    callable = "cz_limits_tasks:chatter"
    isolation = "{isolation}"
    op_kwargs = {{ n = 500 }}
    """
    with limited(tmp_path / "home", jobs, "run_log_lines = 100") as bench:
        run_id, outcome = bench.run("talk")
        lines = bench.log(run_id)
    assert outcome.state is RunState.SUCCEEDED, outcome.error
    said = [message for _, step, message in lines if message.startswith("line ")]
    assert said == [f"line {i}" for i in range(100)]
    assert lines[-1] == ("WARNING", None, "400 more log lines of this run were dropped: a run "
                         "keeps 100 lines of its steps ([limits].run_log_lines)")
    # The executor's own line (the count of dropped lines) is kept past the cap; the
    # step's start and end and the run's end are its events, merged into the log as read.
    events = [line.event for line in bench.store.run_log(run_id) if line.event]
    assert events[-3:] == ["STEP_STARTED", "STEP_SUCCEEDED", "RUN_FINISHED"]
