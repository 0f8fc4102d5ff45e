"""The run operations of the service layer on a real home and SQLite store, on a FakeClock:
the actor is recorded, cancel, replay, and what a request that does not fit raises."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.services_home import demo_services

from cadenza.domain.states import RunState
from cadenza.services import Actor, InvalidRequest, NotFound, Refused, Services
from cadenza.services.history import EventQuery, RunQuery


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    with demo_services(tmp_path, Actor.user("bob")) as services:
        yield services


def test_enqueue_records_the_actor_and_the_manual_trigger(services: Services) -> None:
    request = services.runs.request("hello", log_level="debug")
    run_id = services.runs.enqueue(request)
    detail = services.history.get_run(run_id)
    assert (detail.run.state, detail.run.trigger) == (RunState.QUEUED, "manual:bob")
    events = services.history.events(EventQuery(run=run_id))
    assert events and {e.actor for e in events} == {"user:bob"}


def test_a_request_that_does_not_fit_is_refused(services: Services) -> None:
    with pytest.raises(NotFound, match="no job 'nope'; known jobs: sales-load, hello, "
                                       "profile-check"):
        services.runs.enqueue(services.runs.request("nope"))
    with pytest.raises(InvalidRequest, match="expected NAME=VALUE"):
        services.runs.request("hello", params=["novalue"])
    with pytest.raises(InvalidRequest, match="no preset 'nope'"):
        services.runs.enqueue(services.runs.request("sales-load", preset="nope"))
    assert services.history.list_runs(RunQuery()) == []


def test_cancel_a_queued_run_names_the_actor(services: Services) -> None:
    run_id = services.runs.enqueue(services.runs.request("hello"))
    outcome = services.runs.cancel(run_id, wait=True, timeout=5)
    assert outcome.canceled and outcome.ended and outcome.state is RunState.CANCELED
    assert outcome.reason == "canceled by bob"
    again = services.runs.cancel(run_id)
    assert not again.accepted and "CANCELED" in again.message
    with pytest.raises(NotFound):
        services.runs.cancel("no-such-run")


def test_replay_queues_the_same_request_again(services: Services) -> None:
    request = services.runs.request("sales-load", params=["period=2027-01"],
                                    disabled=["tell-downstream"], log_level="DEBUG")
    first = services.runs.enqueue(request)
    second = services.runs.replay(first)
    assert second != first
    a, b = (services.store().get_run(r) for r in (first, second))
    assert a is not None and b is not None
    assert (b.job_id, b.params, b.overrides) == (a.job_id, a.params, a.overrides)
    assert b.state is RunState.QUEUED and b.trigger == "manual:bob"
    with pytest.raises(NotFound):
        services.runs.replay("no-such-run")


def test_resume_refuses_a_run_that_does_not_need_review(services: Services) -> None:
    run_id = services.runs.enqueue(services.runs.request("hello"))
    with pytest.raises(Refused, match="only a NEEDS_REVIEW run can be resumed"):
        services.runs.resume(run_id)


def test_execute_here_reports_progress_and_ends(services: Services) -> None:
    from contextlib import nullcontext

    from cadenza.services.runs import RunResult, StepResult

    seen: list[str] = []

    class Recorder:
        def drawing(self) -> nullcontext[None]:
            return nullcontext()

        def run_started(self, run_id: str, job_id: str, steps: list[tuple[str, str]]) -> None:
            seen.append(f"start {job_id} {[name for name, _ in steps]}")

        def step_started(self, name: str) -> None:
            seen.append(f"step {name}")

        def step_skipped(self, name: str, reason: str) -> None:
            seen.append(f"skip {name}")

        def step_finished(self, name: str, result: StepResult) -> None:
            seen.append(f"end {name} {result.state.value}")

        def run_finished(self, result: RunResult) -> None:
            seen.append(f"run {result.state.value if result.state else None}")

    run_id = services.runs.enqueue(services.runs.request("hello"))
    result = services.runs.execute_here(run_id, Recorder)
    assert result.state is RunState.SUCCEEDED
    assert seen == ["start hello ['count']", "step count", "end count SUCCEEDED",
                    "run SUCCEEDED"]
    lines = services.history.logs(run_id)
    assert lines and lines == list(services.history.follow_logs(run_id))
