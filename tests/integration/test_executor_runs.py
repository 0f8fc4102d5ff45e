"""Runs executed end to end on a real home: SQLite store, python steps from plugins/, real
child processes (SPEC §4, §5, §7)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa
from executor_home import Bench, gone, loaded

from cadenza.domain.states import RunState, StepState
from cadenza.executor.request import RunRequest
from cadenza.store.boundary import NewRun

THREE = """
[jobs.three]
[[jobs.three.steps]]
name = "first"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
op_kwargs = { n = 2 }
[[jobs.three.steps]]
name = "second"
type = "python"
callable = "cz_exec_tasks:fail"
isolation = "thread"
op_kwargs = { message = "the second step broke" }
[[jobs.three.steps]]
name = "third"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
op_kwargs = { n = 5 }
"""


@pytest.fixture
def three(tmp_path: Path) -> Bench:
    with loaded(tmp_path / "home", THREE) as bench:
        yield bench  # type: ignore[misc]


def test_second_of_three_fails_the_run_and_skips_the_third(three: Bench) -> None:
    run_id, outcome = three.run("three")
    assert outcome.state is RunState.FAILED
    run = three.store.get_run(run_id)
    assert run is not None and run.state is RunState.FAILED
    assert run.error == "step 'second' failed: ValueError: the second step broke"
    steps = three.store.list_step_runs(run_id)
    assert [(s.step, s.state, s.reason) for s in steps] == [
        ("first", StepState.SUCCEEDED, None),
        ("second", StepState.FAILED, None),
        ("third", StepState.SKIPPED, "earlier step failed"),
    ]
    assert steps[1].error == "ValueError: the second step broke"
    assert steps[1].error_class == "fatal"
    assert steps[0].rows == 2 and run.rows == 2
    assert run.lease_owner is None and run.finished_at is not None


def test_disabling_the_failing_step_lets_the_run_succeed(three: Bench) -> None:
    run_id, outcome = three.run("three", RunRequest(disabled_steps=["second"]))
    assert outcome.state is RunState.SUCCEEDED
    steps = three.store.list_step_runs(run_id)
    assert [(s.step, s.state, s.reason) for s in steps] == [
        ("first", StepState.SUCCEEDED, None),
        ("second", StepState.SKIPPED, "disabled"),
        ("third", StepState.SUCCEEDED, None),
    ]
    run = three.store.get_run(run_id)
    assert run is not None and run.rows == 7  # the sum of the steps' rows


def test_a_step_disabled_in_jobs_toml_is_skipped_and_the_run_goes_on(tmp_path: Path) -> None:
    jobs = THREE.replace('callable = "cz_exec_tasks:fail"',
                         'callable = "cz_exec_tasks:fail"\nenabled = false')
    with loaded(tmp_path / "home", jobs) as bench:
        run_id, outcome = bench.run("three")
        assert outcome.state is RunState.SUCCEEDED
        assert bench.store.list_step_runs(run_id)[1].reason == "disabled"


def test_commits_per_run_are_one_per_step_boundary(three: Bench) -> None:
    commits = three.count_commits()
    run_id, outcome = three.run("three", RunRequest(disabled_steps=["second"]))
    assert outcome.state is RunState.SUCCEEDED
    # create; claim + params + first start; end first + skip second + start third; end third
    # + run end. Every step run, event and log line rides along with those.
    assert commits[0] == 4
    events = three.store.list_events(run_id=run_id)
    assert [e.event_type for e in events] == [
        "RUN_CREATED", "STEP_STARTED", "STEP_SUCCEEDED", "STEP_STATE_CHANGED", "STEP_STARTED",
        "STEP_SUCCEEDED", "RUN_FINISHED",
    ]


def test_a_run_is_claimed_once(three: Bench) -> None:
    run_id, first = three.run("three", RunRequest(disabled_steps=["second"]))
    assert first.state is RunState.SUCCEEDED
    again = three.executor.execute(run_id)
    assert not again.claimed and again.state is RunState.SUCCEEDED
    assert len(three.store.list_step_runs(run_id)) == 3


PRECEDENCE = """
[jobs.params]
params = { a = "job", b = "job", c = "job", day = "${today}" }
[jobs.params.presets.p]
params = { b = "preset", c = "preset" }
step_args = { show = { y = "preset-arg" } }
[[jobs.params.steps]]
name = "show"
type = "python"
callable = "cz_exec_tasks:echo"
isolation = "thread"
op_kwargs = { a = "op", x = "op", y = "op", z = "op", from_param = "${params.c}" }
"""


def test_precedence_end_to_end(tmp_path: Path) -> None:
    with loaded(tmp_path / "home", PRECEDENCE) as bench:
        request = RunRequest(params={"c": "cli"}, preset="p",
                             step_args={"show": {"z": "cli-arg"}})
        run_id, outcome = bench.run("params", request)
        assert outcome.state is RunState.SUCCEEDED, outcome.error
        kwargs = bench.store.list_step_runs(run_id)[0].output["kwargs"]
        run = bench.store.get_run(run_id)
        assert run is not None
        # job params < preset < -p
        assert run.params["a"] == "job" and run.params["b"] == "preset"
        assert run.params["c"] == "cli"
        assert run.params["day"] == run.scheduled_for.date().isoformat()  # type: ignore[union-attr]
        # shared params < op_kwargs < preset step args < --arg
        assert kwargs["a"] == "op" and kwargs["b"] == "preset" and kwargs["c"] == "cli"
        assert kwargs["x"] == "op" and kwargs["y"] == "preset-arg" and kwargs["z"] == "cli-arg"
        assert kwargs["from_param"] == "cli"


def test_step_outputs_feed_later_steps(tmp_path: Path) -> None:
    jobs = """
    [jobs.chain]
    [[jobs.chain.steps]]
    name = "count"
    type = "python"
    callable = "cz_exec_tasks:count"
    isolation = "thread"
    op_kwargs = { n = 4 }
    [[jobs.chain.steps]]
    name = "use"
    type = "python"
    callable = "cz_exec_tasks:echo"
    isolation = "thread"
    op_kwargs = { rows = "${steps.count.rows}", text = "got ${steps.count.rows} rows" }
    [[jobs.chain.steps]]
    name = "back"
    type = "python"
    callable = "cz_exec_tasks:look_back"
    isolation = "thread"
    op_kwargs = { step = "use" }
    """
    with loaded(tmp_path / "home", jobs) as bench:
        run_id, outcome = bench.run("chain")
        assert outcome.state is RunState.SUCCEEDED, outcome.error
        steps = bench.store.list_step_runs(run_id)
        assert steps[1].output["kwargs"] == {"rows": 4, "text": "got 4 rows"}
        assert steps[2].output["seen"]["state"] == "SUCCEEDED"
        assert steps[2].output["seen"]["output"]["kwargs"]["rows"] == 4


def _levels_job(level: str, isolation: str = "thread") -> str:
    return f"""
    [jobs.levels]
    log_level = "{level}"
    [[jobs.levels.steps]]
    name = "talk"
    type = "python"
    callable = "cz_exec_tasks:chatty"
    isolation = "{isolation}"
    [[jobs.levels.steps]]
    name = "sql"
    type = "python"
    callable = "cz_exec_tasks:write_sql"
    isolation = "thread"
    op_kwargs = {{ value = 7 }}
    """


@pytest.mark.parametrize("level", ["DEBUG", "INFO", "WARNING"])
def test_log_levels(tmp_path: Path, level: str) -> None:
    with loaded(tmp_path / "home", _levels_job(level)) as bench:
        run_id, outcome = bench.run("levels")
        assert outcome.state is RunState.SUCCEEDED, outcome.error
        lines = bench.log(run_id)
    levels = {lvl for lvl, _, _ in lines}
    messages = [message for _, _, message in lines]
    sql = [m for m in messages if m.startswith("SQL")]
    assert "a warning line" in messages and "an error line" in messages
    if level == "WARNING":
        assert levels <= {"WARNING", "ERROR"}
        assert "an info line 2" not in messages
    if level == "INFO":
        assert "an info line 2" in messages and "a debug line 1" not in messages
        assert "DEBUG" not in levels and not sql
    if level == "DEBUG":
        assert "a debug line 1" in messages
        assert any("INSERT INTO t (v) VALUES (?)" in m and "(7,)" in m for m in sql)
        assert any(m.startswith("config: ") for m in messages)


def test_log_lines_of_a_process_isolated_step_reach_the_run_log(tmp_path: Path) -> None:
    with loaded(tmp_path / "home", _levels_job("INFO", "process")) as bench:
        run_id, outcome = bench.run("levels")
        assert outcome.state is RunState.SUCCEEDED, outcome.error
        talk = bench.store.list_step_runs(run_id)[0]
        assert talk.output["pid"] != __import__("os").getpid()  # it ran in a child
        lines = [(lvl, step, msg) for lvl, step, msg in bench.log(run_id) if step == "talk"]
    assert ("INFO", "talk", "an info line 2") in lines
    assert ("WARNING", "talk", "a warning line") in lines
    assert ("ERROR", "talk", "an error line") in lines


def _sleeper(tmp_path: Path, isolation: str) -> str:
    pid_file = (tmp_path / "pids.json").as_posix()
    return f"""
    [jobs.slow]
    [[jobs.slow.steps]]
    name = "nap"
    type = "python"
    callable = "cz_exec_tasks:sleep"
    isolation = "{isolation}"
    timeout = "2s"
    op_kwargs = {{ seconds = 600, pid_file = "{pid_file}", grandchild = true }}
    [[jobs.slow.steps]]
    name = "after"
    type = "python"
    callable = "cz_exec_tasks:count"
    isolation = "thread"
    """


def test_a_process_step_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    with loaded(tmp_path / "home", _sleeper(tmp_path, "process")) as bench:
        started = time.monotonic()
        run_id, outcome = bench.run("slow")
        elapsed = time.monotonic() - started
        assert outcome.state is RunState.QUEUED  # a step timeout is retried (SPEC §7)
        assert elapsed < 4.0, f"the run took {elapsed:.1f}s"
        pids = json.loads((tmp_path / "pids.json").read_text())
        assert len(pids) == 2
        assert all(gone(pid) for pid in pids), [psutil.Process(p).status() for p in pids]
        nap, *after = bench.store.list_step_runs(run_id)
        assert nap.state is StepState.FAILED and nap.error_class == "retryable"
        assert nap.error is not None and "timed out after 2s" in nap.error
        assert after == []  # the next step waits for the retry of this one
        assert "step 'nap' failed" in (outcome.error or "")


def test_a_thread_step_past_its_timeout_is_abandoned_at_the_deadline(tmp_path: Path) -> None:
    jobs = _sleeper(tmp_path, "thread").replace("grandchild = true", "grandchild = false")
    with loaded(tmp_path / "home", jobs) as bench:
        started = time.monotonic()
        run_id, outcome = bench.run("slow")
        assert time.monotonic() - started < 4.0
        assert outcome.state is RunState.QUEUED  # a step timeout is retried (SPEC §7)
        nap = bench.store.list_step_runs(run_id)[0]
        assert nap.error is not None and "cannot be stopped" in nap.error


@pytest.mark.parametrize(("function", "expected"), [
    ("not_json", "not JSON-able"),
    ("text", "returned str; expected None, an int (rows) or a JSON-able dict"),
    ("exit_now", "SystemExit: 3"),
])
@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_bad_returns_are_clear_fatal_failures(tmp_path: Path, function: str, expected: str,
                                              isolation: str) -> None:
    jobs = f"""
    [jobs.bad]
    [[jobs.bad.steps]]
    name = "bad"
    type = "python"
    callable = "cz_exec_tasks:{function}"
    isolation = "{isolation}"
    """
    with loaded(tmp_path / "home", jobs) as bench:
        run_id, outcome = bench.run("bad")
        step = bench.store.list_step_runs(run_id)[0]
    assert outcome.state is RunState.FAILED
    assert step.error is not None and expected in step.error, step.error
    assert step.error_class == "fatal"


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_error_classes_survive_the_child_process(tmp_path: Path, isolation: str) -> None:
    jobs = f"""
    [jobs.busy]
    [[jobs.busy.steps]]
    name = "call"
    type = "python"
    callable = "cz_exec_tasks:retry_later"
    isolation = "{isolation}"
    """
    with loaded(tmp_path / "home", jobs) as bench:
        run_id, outcome = bench.run("busy")
        step = bench.store.list_step_runs(run_id)[0]
    assert step.error == "Retryable: the service is busy"
    assert step.error_class == "retryable"
    assert outcome.state is RunState.QUEUED  # retryable: tried again after the backoff


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_ctx_connection_commits_on_success_and_rolls_back_on_failure(
    tmp_path: Path, isolation: str
) -> None:
    jobs = f"""
    [jobs.db]
    [[jobs.db.steps]]
    name = "ok"
    type = "python"
    callable = "cz_exec_tasks:write_sql"
    isolation = "{isolation}"
    op_kwargs = {{ value = 1 }}
    [[jobs.db.steps]]
    name = "broken"
    type = "python"
    callable = "cz_exec_tasks:write_sql"
    isolation = "{isolation}"
    op_kwargs = {{ value = 2, then_fail = true }}
    """
    with loaded(tmp_path / "home", jobs) as bench:
        _, outcome = bench.run("db")
        assert outcome.state is RunState.FAILED
        engine = sa.create_engine(f"sqlite:///{(bench.home / 'data' / 'wh.db').as_posix()}")
        with engine.connect() as conn:
            values = [row[0] for row in conn.exec_driver_sql("SELECT v FROM t")]
        engine.dispose()
    assert values == [1]


def test_step_events_are_recorded_with_the_step(tmp_path: Path) -> None:
    jobs = """
    [jobs.ev]
    [[jobs.ev.steps]]
    name = "call"
    type = "python"
    callable = "cz_exec_tasks:audit"
    """
    with loaded(tmp_path / "home", jobs) as bench:
        run_id, outcome = bench.run("ev")
        assert outcome.state is RunState.SUCCEEDED, outcome.error
        http = bench.store.list_events(run_id=run_id, event_type="HTTP_REQUEST")
    assert len(http) == 1 and http[0].payload == {"status": 200}


def test_an_unknown_token_fails_the_step_naming_it(tmp_path: Path) -> None:
    jobs = """
    [jobs.tok]
    [[jobs.tok.steps]]
    name = "first"
    type = "python"
    callable = "cz_exec_tasks:count"
    isolation = "thread"
    enabled = false
    [[jobs.tok.steps]]
    name = "uses"
    type = "python"
    callable = "cz_exec_tasks:echo"
    isolation = "thread"
    op_kwargs = { n = "${steps.first.rows}" }
    """
    with loaded(tmp_path / "home", jobs) as bench:
        run_id, outcome = bench.run("tok")
        step = bench.store.list_step_runs(run_id)[1]
    assert outcome.state is RunState.FAILED
    assert step.error is not None
    assert "step 'uses'" in step.error and "${steps.first.rows}" in step.error


def test_a_step_type_without_run_fails_clearly(tmp_path: Path) -> None:
    from cadenza.executor.runner import Executor
    from cadenza.steps.builtin.python import PythonConfig
    from cadenza.steps.registry import StepType

    class ConfigOnly(StepType):
        name = "python"
        Config = PythonConfig

    with loaded(tmp_path / "home", THREE) as bench:
        executor = Executor(bench.store, bench.config, step_types={"python": ConfigOnly})
        run_id = executor.enqueue("three", RunRequest(), trigger="manual:test")
        outcome = executor.execute(run_id)
        executor.close()
        first = bench.store.list_step_runs(run_id)[0]
    assert outcome.state is RunState.FAILED
    assert first.error == "Fatal: step type 'python' cannot run in this version"
    assert first.error_class == "fatal"


def test_a_run_whose_lease_moved_on_stops_writing(tmp_path: Path) -> None:
    db = (tmp_path / "home" / "data" / "cadenza.db").as_posix()
    jobs = f"""
    [jobs.taken]
    [[jobs.taken.steps]]
    name = "steal"
    type = "python"
    callable = "cz_exec_tasks:steal"
    isolation = "thread"
    op_kwargs = {{ db = "{db}" }}
    [[jobs.taken.steps]]
    name = "never"
    type = "python"
    callable = "cz_exec_tasks:count"
    isolation = "thread"
    """
    with loaded(tmp_path / "home", jobs) as bench:
        run_id, outcome = bench.run("taken")
        assert outcome.state is None and "lease was lost" in (outcome.error or "")
        run = bench.store.get_run(run_id)
        steps = bench.store.list_step_runs(run_id)
    assert run is not None and run.state is RunState.RUNNING  # the new holder's to finish
    assert [(s.step, s.state) for s in steps] == [("steal", StepState.RUNNING)]


def test_a_job_gone_from_the_config_fails_its_run(tmp_path: Path) -> None:
    with loaded(tmp_path / "home", THREE) as bench:
        run_id = bench.store.create_runs([NewRun("vanished", "manual:test")])[0]
        outcome = bench.executor.execute(run_id)
        run = bench.store.get_run(run_id)
    assert outcome.state is RunState.FAILED
    assert run is not None and run.error == "job 'vanished' is not in jobs.toml any more"
