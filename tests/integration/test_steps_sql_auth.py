"""Refused credentials and missing databases are fatal, on real servers: a later attempt
cannot get past them. A server that does not answer stays retryable."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from executor_home import make_home
from tests.conftest import MARIADB_URL, PG_ADMIN_URL, service_missing
from tests.support.pg_cluster import PrivatePostgres, private_postgres

from cadenza.domain.errors import Fatal, Retryable
from cadenza.domain.states import RunState
from cadenza.executor.request import RunRequest
from cadenza.executor.runner import Executor
from cadenza.home import Home
from cadenza.steps.builtin.sql_query import SqlQueryStep

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_ctx import SqlTestContext, execute, rows, run_step


def _pg(**parts: str) -> str:
    return sa.make_url(PG_ADMIN_URL).set(**parts).render_as_string(hide_password=False)


def _select(tmp_path: Path, url: str) -> None:
    ctx = SqlTestContext(tmp_path, {"w": url})
    try:
        run_step(SqlQueryStep, ctx, connection="w", query="SELECT 1")
    finally:
        ctx.close()


@pytest.mark.postgres
@pytest.mark.reliability_case(27)
def test_postgresql_unknown_role_and_database_are_fatal(tmp_path: Path,
                                                        _pg_admin: object) -> None:
    with pytest.raises(Fatal) as info:
        _select(tmp_path, _pg(username="cadenza_no_such_role"))
    assert 'role "cadenza_no_such_role" does not exist' in str(info.value)
    assert "access refused" in str(info.value)
    with pytest.raises(Fatal, match='database "cadenza_no_such_db" does not exist'):
        _select(tmp_path, _pg(database="cadenza_no_such_db"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.reliability_case(27)
def test_a_server_that_does_not_answer_stays_retryable(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://someone@127.0.0.1:{_closed_port()}/db"
    with pytest.raises(Retryable, match="cannot connect"):
        _select(tmp_path, url)


@pytest.mark.mariadb
def test_mariadb_refused_user_is_fatal(tmp_path: Path, mariadb_url: str) -> None:
    url = sa.make_url(MARIADB_URL).set(username="cadenza_nobody", password="wrong")
    with pytest.raises(Fatal, match=r"1045|Access denied"):
        _select(tmp_path, url.render_as_string(hide_password=False))


def test_sqlite_that_cannot_open_is_fatal(tmp_path: Path) -> None:
    url = f"sqlite:///{(tmp_path / 'no-such-dir' / 'w.db').as_posix()}"
    with pytest.raises(Fatal, match="unable to open database file"):
        _select(tmp_path, url)


JOBS = """
[jobs.pg]
[[jobs.pg.steps]]
name = "write"
type = "python"
callable = "cz_exec_tasks:write_sql"
isolation = "thread"
op_kwargs = { connection = "pg" }
"""


@pytest.mark.postgres
def test_a_python_steps_connection_with_an_unknown_role_fails_the_run(
        tmp_path: Path, _pg_admin: object) -> None:
    root = make_home(tmp_path / "home", JOBS)
    with (root / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write(f'\n[connections.pg]\ntype = "sql"\n'
                 f'url = "{_pg(username="cadenza_no_such_role")}"\n')
    home = Home(root.resolve())
    config = home.load_config()
    store = home.open_store(config)
    executor = Executor(store, config)
    try:
        run_id = executor.enqueue("pg", RunRequest(), trigger="manual:test")
        outcome = executor.execute(run_id)
        [step] = store.list_step_runs(run_id)
    finally:
        executor.close()
        store.close()
    assert outcome.state is RunState.FAILED  # not QUEUED for a retry
    assert step.error_class == "fatal"
    assert 'role "cadenza_no_such_role" does not exist' in (step.error or "")


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of this test's own, which it may reconfigure and restart."""
    if sys.platform == "win32":
        pytest.skip("the private PostgreSQL cluster is started with pg_ctl and runuser (POSIX)")
    with private_postgres() as cluster:
        if cluster is None:
            service_missing("PostgreSQL's server binaries (initdb, pg_ctl)", "not found")
        assert cluster is not None
        yield cluster


@pytest.mark.reliability_case(27)
def test_a_read_only_postgresql_refuses_writes_for_good_and_serves_reads(
        tmp_path: Path, private_pg: PrivatePostgres) -> None:
    """A live server that only reads (a database set ``default_transaction_read_only``, as a
    hot standby answers): a write step fails at once, not retried (another attempt on the
    same server meets the same refusal), with the server's words and a hint saying the
    database accepts reads only; a read on the same connection works; nothing was
    written."""
    url = private_pg.url()
    execute(url, "CREATE TABLE t (id INTEGER)",
            "ALTER DATABASE cadenza SET default_transaction_read_only = on")
    ctx = SqlTestContext(tmp_path, {"w": url})
    try:
        with pytest.raises(Fatal) as refused:
            run_step(SqlQueryStep, ctx, connection="w", query="INSERT INTO t VALUES (1)")
        message = str(refused.value)
        assert "cannot execute INSERT in a read-only transaction" in message, message
        assert "accepts reads only" in message, message
        assert run_step(SqlQueryStep, ctx, connection="w", query="SELECT count(*) FROM t",
                        fetch="first").output["first"] == {"count": 0}
    finally:
        ctx.close()


@pytest.mark.reliability_case(27)
def test_a_user_database_restarted_mid_step_is_retryable_and_the_next_attempt_works(
        tmp_path: Path, private_pg: PrivatePostgres) -> None:
    """The step's database is restarted (pg_ctl fast stop, then start) while a statement
    runs: the step fails as retryable (the server ended the session) and rolls back; the
    next attempt, on the same engine whose pooled connection died, connects again and
    commits."""
    url = private_pg.url()
    execute(url, "CREATE TABLE t (id INTEGER)")
    ctx = SqlTestContext(tmp_path, {"w": url})
    try:
        run_step(SqlQueryStep, ctx, connection="w", query="SELECT 1")  # a pooled connection
        restarter = threading.Timer(1.0, private_pg.restart)
        restarter.start()
        started = time.monotonic()
        try:
            with pytest.raises(Retryable) as lost:
                run_step(SqlQueryStep, ctx, connection="w",
                         query="INSERT INTO t SELECT 1 FROM pg_sleep(20)")
        finally:
            restarter.join()
        assert time.monotonic() - started < 15
        assert "terminating connection" in str(lost.value) or "closed" in str(lost.value), \
            str(lost.value)
        assert run_step(SqlQueryStep, ctx, connection="w",
                        query="INSERT INTO t VALUES (2)").rows == 1
    finally:
        ctx.close()
    assert rows(url, "SELECT id FROM t") == [(2,)]
