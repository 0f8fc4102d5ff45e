"""`cadenza runs cancel RUN` from another process (SPEC §7 "Timeouts and cancel"): a queued
run is CANCELED at once; a running python step's process tree is killed; a running
PostgreSQL `pg_sleep` is canceled on the server. The run ends CANCELED naming the OS user."""

from __future__ import annotations

import getpass
import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.e2e.lease_home import (
    cli,
    enqueue,
    gone,
    make_home,
    open_store,
    read_pids,
    run_state,
)
from tests.e2e.serve_helpers import Served, eventually


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def test_cancel_of_a_queued_run_from_another_process(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", """
    [jobs.j]
    [[jobs.j.steps]]
    name = "s"
    type = "python"
    callable = "cz_lease_tasks:work"
    op_kwargs = { log_file = "never.txt" }
    """)
    run_id = enqueue(home, "j")
    done = cli(home, "runs", "cancel", run_id, "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["canceled"] and document["state"] == "CANCELED"
    assert document["reason"] == f"canceled by {_user()}"
    again = cli(home, "runs", "cancel", run_id)
    assert again.returncode == 1 and "nothing to cancel" in again.stdout
    missing = cli(home, "runs", "cancel", "nope")
    assert missing.returncode == 1 and "no run 'nope'" in missing.stderr


def test_cancel_of_a_running_python_step_kills_its_processes(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    home = make_home(tmp_path / "home", f"""
    [jobs.slow]
    [[jobs.slow.steps]]
    name = "nap"
    type = "python"
    callable = "cz_lease_tasks:sleep"
    op_kwargs = {{ pid_file = "{pid_file.as_posix()}" }}
    """)
    server = Served(home)
    try:
        server.wait_ready()
        run_id = enqueue(home, "slow")
        pids = read_pids(pid_file)
        started = time.monotonic()
        done = cli(home, "runs", "cancel", run_id, "--wait", "--json")
        elapsed = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        document = json.loads(done.stdout)
        assert document["requested"] and document["state"] == "CANCELED"
        assert elapsed < 10, f"the cancel took {elapsed:.1f}s"
        assert eventually(lambda: all(gone(p) for p in pids), 5, "the step's processes")
        with open_store(home) as store:
            run = store.get_run(run_id)
            assert run is not None and run.reason == f"canceled by {_user()}"
            lines = [line.message for line in store.list_logs(run_id)]
        assert any(f"canceled by {_user()}" in line for line in lines), lines
    finally:
        server.stop()


@pytest.mark.postgres
def test_cancel_of_a_running_pg_sleep_cancels_it_on_the_server(tmp_path: Path,
                                                               pg_url: str) -> None:
    home = make_home(tmp_path / "home", """
    [jobs.q]
    [[jobs.q.steps]]
    name = "wait"
    type = "sql_query"
    connection = "pg"
    query = "SELECT pg_sleep(600) AS e2e_cancel"
    """, extra=f'\n[connections.pg]\ntype = "sql"\nurl = "{pg_url}"\n')
    engine = sa.create_engine(pg_url)

    def sleepers() -> int:
        with engine.connect() as c:
            return int(c.execute(sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                "AND query LIKE '%e2e_cancel%' AND pid <> pg_backend_pid()")).scalar())

    server = Served(home)
    try:
        server.wait_ready()
        run_id = enqueue(home, "q")
        eventually(lambda: sleepers() == 1, 30, "the pg_sleep backend")
        done = cli(home, "runs", "cancel", run_id, "--wait")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "CANCELED" in done.stdout
        eventually(lambda: sleepers() == 0, 5, "no pg_sleep backend left")
        run = run_state(home, run_id)
        assert run.state.value == "CANCELED"
    finally:
        server.stop()
        engine.dispose()
