"""call_job under a real ``cadenza serve`` (SPEC §4, docs/call_job.md).

(a) a parent canceled (``cadenza runs cancel``) while its child runs: both end CANCELED and
    the child's step process is gone;
(b) ``cadenza serve`` killed with SIGKILL (its whole process tree) while the parent waits
    for its child: after a restart there is still one child, the parent resumes and
    SUCCEEDS;
(c) 50 parents calling 50 children with 4 workers all complete: a waiting parent holds no
    worker, so the children always find one.

The lease is 10 s. Real sleeps are real processes booting or working; no schedule is waited
for.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import sqlalchemy as sa
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.store.children import ChildRuns
from cadenza.store.tables import runs
from tests.e2e.serve_helpers import Served, eventually
from tests.e2e.test_crash_recovery import finish, kill_tree, make_home, queue, store_of
from tests.integration.executor_home import gone

KIDS = '''
"""Python steps of the call_job serve tests."""

import os
import time


def rows(n=1):
    return int(n)


def hold(pid_file, flag="", seconds=600):
    """Write this process's pid, then wait for ``flag`` to exist (or ``seconds``)."""
    with open(pid_file, "w", encoding="utf-8") as fh:
        fh.write(str(os.getpid()))
    for _ in range(int(float(seconds) * 10)):
        if flag and os.path.exists(flag):
            return 1
        time.sleep(0.1)
    return 0
'''


def home_with(tmp_path: Path, jobs: str) -> Path:
    home = make_home(tmp_path, textwrap.dedent(jobs))
    (home / "plugins" / "cz_kids.py").write_text(KIDS, encoding="utf-8")
    # 10 s, not make_home's 3 s: on a loaded machine a 3 s lease lapses under a step's
    # process (it stops itself and is retried), which these tests are not about.
    settings = home / "cadenza.toml"
    text = settings.read_text()
    assert 'lease = "3s"' in text
    settings.write_text(text.replace('lease = "3s"', 'lease = "10s"', 1))
    return home


def alive_pid(pid_file: Path) -> int | None:
    """The pid the child's step wrote, once that process runs."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) and not gone(pid) else None


def waiting(home: Path, parent_id: str) -> str | None:
    """The child a QUEUED parent waits for (None while it does not)."""
    with store_of(home) as store:
        run = store.get_run(parent_id)
        children = ChildRuns(store).children(parent_id)
    if run is None or str(run.state) != "QUEUED" or len(children) != 1:
        return None
    child = children[0]
    return child.id if run.wait_reason == f"waiting for child run {child.id} (holder)" \
        else None


def holder_jobs(pid_file: Path, flag: Path) -> str:
    return f'''
        [jobs.holder]
        [[jobs.holder.steps]]
        name = "hold"
        type = "python"
        callable = "cz_kids:hold"
        op_kwargs = {{ pid_file = "{pid_file.as_posix()}", flag = "{flag.as_posix()}" }}

        [jobs.waiter]
        [[jobs.waiter.steps]]
        name = "call"
        type = "call_job"
        job = "holder"
        '''


def test_canceling_a_parent_cancels_its_running_child_and_its_process(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    home = home_with(tmp_path, holder_jobs(pid_file, tmp_path / "never"))
    parent_id = queue(home, "waiter")
    server = Served(home, web=False)
    try:
        child_id = eventually(lambda: waiting(home, parent_id) if pid_file.exists() else None,
                              seconds=60, what="the parent waiting for its running child")
        pid = eventually(lambda: alive_pid(pid_file), seconds=30,
                         what="the child's step process")
        result = CliRunner().invoke(app, ["--home", str(home), "runs", "cancel", parent_id])
        assert result.exit_code == 0, result.output
        eventually(lambda: state_of(home, child_id) == "CANCELED", seconds=60,
                   what="the child canceled")
        assert state_of(home, parent_id) == "CANCELED"
        eventually(lambda: gone(pid), seconds=30, what=f"the child's process {pid} gone")
    finally:
        out = server.stop()
    with store_of(home) as store:
        child = store.get_run(child_id)
    assert child is not None, out
    assert child.reason is not None and f"parent run {parent_id}" in child.reason


def test_kill_9_while_the_parent_waits_resumes_with_the_same_child(tmp_path: Path) -> None:
    pid_file, flag = tmp_path / "child.pid", tmp_path / "go"
    home = home_with(tmp_path, holder_jobs(pid_file, flag))
    parent_id = queue(home, "waiter")
    server = Served(home, web=False)
    try:
        child_id = eventually(lambda: waiting(home, parent_id) if pid_file.exists() else None,
                              seconds=60, what="the parent waiting for its running child")
    finally:
        kill_tree(server.proc)
        server.output()
    assert state_of(home, child_id) in ("RUNNING", "QUEUED")  # its server died under it
    flag.write_text("go")
    state, out = finish(home, parent_id)
    assert state == "SUCCEEDED", out
    with store_of(home) as store:
        children = ChildRuns(store).children(parent_id)
        parent = store.get_run(parent_id)
        calls = [s for s in store.list_step_runs(parent_id) if s.step == "call"]
    assert [c.id for c in children] == [child_id]
    assert children[0].state.value == "SUCCEEDED"
    assert parent is not None and parent.rows == 1
    # The wait was one attempt of the step, through the crash: it went on and SUCCEEDED.
    assert [(s.attempt, s.state.value, s.error_class) for s in calls] == [
        (1, "SUCCEEDED", None)]


def test_fifty_parents_on_fifty_children_with_four_workers_complete(tmp_path: Path) -> None:
    home = home_with(tmp_path, '''
        [jobs.kid]
        params = { n = 1 }
        max_concurrency = 100
        [[jobs.kid.steps]]
        name = "rows"
        type = "python"
        callable = "cz_kids:rows"
        isolation = "thread"

        [jobs.many]
        max_concurrency = 100
        [[jobs.many.steps]]
        name = "call"
        type = "call_job"
        job = "kid"
        params = { n = 2 }
        ''')
    settings = home / "cadenza.toml"
    settings.write_text(settings.read_text().replace("[workers]", "[workers]\ncount = 4", 1))
    with store_of(home) as store:
        parents = [store.create_run("many", "manual") for _ in range(50)]
    started = time.monotonic()
    server = Served(home, web=False)
    try:
        eventually(lambda: all_ended(home, "many") == 50, seconds=150,
                   what="the 50 parents to end")
        took = time.monotonic() - started
    finally:
        out = server.stop()
    with store_of(home) as store:
        states = {str(r.state) for r in store.list_runs(limit=200)}
        rows = {p: (r.rows if (r := store.get_run(p)) else None) for p in parents if p}
        with store.read() as c:
            kids = c.execute(sa.select(sa.func.count()).select_from(runs).where(
                runs.c.parent_run_id.is_not(None))).scalar()
    assert states == {"SUCCEEDED"}, out
    assert set(rows.values()) == {2}
    assert kids == 50
    print(f"50 parents + 50 children, 4 workers: {took:.1f}s including the server's start")


def all_ended(home: Path, job: str) -> int:
    with store_of(home) as store:
        return sum(1 for r in store.list_runs(job=job, limit=100)
                   if str(r.state) in ("SUCCEEDED", "FAILED", "CANCELED", "NEEDS_REVIEW"))


def state_of(home: Path, run_id: str) -> str:
    with store_of(home) as store:
        run = store.get_run(run_id)
    assert run is not None
    return str(run.state)
