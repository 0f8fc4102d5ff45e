"""Retries, deferrals, NEEDS_REVIEW and resume/abandon, executed for real (SPEC §7): a real
home, a real store (SQLite file, and PostgreSQL where marked), python steps from plugins/, a
real local HTTP server; time is a FakeClock (nothing sleeps for a backoff)."""

from __future__ import annotations

import json
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.executor.request import RunRequest
from cadenza.executor.runner import Executor
from cadenza.executor.tracking import RunOutcome
from cadenza.home import Home
from cadenza.store import Store
from cadenza.store.tables import checkpoints

TASKS = '''
"""Python steps of the retry tests (the same text in every test home)."""

from pathlib import Path

import cadenza


def flaky(counter, failures=2, value=1):
    """Raise Retryable for the first ``failures`` calls (counted in the file ``counter``)."""
    path = Path(counter)
    calls = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(calls))
    if calls <= int(failures):
        raise cadenza.Retryable(f"busy (call {calls})")
    return {"value": value, "calls": calls}


def always_busy():
    raise cadenza.Retryable("the service is busy")


def bad_input():
    raise ValueError("no such period")


def produce(counter):
    path = Path(counter)
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    return {"value": 7}


def wait_here(flag, seconds=10):
    """Write ``flag``, then wait (a step that runs until it is stopped)."""
    import time

    Path(flag).write_text("started")
    time.sleep(float(seconds))
    return 1


def consume(seen, counter):
    path = Path(counter)
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    return {"seen": seen}
'''

SETTINGS = """\
[store]
url = "{url}"
{extra}
"""

runner = CliRunner()


@dataclass
class Bench:
    home: Path
    store: Store
    executor: Executor
    clock: FakeClock

    def enqueue(self, job: str) -> str:
        return self.executor.enqueue(job, RunRequest(), trigger="manual:test")

    def execute(self, run_id: str) -> RunOutcome:
        return self.executor.execute(run_id)

    def steps(self, run_id: str) -> list[tuple[str, int, StepState, str | None]]:
        return [(s.step, s.attempt, s.state, s.error_class)
                for s in self.store.list_step_runs(run_id)]

    def events(self, run_id: str, kind: str) -> list[Any]:
        return [e for e in self.store.list_events(run_id=run_id) if e.event_type == kind]

    def cli(self, *args: str) -> Any:
        return runner.invoke(app, ["--home", str(self.home), *args])


@contextmanager
def bench(root: Path, jobs: str, *, store_url: str | None = None, extra: str = "",
          start: datetime | None = None) -> Iterator[Bench]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugins").mkdir(exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "plugins" / "cz_retry_tasks.py").write_text(TASKS, encoding="utf-8")
    url = store_url or "sqlite:///data/cadenza.db"
    (root / "cadenza.toml").write_text(SETTINGS.format(url=url, extra=extra), encoding="utf-8")
    (root / "jobs.toml").write_text(textwrap.dedent(jobs), encoding="utf-8")
    home = Home(root.resolve())
    config = home.load_config()
    clock = FakeClock(start or "2027-03-01T10:00:00+00:00")
    store = home.open_store(config, clock=clock)
    executor = Executor(store, config)
    try:
        yield Bench(home.path, store, executor, clock)
    finally:
        executor.close()
        store.close()


def python_job(name: str, steps: list[tuple[str, str, dict[str, Any]]], retry: str) -> str:
    text = f"[jobs.{name}]\n[jobs.{name}.retry]\n{retry}\n"
    for step, function, kwargs in steps:
        text += (f'[[jobs.{name}.steps]]\nname = "{step}"\ntype = "python"\n'
                 f'callable = "cz_retry_tasks:{function}"\nisolation = "thread"\n'
                 f"op_kwargs = {json.dumps(kwargs)}\n")
    return text.replace('": ', '" = ')


EXPONENTIAL = "attempts = 3\nbackoff = \"exponential\"\nbase_seconds = 10\nmax_seconds = 100\n" \
              "jitter = 0"


def test_retryable_twice_then_succeeds_with_the_policys_backoff(tmp_path: Path,
                                                                 store_url: str) -> None:
    counter = (tmp_path / "calls").as_posix()
    jobs = python_job("flaky", [("call", "flaky", {"counter": counter})], EXPONENTIAL)
    with bench(tmp_path / "home", jobs, store_url=store_url) as b:
        run_id = b.enqueue("flaky")
        first = b.execute(run_id)
        assert first.state is RunState.QUEUED
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.QUEUED
        assert run.not_before == b.clock.now() + timedelta(seconds=10)
        assert run.lease_owner is None and run.lease_until is None and run.attempt == 1
        assert run.wait_reason is not None and run.wait_reason.startswith(
            "retry 2/3 after Retryable: busy (call 1) at 10:00:10")
        assert run.finished_at is None
        # Not before its time: the claim does not take it (and the worker never slept).
        assert b.execute(run_id).claimed is False
        b.clock.advance(10)
        assert b.execute(run_id).state is RunState.QUEUED
        run = b.store.get_run(run_id)
        assert run is not None and run.not_before == b.clock.now() + timedelta(seconds=20)
        b.clock.advance(20)
        done = b.execute(run_id)
        assert done.state is RunState.SUCCEEDED
        assert b.steps(run_id) == [
            ("call", 1, StepState.FAILED, "retryable"),
            ("call", 2, StepState.FAILED, "retryable"),
            ("call", 3, StepState.SUCCEEDED, None),
        ]
        scheduled = b.events(run_id, "RETRY_SCHEDULED")
        assert [(e.payload["class"], e.payload["error_type"], e.payload["attempt"],
                 e.payload["attempts"], e.payload["delay_s"]) for e in scheduled] == [
            ("retryable", "Retryable", 1, 3, 10), ("retryable", "Retryable", 2, 3, 20)]
        start = datetime(2027, 3, 1, 10, 0, tzinfo=UTC)
        assert [datetime.fromisoformat(e.payload["next_try"]) for e in scheduled] == [
            start + timedelta(seconds=10), start + timedelta(seconds=30)]
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.SUCCEEDED and run.error is None


def test_always_retryable_needs_review_then_resume_and_abandon(tmp_path: Path) -> None:
    jobs = python_job("busy", [("call", "always_busy", {})], EXPONENTIAL)
    # The CLI's resume stamps the real time (a fresh run timeout): start the fake clock there.
    with bench(tmp_path / "home", jobs, start=datetime.now(UTC)) as b:
        run_id = b.enqueue("busy")
        assert b.execute(run_id).state is RunState.QUEUED
        b.clock.advance(10)
        assert b.execute(run_id).state is RunState.QUEUED
        b.clock.advance(20)
        outcome = b.execute(run_id)
        assert outcome.state is RunState.NEEDS_REVIEW
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.NEEDS_REVIEW and run.attempt == 3
        assert run.reason == "retry attempts exhausted (3/3)"
        assert run.error == "step 'call' failed: Retryable: the service is busy"
        assert run.lease_owner is None and run.finished_at is None
        assert [s[1] for s in b.steps(run_id)] == [1, 2, 3]

        resumed = b.cli("runs", "resume", run_id, "--json")
        assert resumed.exit_code == 0, resumed.output
        document = json.loads(resumed.stdout)
        assert document["state"] == "QUEUED" and document["resumes"] == 1
        run = b.store.get_run(run_id)
        assert run is not None and run.attempt == 0 and run.resumes == 1
        [change] = [e for e in b.events(run_id, "RUN_STATE_CHANGED")
                    if e.payload["to"] == "QUEUED" and e.payload["from"] == "NEEDS_REVIEW"]
        assert change.actor != "system" and change.message.endswith(f"resumed by {change.actor}")
        # It runs again, from its checkpoint, with fresh attempts.
        assert b.execute(run_id).state is RunState.QUEUED
        assert [s[1] for s in b.steps(run_id)] == [1, 2, 3, 4]
        b.clock.advance(10)
        b.execute(run_id)
        b.clock.advance(20)
        assert b.execute(run_id).state is RunState.NEEDS_REVIEW

        abandoned = b.cli("runs", "abandon", run_id)
        assert abandoned.exit_code == 0, abandoned.output
        assert "abandoned by" in abandoned.stdout
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.FAILED and run.finished_at is not None
        assert run.reason is not None and run.reason.startswith("abandoned by ")

        again = b.cli("runs", "resume", run_id)
        assert again.exit_code == 1
        assert f"run {run_id} is FAILED: only a NEEDS_REVIEW run can be resumed" in again.output
        missing = b.cli("runs", "abandon", "nope")
        assert missing.exit_code == 1 and "no run 'nope'" in missing.output


def test_an_abandoned_run_records_the_steps_after_the_failed_one_skipped(
    tmp_path: Path, store_url: str
) -> None:
    """SPEC §7: a failed step stops the job and the steps after it are recorded SKIPPED,
    as the fatal path does (below); abandoning a NEEDS_REVIEW run is such an end."""
    jobs = python_job("busy", [("first", "produce", {"counter": (tmp_path / "a").as_posix()}),
                               ("call", "always_busy", {}), ("after", "always_busy", {}),
                               ("tail", "always_busy", {})], EXPONENTIAL)
    with bench(tmp_path / "home", jobs, store_url=store_url) as b:
        run_id = b.enqueue("busy")
        assert b.execute(run_id).state is RunState.QUEUED
        b.clock.advance(10)
        assert b.execute(run_id).state is RunState.QUEUED
        b.clock.advance(20)
        assert b.execute(run_id).state is RunState.NEEDS_REVIEW
        before = b.steps(run_id)
        assert [(s[0], s[2]) for s in before] == [
            ("first", StepState.SUCCEEDED), ("call", StepState.FAILED),
            ("call", StepState.FAILED), ("call", StepState.FAILED)]

        abandoned = b.cli("runs", "abandon", run_id)
        assert abandoned.exit_code == 0, abandoned.output
        steps = b.store.list_step_runs(run_id)
        assert [(s.step, s.attempt, s.state, s.reason) for s in steps[len(before):]] == [
            ("after", 1, StepState.SKIPPED, "earlier step failed"),
            ("tail", 1, StepState.SKIPPED, "earlier step failed")]
        assert all(s.finished_at is not None and s.started_at is None
                   for s in steps[len(before):])
        events = b.store.list_events(run_id=run_id)
        tail = [(e.event_type, e.payload.get("step"),
                 e.payload.get("to", e.payload.get("state"))) for e in events][-3:]
        assert tail == [("STEP_STATE_CHANGED", "after", "SKIPPED"),
                        ("STEP_STATE_CHANGED", "tail", "SKIPPED"),
                        ("RUN_FINISHED", None, "FAILED")]
        assert len({e.actor for e in events[-3:]}) == 1 and events[-1].actor != "system"
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.FAILED

        # Refused (not NEEDS_REVIEW any more): nothing more is written.
        assert b.cli("runs", "abandon", run_id).exit_code == 1
        assert len(b.store.list_step_runs(run_id)) == len(steps)


def test_value_error_fails_after_one_attempt(tmp_path: Path) -> None:
    jobs = python_job("bad", [("call", "bad_input", {}), ("after", "always_busy", {})],
                      EXPONENTIAL)
    with bench(tmp_path / "home", jobs) as b:
        run_id = b.enqueue("bad")
        assert b.execute(run_id).state is RunState.FAILED
        assert b.steps(run_id) == [("call", 1, StepState.FAILED, "fatal"),
                                   ("after", 1, StepState.SKIPPED, None)]
        assert b.events(run_id, "RETRY_SCHEDULED") == []
        run = b.store.get_run(run_id)
        assert run is not None and run.error == "step 'call' failed: ValueError: no such period"


def test_a_retry_resumes_at_the_failed_step_with_earlier_outputs(tmp_path: Path,
                                                                 store_url: str) -> None:
    a_calls, b_calls, c_calls = (tmp_path / n for n in ("a", "b", "c"))
    jobs = python_job("abc", [
        ("a", "produce", {"counter": a_calls.as_posix()}),
        ("b", "flaky", {"counter": b_calls.as_posix(), "failures": 1}),
        ("c", "consume", {"counter": c_calls.as_posix(), "seen": "${steps.a.value}"}),
    ], EXPONENTIAL)
    with bench(tmp_path / "home", jobs, store_url=store_url) as b:
        run_id = b.enqueue("abc")
        assert b.execute(run_id).state is RunState.QUEUED
        with b.store.read() as conn:
            point = conn.execute(sa.select(checkpoints)).one()
        assert point.next_step == "b"
        assert json.loads(point.outputs_json) == {"a": {"value": 7, "rows": None}}
        b.clock.advance(10)
        assert b.execute(run_id).state is RunState.SUCCEEDED
        assert [(n, int(p.read_text())) for n, p in
                (("a", a_calls), ("b", b_calls), ("c", c_calls))] == [("a", 1), ("b", 2),
                                                                      ("c", 1)]
        assert b.steps(run_id) == [
            ("a", 1, StepState.SUCCEEDED, None),
            ("b", 1, StepState.FAILED, "retryable"),
            ("b", 2, StepState.SUCCEEDED, None),
            ("c", 1, StepState.SUCCEEDED, None),
        ]
        c = b.store.list_step_runs(run_id)[-1]
        assert c.output == {"seen": 7}
        logs = [line.message for line in b.store.list_logs(run_id)]
        assert any("run resumed at step 'b' (attempt 2) from its checkpoint" in m for m in logs)


def test_a_deferral_past_the_run_timeout_fails_the_run(tmp_path: Path) -> None:
    jobs = python_job("short", [("call", "flaky", {"counter": (tmp_path / "n").as_posix()})],
                      "attempts = 3\nbase_seconds = 600\njitter = 0")
    jobs = jobs.replace("[jobs.short]\n", '[jobs.short]\ntimeout = "5m"\n')
    with bench(tmp_path / "home", jobs) as b:
        run_id = b.enqueue("short")
        assert b.execute(run_id).state is RunState.FAILED
        run = b.store.get_run(run_id)
        assert run is not None and run.error is not None
        assert "run timeout" in run.error and "Retryable: busy (call 1)" in run.error


# --- HTTP: a real local server ------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    calls: ClassVar[dict[str, int]] = {}
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            calls = self.calls[self.path] = self.calls.get(self.path, 0) + 1
        status, headers = 200, {}
        if self.path == "/slow-down" and calls == 1:
            status, headers = 429, {"Retry-After": "2"}
        elif self.path == "/unavailable" and calls == 1:
            status = 503
        elif self.path == "/missing":
            status = 404
        body = json.dumps({"calls": calls}).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.calls = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def http_job(path: str, attempts: int) -> str:
    return f"""
    [jobs.call]
    [jobs.call.retry]
    attempts = {attempts}
    base_seconds = 5
    jitter = 0
    [[jobs.call.steps]]
    name = "get"
    type = "http"
    connection = "api"
    path = "{path}"
    """


def http_extra(base: str) -> str:
    return f'[connections.api]\ntype = "http"\nbase_url = "{base}"\nallow_private = true\n'


def test_http_429_waits_for_retry_after_and_spends_no_attempt(tmp_path: Path,
                                                               server: str) -> None:
    # attempts = 1: had the deferral spent an attempt, the run would need review.
    # The step reads Retry-After on the run's clock: the answer comes at the fake now.
    with bench(tmp_path / "home", http_job("/slow-down", 1), extra=http_extra(server)) as b:
        run_id = b.enqueue("call")
        assert b.execute(run_id).state is RunState.QUEUED
        run = b.store.get_run(run_id)
        assert run is not None and run.not_before is not None and run.attempt == 0
        # 2 s after the answer, on the run's clock
        assert run.not_before == b.clock.now() + timedelta(seconds=2)
        [event] = b.events(run_id, "RETRY_SCHEDULED")
        assert event.payload["class"] == "deferred" and event.payload["spent"] == 0
        assert event.payload["error_type"] == "Deferred"
        assert b.execute(run_id).claimed is False  # it waits for Retry-After
        b.clock.advance(3)
        assert b.execute(run_id).state is RunState.SUCCEEDED
        assert b.steps(run_id) == [("get", 1, StepState.FAILED, "deferred"),
                                   ("get", 2, StepState.SUCCEEDED, None)]
        assert _Handler.calls["/slow-down"] == 2


def test_http_503_is_retried(tmp_path: Path, server: str) -> None:
    with bench(tmp_path / "home", http_job("/unavailable", 2), extra=http_extra(server)) as b:
        run_id = b.enqueue("call")
        assert b.execute(run_id).state is RunState.QUEUED
        run = b.store.get_run(run_id)
        assert run is not None and run.not_before == b.clock.now() + timedelta(seconds=5)
        b.clock.advance(5)
        assert b.execute(run_id).state is RunState.SUCCEEDED
        assert b.steps(run_id) == [("get", 1, StepState.FAILED, "retryable"),
                                   ("get", 2, StepState.SUCCEEDED, None)]


def test_http_404_fails_at_once(tmp_path: Path, server: str) -> None:
    with bench(tmp_path / "home", http_job("/missing", 3), extra=http_extra(server)) as b:
        run_id = b.enqueue("call")
        assert b.execute(run_id).state is RunState.FAILED
        assert b.steps(run_id) == [("get", 1, StepState.FAILED, "fatal")]
        assert _Handler.calls["/missing"] == 1
