"""The http step's idempotency keys (SPEC §7) and its abort on cancel, against a real local
HTTP server that counts requests, with the executor's real ctx on a real SQLite store."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cadenza.clock import Clock, FakeClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.errors import Fatal, Retryable
from cadenza.domain.params import Scope
from cadenza.executor.connections import Connections
from cadenza.executor.context import ExecutionContext, bind_run
from cadenza.executor.runlog import RunLog
from cadenza.steps.builtin.http import HttpStep
from cadenza.steps.runtime import RunInfo, StepInfo
from cadenza.store import Store


class Counting(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, str | None]]] = []
    fail_first: ClassVar[int] = 0
    slow_arrived: ClassVar[threading.Event] = threading.Event()

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        Counting.seen.append((self.command, self.path, self.headers.get("idempotency-key")))
        if self.path == "/slow":
            Counting.slow_arrived.set()
            time.sleep(5)  # a slow server: the request stays in flight
        if self.path == "/flaky" and Counting.fail_first > 0:
            Counting.fail_first -= 1
            self.send_response(503)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = json.dumps({"order": len(Counting.seen)}).encode()
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _safely(self) -> None:
        try:
            self._answer()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the step aborted the request: the point of the cancel tests

    do_POST = do_GET = do_DELETE = _safely

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Counting.seen = []
    Counting.fail_first = 0
    Counting.slow_arrived = threading.Event()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{(tmp_path / 'cadenza.db').as_posix()}") as s:
        yield s


class Attempts:
    """Attempts of one http step of one run, each with a fresh executor ctx."""

    def __init__(self, tmp_path: Path, store: Store, base_url: str) -> None:
        run_id = store.create_run("job", "manual")
        assert run_id is not None
        [run] = store.claim_runs("node", datetime.now(UTC) + timedelta(minutes=5),
                                 run_ids=[run_id])
        bind_run(run.id, store, run.lease_epoch)
        self.run_id, self.home = run.id, tmp_path
        self.settings = Settings.model_validate({"connections": {"api": {
            "type": "http", "base_url": base_url, "allow_private": True}}})
        self.connections = Connections(tmp_path, self.settings)
        self.log = RunLog("DEBUG", lambda: datetime.now(UTC))

    def ctx(self, timeout: float = 30.0, clock: Clock | None = None) -> ExecutionContext:
        run = RunInfo(self.run_id, "job", "manual", None, "DEBUG")
        return ExecutionContext(
            params={}, run=run, step=StepInfo("notify", "http", 1, timeout),
            log=self.log.logger("notify"), home=self.home, settings=self.settings,
            scope=Scope(run_id=self.run_id, job_id="job"), connections=self.connections,
            events=lambda event: None, timeout_seconds=timeout, clock=clock)

    def run(self, ctx: ExecutionContext | None = None, **fields: Any) -> dict[str, Any]:
        ctx = ctx or self.ctx()
        config = HttpStep.Config.model_validate(
            {"name": "notify", "type": "http", "connection": "api", **fields})
        try:
            return dict(HttpStep().run(ctx, config).output)
        finally:
            ctx.finish(success=True)


@pytest.fixture
def attempts(tmp_path: Path, store: Store, server: str) -> Iterator[Attempts]:
    a = Attempts(tmp_path, store, server)
    yield a
    a.connections.close()


def test_a_post_that_succeeded_is_not_sent_again(attempts: Attempts, store: Store) -> None:
    first = attempts.run(method="POST", path="/orders", json={"n": 1})
    again = attempts.run(method="POST", path="/orders", json={"n": 1})  # retried / resumed
    assert Counting.seen == [("POST", "/orders", f"{attempts.run_id}:notify")]
    assert first == again and first["json"] == {"order": 1} and first["status"] == 201
    key = store.find_operation_key("job", f"http:{attempts.run_id}:notify")
    assert key is not None and key.result["status"] == 201


def test_a_failed_request_is_sent_again(attempts: Attempts) -> None:
    Counting.fail_first = 1
    with pytest.raises(Retryable, match="503"):
        attempts.run(method="POST", path="/flaky", idempotency_key="order-77")
    assert attempts.run(method="POST", path="/flaky", idempotency_key="order-77")["status"] \
        == 201
    attempts.run(method="POST", path="/flaky", idempotency_key="order-77")
    assert Counting.seen == [("POST", "/flaky", "order-77")] * 2


def test_gets_are_not_keyed(attempts: Attempts, store: Store) -> None:
    attempts.run(path="/status")
    attempts.run(path="/status")
    assert [s[:2] for s in Counting.seen] == [("GET", "/status")] * 2
    assert Counting.seen[0][2] is None
    assert store.find_operation_key("job", f"http:{attempts.run_id}:notify") is None


def when_in_flight(then: Callable[[], object]) -> threading.Thread:
    """Call ``then()`` from a thread of its own once the server holds the ``/slow``
    request (it answers after 5 s): the request is in flight, whatever the machine's
    speed."""

    def watch() -> None:
        assert Counting.slow_arrived.wait(10)
        then()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_cancel_aborts_a_request_in_flight(attempts: Attempts) -> None:
    ctx = attempts.ctx()
    watcher = when_in_flight(ctx.cancel)
    started = time.monotonic()
    with pytest.raises(Fatal, match="step canceled: the request was aborted"):
        attempts.run(ctx, method="POST", path="/slow")
    assert time.monotonic() - started < 2.0  # aborted, not answered after 5 s
    watcher.join()
    assert [s[1] for s in Counting.seen] == ["/slow"]


def test_timeout_aborts_a_request_in_flight(attempts: Attempts) -> None:
    clock = FakeClock()
    ctx = attempts.ctx(timeout=30, clock=clock)
    watcher = when_in_flight(lambda: clock.advance(31))  # the step's time runs out now
    started = time.monotonic()
    with pytest.raises(Retryable, match="step timeout: the request was aborted"):
        attempts.run(ctx, path="/slow")
    assert time.monotonic() - started < 2.0  # aborted, not answered after 5 s
    watcher.join()
