"""call_job through the executor, on SQLite and PostgreSQL (SPEC §4, docs/call_job.md).

Each run is executed here, in this thread, by a real :class:`Executor` on a real store: the
parent's call_job step starts its child and goes back to QUEUED waiting for it (no worker
held); the child's end, in its own transaction, makes the parent due again; the parent's
next execution finds the child ended and finishes. No clock is waited for.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tests.integration.executor_home import Bench, loaded
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.domain.states import RunState, StepState
from cadenza.executor.request import RunRequest
from cadenza.services import Actor, Services
from cadenza.store.boundary import Boundary, RunEnd
from cadenza.store.children import ChildRecord, ChildRuns
from cadenza.store.stats import run_stats

JOBS = """
[jobs.child]
params = { n = 3 }
max_concurrency = 10
[[jobs.child.steps]]
name = "count"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"

[jobs.failing]
[[jobs.failing.steps]]
name = "boom"
type = "python"
callable = "cz_exec_tasks:fail"
isolation = "thread"
op_kwargs = { message = "the child broke" }

[jobs.parent]
max_concurrency = 10
[[jobs.parent.steps]]
name = "call"
type = "call_job"
job = "child"
params = { n = 7 }
[[jobs.parent.steps]]
name = "after"
type = "python"
callable = "cz_exec_tasks:look_back"
isolation = "thread"
op_kwargs = { step = "call" }

[jobs.parent-fails]
[[jobs.parent-fails.steps]]
name = "call"
type = "call_job"
job = "failing"

[jobs.fire-and-forget]
[[jobs.fire-and-forget.steps]]
name = "call"
type = "call_job"
job = "child"
wait = false
"""


@pytest.fixture
def bench(tmp_path: Path, store_url: str) -> Iterator[Bench]:
    with loaded(tmp_path / "home", JOBS, store_url=store_url) as b:
        yield b


def only_child(bench: Bench, run_id: str) -> ChildRecord:
    children = ChildRuns(bench.store).children(run_id)
    assert len(children) == 1, children
    return children[0]


def alice(bench: Bench) -> Services:
    return Services.at(bench.home, actor=Actor.user("alice"), clock=bench.store.clock)


def test_a_parent_waits_without_a_worker_and_succeeds_with_its_child(bench: Bench) -> None:
    parent_id, first = bench.run("parent")
    # The wait frees the worker: the parent is back in the queue, waiting for its child.
    assert first.state is RunState.QUEUED
    child = only_child(bench, parent_id)
    parent = bench.store.get_run(parent_id)
    assert parent is not None
    assert parent.wait_reason == f"waiting for child run {child.id} (child)"
    assert parent.error is None  # a wait, not a failure
    assert parent.not_before is not None and parent.not_before > bench.store.clock.now()
    record = bench.store.get_run(child.id)
    assert record is not None and record.state is RunState.QUEUED
    assert record.trigger == f"call_job:parent@{parent_id}"
    assert record.params == {"n": 7}
    # The step waits: its one attempt is PENDING with the wait as its reason, not FAILED.
    (waiting,) = [s for s in bench.store.list_step_runs(parent_id) if s.step == "call"]
    assert waiting.state is StepState.PENDING and waiting.attempt == 1
    assert waiting.reason == f"waiting for child run {child.id} (child)"
    assert waiting.error is None and waiting.error_class is None
    assert waiting.finished_at is None

    assert bench.executor.execute(child.id).state is RunState.SUCCEEDED
    woken = bench.store.get_run(parent_id)
    assert woken is not None and woken.not_before is not None
    assert woken.not_before <= bench.store.clock.now()  # due again, by the child's end
    assert woken.wait_reason is None

    done = bench.executor.execute(parent_id)
    assert done.state is RunState.SUCCEEDED and done.rows == 7
    assert only_child(bench, parent_id).id == child.id  # the resumed parent made no second
    steps = bench.store.list_step_runs(parent_id)
    call = [s for s in steps if s.step == "call"]
    # One attempt that waited, then went on: the same row, SUCCEEDED.
    assert [(s.id, s.state, s.attempt) for s in call] == [
        (waiting.id, StepState.SUCCEEDED, 1)]
    assert call[0].error is None and call[0].error_class is None and call[0].reason is None
    assert call[0].finished_at is not None
    assert call[-1].output == {"child_run_id": child.id, "job": "child",
                               "state": "SUCCEEDED", "rows": 7}
    assert call[-1].rows == 7
    after = next(s for s in steps if s.step == "after")
    assert after.output is not None and after.output["seen"]["output"]["state"] == "SUCCEEDED"
    lines = [m for _, step, m in bench.log(parent_id) if step == "call"]
    assert f"started child run {child.id} of job child" in lines
    assert f"waiting for child run {child.id} (child)" in lines
    # The wait is neither an error nor a retry in the statistics.
    numbers = run_stats(bench.store, bench.store.clock.now() - timedelta(days=1))
    assert numbers.errors_by_class == {} and numbers.retried_attempts == 0
    events = [e.event_type for e in bench.store.list_events(run_id=parent_id)]
    assert "STEP_FAILED" not in events and "RETRY_SCHEDULED" not in events


def test_a_failed_child_fails_the_parent(bench: Bench) -> None:
    parent_id, _ = bench.run("parent-fails")
    child = only_child(bench, parent_id)
    assert bench.executor.execute(child.id).state is RunState.FAILED
    done = bench.executor.execute(parent_id)
    assert done.state is RunState.FAILED
    assert done.error is not None
    assert f"child run {child.id} of job failing ended FAILED" in done.error
    assert "the child broke" in done.error


def test_a_canceled_child_cancels_the_parent(bench: Bench) -> None:
    parent_id, _ = bench.run("parent")
    child = only_child(bench, parent_id)
    with alice(bench) as services:
        assert services.runs.cancel(child.id).canceled  # QUEUED: canceled at once
    woken = bench.store.get_run(parent_id)
    assert woken is not None and woken.not_before is not None
    assert woken.not_before <= bench.store.clock.now()
    done = bench.executor.execute(parent_id)
    assert done.state is RunState.CANCELED
    parent = bench.store.get_run(parent_id)
    assert parent is not None and parent.reason == f"canceled by child run {child.id}"
    steps = {s.step: s.state for s in bench.store.list_step_runs(parent_id)}
    assert steps == {"call": StepState.CANCELED, "after": StepState.SKIPPED}


def test_canceling_a_waiting_parent_cancels_its_child(bench: Bench) -> None:
    parent_id, _ = bench.run("parent")
    child = only_child(bench, parent_id)
    with alice(bench) as services:
        outcome = services.runs.cancel(parent_id)
    assert outcome.canceled and outcome.state is RunState.CANCELED
    (call,) = bench.store.list_step_runs(parent_id)  # its attempt that waited ends with it
    assert call.state is StepState.CANCELED and call.reason == "canceled by alice"
    assert call.finished_at is not None
    after = bench.store.get_run(child.id)
    assert after is not None and after.state is RunState.CANCELED
    assert after.reason == f"canceled by parent run {parent_id} (canceled by alice)"


def test_the_child_inherits_debug_and_a_wait_false_call_moves_on(bench: Bench) -> None:
    parent_id, _ = bench.run("parent", RunRequest(log_level="DEBUG"))
    child = bench.store.get_run(only_child(bench, parent_id).id)
    assert child is not None and child.overrides["log_level"] == "DEBUG"

    quick_id, quick = bench.run("fire-and-forget")
    assert quick.state is RunState.SUCCEEDED
    kid = only_child(bench, quick_id)
    assert kid.state is RunState.QUEUED
    call = bench.store.list_step_runs(quick_id)[0]
    assert call.output == {"child_run_id": kid.id, "job": "child", "state": "QUEUED",
                           "rows": None}


def test_a_call_back_into_a_calling_job_is_refused_at_run_time(bench: Bench) -> None:
    # jobs.toml has no cycle (validation refuses those), but a run keeps the preset values
    # it was created with (here: one making the call go back to its own job) while jobs.toml
    # changes under it.
    parent_id = bench.store.create_run("parent", "manual", overrides={
        "preset": None, "params": {}, "step_args": {"call": {"job": "parent"}},
        "disabled_steps": [], "log_level": None})
    assert parent_id is not None
    done = bench.executor.execute(parent_id)
    assert done.state is RunState.FAILED
    assert done.error is not None
    assert f"call_job cycle: parent (run {parent_id}) → parent" in done.error
    assert ChildRuns(bench.store).children(parent_id) == []


def test_a_child_that_ended_before_its_parent_deferred_still_wakes_it(bench: Bench) -> None:
    """The lost wake-up race: the child ends while the parent is still RUNNING (between
    its look at the child and its own deferral); the parent's deferral, in its own
    transaction, sees the ended child and makes itself due now."""
    store = bench.store
    parent_id, _ = bench.run("parent")
    child = only_child(bench, parent_id)
    assert bench.executor.execute(child.id).state is RunState.SUCCEEDED
    # Take the parent as a worker would (the child's end made it due), and defer it again
    # as the step does.
    claimed = store.claim_runs("test", store.clock.now() + timedelta(minutes=1),
                               run_ids=[parent_id], limit=1)
    assert [r.id for r in claimed] == [parent_id]
    far = store.clock.now() + timedelta(hours=1)
    reason = f"waiting for child run {child.id} (child)"
    result = store.record_boundaries([Boundary(parent_id, claimed[0].lease_epoch, run_end=RunEnd(
        RunState.QUEUED, 0, not_before=far, wait_reason=reason))])[0]
    assert result.applied
    parent = store.get_run(parent_id)
    # Woken in the deferral's own transaction: due now, the wait reason cleared.
    assert parent is not None and parent.wait_reason is None
    assert parent.not_before is not None and parent.not_before <= store.clock.now()


def test_runs_show_names_the_parent_and_the_children(bench: Bench) -> None:
    parent_id, _ = bench.run("parent")
    child = only_child(bench, parent_id)
    bench.executor.execute(child.id)
    bench.executor.execute(parent_id)
    runner = CliRunner()
    shown = runner.invoke(app, ["--home", str(bench.home), "runs", "show", parent_id])
    assert shown.exit_code == 0, shown.output
    assert "children:" in shown.output and child.id in shown.output
    document = json.loads(runner.invoke(
        app, ["--home", str(bench.home), "runs", "show", parent_id, "--json"]).output)
    assert [(c["id"], c["job"], c["step"], c["state"], c["rows"])
            for c in document["children"]] == [(child.id, "child", "call", "SUCCEEDED", 7)]
    assert document["parent"] is None
    kid = runner.invoke(app, ["--home", str(bench.home), "runs", "show", child.id])
    assert kid.exit_code == 0, kid.output
    assert f"parent: run {parent_id} (job parent, step call, SUCCEEDED)" in kid.output
    assert f"trigger: call_job:parent@{parent_id}" in kid.output


def test_cadenza_validate_refuses_a_cycle_through_a_preset(tmp_path: Path) -> None:
    home = tmp_path / "home"
    runner = CliRunner()
    assert runner.invoke(app, ["init", str(home)]).exit_code == 0
    (home / "jobs.toml").write_text(textwrap.dedent("""\
        [jobs.nightly]
        [[jobs.nightly.steps]]
        name = "call"
        type = "call_job"
        job = "export"
        preset = "back"

        [jobs.export]
        [[jobs.export.steps]]
        name = "next"
        type = "call_job"
        job = "leaf"

        [jobs.export.presets.back]
        step_args = { next = { job = "nightly" } }

        [jobs.leaf]
        [[jobs.leaf.steps]]
        name = "x"
        type = "python"
        callable = "json:dumps"
        """), encoding="utf-8")
    result = runner.invoke(app, ["--home", str(home), "validate"])
    assert result.exit_code == 1, result.output
    assert ("jobs.toml:15:30: error: jobs.export.presets.back.step_args.next.job: call_job "
            "cycle: nightly → export (preset back) → nightly; cycles are refused"
            ) in result.output


def test_cadenza_run_local_runs_the_child_in_the_foreground(bench: Bench) -> None:
    result = CliRunner().invoke(app, ["--home", str(bench.home), "run", "parent", "--local",
                                      "--json"])
    assert result.exit_code == 0, result.output
    parents = bench.store.list_runs(job="parent")
    assert [r.state for r in parents] == [RunState.SUCCEEDED]
    child = only_child(bench, parents[0].id)
    assert (child.state, child.rows) == (RunState.SUCCEEDED, 7)
    assert parents[0].rows == 7


def test_cli_runs_cancel_of_a_waiting_parent_cancels_its_child(bench: Bench) -> None:
    """The CLI opens its own store; its hooks are the server's (cadenza.assembly), so the
    cancel's own transaction cancels the child (no hand-written follow-up)."""
    parent_id, _ = bench.run("parent")
    child = only_child(bench, parent_id)
    assert child.state is RunState.QUEUED
    result = CliRunner().invoke(app, ["--home", str(bench.home), "runs", "cancel", parent_id])
    assert result.exit_code == 0, result.output
    parent = bench.store.get_run(parent_id)
    assert parent is not None and parent.state is RunState.CANCELED
    after = bench.store.get_run(child.id)
    assert after is not None and after.state is RunState.CANCELED
    assert after.reason is not None and f"canceled by parent run {parent_id}" in after.reason
    (finished,) = bench.store.list_events(run_id=child.id, event_type="RUN_FINISHED")
    assert finished.payload["state"] == "CANCELED"
