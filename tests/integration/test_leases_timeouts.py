"""Timeouts and cancels really stop the work (SPEC §7 "Timeouts and cancel"; docs/leases.md):
a python step's process tree is killed, a SQL statement is canceled on the server, an HTTP
request is aborted, whether the step's timeout, the run's timeout or a cancel stops it.

Real parts: a SQLite store, spawned child processes, PostgreSQL and MariaDB servers, a local
HTTP server that never answers. Cancels come from another thread of this process through the
store (exactly what `runs cancel` in another process writes) or the in-process fast path.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from executor_home import gone, loaded

from cadenza.domain.states import RunState, StepState

LEASE = 'lease = "3s"\n'


def _sleeper(tmp_path: Path, *, step_timeout: str = "10m", job_timeout: str = "1h") -> str:
    pid_file = (tmp_path / "pids.json").as_posix()
    return f"""
    [jobs.slow]
    timeout = "{job_timeout}"
    [jobs.slow.retry]
    attempts = 1
    [[jobs.slow.steps]]
    name = "nap"
    type = "python"
    callable = "cz_exec_tasks:sleep"
    timeout = "{step_timeout}"
    op_kwargs = {{ seconds = 600, pid_file = "{pid_file}", grandchild = true }}
    [[jobs.slow.steps]]
    name = "after"
    type = "python"
    callable = "cz_exec_tasks:count"
    isolation = "thread"
    """


def _pids(tmp_path: Path, seconds: float = 20) -> list[int]:
    deadline = time.monotonic() + seconds
    path = tmp_path / "pids.json"
    while time.monotonic() < deadline:
        try:
            return list(json.loads(path.read_text()))
        except (OSError, ValueError):
            time.sleep(0.05)
    raise AssertionError("the step never wrote its pids")


def _later(fn: object, *args: object, when: float = 0.0) -> threading.Thread:
    def body() -> None:
        time.sleep(when)
        fn(*args)  # type: ignore[operator]

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_a_step_timeout_kills_the_process_tree_within_4s(tmp_path: Path) -> None:
    with loaded(tmp_path / "home", _sleeper(tmp_path, step_timeout="2s")) as bench:
        started = time.monotonic()
        run_id, outcome = bench.run("slow")
        elapsed = time.monotonic() - started
        assert elapsed < 4.0, f"the run took {elapsed:.1f}s"
        pids = _pids(tmp_path)
        assert len(pids) == 2 and all(gone(p) for p in pids)
        nap = bench.store.list_step_runs(run_id)[0]
        assert nap.state is StepState.FAILED and "timed out after 2s" in (nap.error or "")
        assert outcome.state is not RunState.SUCCEEDED


def test_the_run_timeout_kills_the_step_and_fails_the_run(tmp_path: Path) -> None:
    with loaded(tmp_path / "home", _sleeper(tmp_path, job_timeout="2s")) as bench:
        started = time.monotonic()
        run_id, outcome = bench.run("slow")
        assert time.monotonic() - started < 4.0
        assert all(gone(p) for p in _pids(tmp_path))
        assert outcome.state is RunState.FAILED
        assert "run's timeout" in (outcome.error or "")
        run = bench.store.get_run(run_id)
        assert run is not None and run.state is RunState.FAILED


def _cancel_while_sleeping(tmp_path: Path, how: str) -> None:
    with loaded(tmp_path / "home", _sleeper(tmp_path)) as bench:
        run_id = bench.executor.enqueue("slow", __import__(
            "cadenza.executor.request", fromlist=["RunRequest"]).RunRequest(),
            trigger="manual:test")

        def cancel() -> None:
            pids = _pids(tmp_path)
            assert pids
            cancel.at = time.monotonic()  # type: ignore[attr-defined]
            if how == "store":  # what `runs cancel` writes from another process
                assert bench.store.request_cancel(run_id, "erin").requested
            else:
                assert bench.executor.cancel(run_id, "erin")

        _later(cancel)
        outcome = bench.executor.execute(run_id)
        latency = time.monotonic() - cancel.at  # type: ignore[attr-defined]
        assert outcome.state is RunState.CANCELED, outcome
        assert latency < (2.0 if how == "store" else 1.0), f"stopped after {latency:.2f}s"
        assert all(gone(p) for p in _pids(tmp_path))
        run = bench.store.get_run(run_id)
        assert run is not None and run.state is RunState.CANCELED
        assert "erin" in (run.reason or "")
        nap, after = bench.store.list_step_runs(run_id)
        assert nap.state is StepState.CANCELED and after.state is StepState.SKIPPED
        assert any("canceled by erin" in message for _, _, message in bench.log(run_id))
        assert bench.executor.keeper.held() == []


def test_a_cancel_request_in_the_store_kills_the_running_step(tmp_path: Path) -> None:
    _cancel_while_sleeping(tmp_path, "store")


def test_an_in_process_cancel_stops_the_step_at_once(tmp_path: Path) -> None:
    _cancel_while_sleeping(tmp_path, "local")


# -- SQL statements ------------------------------------------------------------------------

def _sql_job(url: str, query: str, *, timeout: str = "2s") -> tuple[str, str]:
    settings = f'\n[connections.db]\ntype = "sql"\nurl = "{url}"\n'
    jobs = f"""
    [jobs.q]
    [jobs.q.retry]
    attempts = 1
    [[jobs.q.steps]]
    name = "wait"
    type = "sql_query"
    connection = "db"
    timeout = "{timeout}"
    query = "{query}"
    """
    return settings, jobs


PG_ACTIVE = ("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
             "AND query LIKE :q AND pid <> pg_backend_pid()")
MY_ACTIVE = ("SELECT count(*) FROM information_schema.processlist WHERE info LIKE :q "
             "AND id <> CONNECTION_ID()")


def _sleepers(url: str, marker: str) -> int:
    """Statements containing ``marker`` still running on the server (PostgreSQL or MariaDB)."""
    engine = sa.create_engine(url)
    query = PG_ACTIVE if engine.dialect.name == "postgresql" else MY_ACTIVE
    try:
        with engine.connect() as c:
            return int(c.execute(sa.text(query), {"q": f"%{marker}%"}).scalar())
    finally:
        engine.dispose()


def _eventually(probe: object, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.postgres
def test_a_pg_sleep_past_its_timeout_is_canceled_on_the_server(tmp_path: Path,
                                                               pg_url: str) -> None:
    settings, jobs = _sql_job(pg_url, "SELECT pg_sleep(600) AS t_timeout")
    with loaded(tmp_path / "home", jobs, settings=settings) as bench:
        started = time.monotonic()
        run_id, _outcome = bench.run("q")
        assert time.monotonic() - started < 4.0
        step = bench.store.list_step_runs(run_id)[0]
        # Whichever fires first with the same timeout: the executor's ("step 'wait' timed
        # out after ...") or the server's statement_timeout the step set (57014, "step
        # timeout: ... canceling statement due to statement timeout"); both retryable.
        error = step.error or ""
        assert step.state is StepState.FAILED and step.error_class == "retryable"
        assert "timed out" in error or "step timeout" in error, error
        assert _eventually(lambda: _sleepers(pg_url, "t_timeout") == 0)


@pytest.mark.postgres
def test_a_cancel_stops_a_pg_sleep_on_the_server(tmp_path: Path, pg_url: str) -> None:
    settings, jobs = _sql_job(pg_url, "SELECT pg_sleep(600) AS t_cancel", timeout="10m")
    with loaded(tmp_path / "home", jobs, settings=settings) as bench:
        from cadenza.executor.request import RunRequest

        run_id = bench.executor.enqueue("q", RunRequest(), trigger="manual:test")

        def cancel() -> None:
            assert _eventually(lambda: _sleepers(pg_url, "t_cancel") == 1, 20)
            bench.store.request_cancel(run_id, "frank")

        _later(cancel)
        started = time.monotonic()
        outcome = bench.executor.execute(run_id)
        assert outcome.state is RunState.CANCELED
        assert time.monotonic() - started < 15
        assert _eventually(lambda: _sleepers(pg_url, "t_cancel") == 0)


@pytest.mark.mariadb
def test_a_mariadb_sleep_past_its_timeout_is_killed_on_the_server(tmp_path: Path,
                                                                  mariadb_url: str) -> None:
    settings, jobs = _sql_job(mariadb_url, "SELECT SLEEP(600) AS t_my_timeout")
    with loaded(tmp_path / "home", jobs, settings=settings) as bench:
        started = time.monotonic()
        run_id, _outcome = bench.run("q")
        assert time.monotonic() - started < 5.0
        step = bench.store.list_step_runs(run_id)[0]
        assert step.state is StepState.FAILED
        assert _eventually(lambda: _sleepers(mariadb_url, "t_my_timeout") == 0)


# -- HTTP ------------------------------------------------------------------------------------

@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(sock.getsockname()[1])
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


def _http_job(port: int, timeout: str) -> tuple[str, str]:
    settings = (f'\n[connections.silent]\ntype = "http"\nbase_url = "http://127.0.0.1:{port}"\n'
                'allow_private = true\ntimeout = "10m"\n')
    jobs = f"""
    [jobs.h]
    [jobs.h.retry]
    attempts = 1
    [[jobs.h.steps]]
    name = "call"
    type = "http"
    connection = "silent"
    path = "/never"
    timeout = "{timeout}"
    """
    return settings, jobs


def test_an_http_request_that_gets_no_answer_is_aborted_at_the_timeout(
        tmp_path: Path, silent_server: int) -> None:
    settings, jobs = _http_job(silent_server, "2s")
    with loaded(tmp_path / "home", jobs, settings=settings) as bench:
        started = time.monotonic()
        run_id, _outcome = bench.run("h")
        assert time.monotonic() - started < 4.0
        step = bench.store.list_step_runs(run_id)[0]
        assert step.state is StepState.FAILED


def test_a_cancel_aborts_an_http_request_that_gets_no_answer(
        tmp_path: Path, silent_server: int) -> None:
    settings, jobs = _http_job(silent_server, "10m")
    with loaded(tmp_path / "home", jobs, settings=settings) as bench:
        from cadenza.executor.request import RunRequest

        run_id = bench.executor.enqueue("h", RunRequest(), trigger="manual:test")
        _later(bench.store.request_cancel, run_id, "gina", when=1.0)
        started = time.monotonic()
        outcome = bench.executor.execute(run_id)
        assert outcome.state is RunState.CANCELED
        assert time.monotonic() - started < 4.0
