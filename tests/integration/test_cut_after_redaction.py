"""Text longer than the store keeps is redacted whole, then cut: whatever the offset at which
the cut falls across a secret, no prefix of it survives (a run log line, a failed step's
error and the run's error, the events that carry them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from executor_home import make_home
from tests.support.store_helpers import append_log, end_run, start_run

from cadenza.audit import Redactor
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.domain.texts import MAX_MESSAGE
from cadenza.executor.request import RunRequest
from cadenza.executor.runner import Executor
from cadenza.home import Home
from cadenza.store import Store

SECRET = "Kq7-Zx91-Lm3P-w8Rt"
#: A prefix of 3 characters or fewer says nothing about a secret (and occurs by chance).
SHORTEST_PREFIX = 4
#: Every position of the cut across the secret: after k of its characters, k = 0 ... len.
CUTS = range(len(SECRET) + 1)


def leaked_prefix(text: str) -> str | None:
    """The longest prefix of SECRET (SHORTEST_PREFIX characters or more) in ``text``."""
    for n in range(len(SECRET), SHORTEST_PREFIX - 1, -1):
        if SECRET[:n] in text:
            return SECRET[:n]
    return None


def across_the_cut(k: int, lead: int = 0) -> str:
    """A text whose cut (at MAX_MESSAGE characters, after ``lead`` characters added before
    it) falls after ``k`` characters of SECRET."""
    start = MAX_MESSAGE - lead - k
    return "x" * (start - 1) + " " + SECRET + " and more " + "y" * 100


def test_the_helper_puts_the_cut_inside_the_secret() -> None:
    for k in CUTS:
        text = across_the_cut(k)
        assert text[:MAX_MESSAGE].endswith(SECRET[:k] if k else " ")
        assert len(text) > MAX_MESSAGE


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.open(f"sqlite:///{tmp_path / 'cut.db'}",
                        clock=FakeClock("2027-03-01T08:00:00+00:00"),
                        redactor=Redactor([SECRET]))
    yield opened  # type: ignore[misc]
    opened.close()


def test_a_log_line_is_redacted_whole_then_cut(store: Store) -> None:
    run_id = store.create_run("leaky", "manual")
    assert run_id
    for k in CUTS:
        append_log(store, run_id, "INFO", across_the_cut(k))
    lines = store.list_logs(run_id)
    assert len(lines) == len(CUTS)
    for k, line in zip(CUTS, lines, strict=True):
        assert leaked_prefix(line.message) is None, (k, line.message[-60:])
        assert line.message.endswith("characters]")
        assert line.message[:MAX_MESSAGE].endswith(
            " " + ("*** and more " + "y" * 100)[:k])  # masked, then cut


def test_a_failed_steps_error_and_the_runs_error_are_redacted_whole_then_cut(
        store: Store) -> None:
    for k in CUTS:
        run_id = store.create_run("leaky", "manual")
        assert run_id
        start_run(store, run_id)
        sid = store._create_step_run(run_id, "call", "http", state=StepState.RUNNING)
        assert store._transition_step_run(sid, StepState.FAILED,
                                         fields={"error": across_the_cut(k)})
        assert end_run(store, run_id, RunState.FAILED, error=across_the_cut(k))
        step = store.list_step_runs(run_id)[0]
        run = store.get_run(run_id)
        assert run is not None and step.error is not None and run.error is not None
        for shown in (step.error, run.error):
            assert leaked_prefix(shown) is None, (k, shown[-60:])
            assert len(shown) < MAX_MESSAGE + 100
        events = store.list_events(run_id=run_id, limit=100)
        assert leaked_prefix(repr(events)) is None, k


JOB = """
[jobs.leaky{k}]
[[jobs.leaky{k}.steps]]
name = "boom"
type = "python"
callable = "cz_exec_tasks:fail"
isolation = "thread"
op_kwargs = {{ message = "{message}" }}
"""


def test_through_the_executor_a_failed_steps_error_keeps_no_prefix(tmp_path: Path) -> None:
    """The real executor and store: a step raises ``ValueError(message)``; its error
    (``ValueError: message``), the run's error, the log and the events are all checked,
    for every position of the cut across the secret (one job per position)."""
    jobs = "".join(JOB.format(k=k, message=across_the_cut(k, lead=len("ValueError: ")))
                   for k in CUTS)
    home = Home(make_home(tmp_path / "home", jobs).resolve())
    home.secrets.set("api_key", SECRET)
    config = home.load_config()
    store = home.open_store(config)
    executor = Executor(store, config)
    try:
        for k in CUTS:
            run_id = executor.enqueue(f"leaky{k}", RunRequest(), trigger="manual:test")
            assert executor.execute(run_id).state is RunState.FAILED
            step = store.list_step_runs(run_id)[0]
            run = store.get_run(run_id)
            assert run is not None and step.error is not None and run.error is not None
            assert step.error.startswith("ValueError: xxx")
            assert step.error[:MAX_MESSAGE].endswith(
                " " + ("*** and more " + "y" * 100)[:k])  # masked, then cut
            seen = repr((step.error, run.error, store.list_logs(run_id),
                         store.list_events(run_id=run_id, limit=100)))
            assert leaked_prefix(seen) is None, (k, step.error[-60:])
    finally:
        executor.close()
        store.close()
