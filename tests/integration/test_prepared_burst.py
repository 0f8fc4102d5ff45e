"""A crowded due time on a real node (SQLite and PostgreSQL), FakeClock: the dispatcher
claims the runs and launches none of them (``Started.launch``): each worker runs its run's
thread step itself; every run is executed once, in a worker, recorded as on the ordinary
path, and logged "ended" when its end is written. A step launched on a step thread (an
executor outside a node) still has its timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from executor_home import loaded
from test_dispatch_lookahead import FIRE, JOBS, WORKERS, make_home

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.node import Node
from cadenza.store.boundary import Boundary, NewRun, RunEnd


def _start_workers(node: Node, count: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=node.dispatcher._work_loop, daemon=True)
               for _ in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while node.dispatcher._waiting < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert node.dispatcher._waiting == count
    return threads


def test_a_burst_is_run_by_the_workers_themselves_and_recorded_as_usual(
    tmp_path: Path, store_url: str, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    home = make_home(tmp_path, store_url)
    calls = tmp_path / "calls.txt"
    # The plugin module is imported once per process: it finds the file in the environment.
    monkeypatch.setenv("CZ_BURST_CALLS", str(calls))
    jobs = home.jobs_file.read_text().replace("cz_dispatch_tasks:", "cz_burst_tasks:")
    home.jobs_file.write_text(jobs)
    (home.path / "plugins" / "cz_burst_tasks.py").write_text(
        "import os, threading\n"
        "def noop():\n"
        "    path = os.environ.get('CZ_BURST_CALLS')\n"
        "    if path:\n"
        "        with open(path, 'a') as fh:\n"
        "            fh.write(threading.current_thread().name + '\\n')\n"
        "    return 1\n")
    clock = FakeClock(FIRE - timedelta(hours=1))
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock)  # only the workers run: dispatched by hand
    threads = _start_workers(node, WORKERS)
    launched: list[str] = []
    try:
        assert node.scheduler is not None and node.scheduler.try_lead()
        node.scheduler.tick(clock.now())
        clock.set(FIRE - timedelta(seconds=2))
        assert len(node.scheduler.tick(clock.now()).queued) == JOBS
        clock.set(FIRE)
        caplog.set_level(logging.INFO, logger="cadenza.node")

        from cadenza.executor import runner

        real = runner.Started.launch

        def spy(self: runner.Started) -> bool:
            launched.append(self.run_id)
            return real(self)

        runner.Started.launch = spy  # type: ignore[method-assign]
        try:
            node.dispatcher.dispatch_once(clock.now())
        finally:
            runner.Started.launch = real  # type: ignore[method-assign]
        # The workers run the steps themselves: the dispatcher launches none.
        assert launched == []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
                r.state is not RunState.SUCCEEDED for r in store.list_runs(limit=100)):
            node.dispatcher.dispatch_once(clock.now())  # writes the ends the workers held back
            time.sleep(0.05)
        runs = store.list_runs(limit=100)
        assert [r.state for r in runs] == [RunState.SUCCEEDED] * JOBS
        entered = calls.read_text().splitlines()
        assert len(entered) == JOBS  # each function entered once, in a worker's thread
        assert set(entered) <= {t.name for t in threads}
        for run in runs:
            steps = store.list_step_runs(run.id)
            assert [(s.state, s.rows, s.attempt) for s in steps] == [
                (StepState.SUCCEEDED, 1, 1)]
            kinds = [e.event_type for e in store.list_events(run_id=run.id)]
            assert kinds == ["RUN_CREATED", "STEP_STARTED", "STEP_SUCCEEDED", "RUN_FINISHED"]
            assert store.list_logs(run.id) == []  # nothing restates the events
            assert [line.event for line in store.run_log(run.id)] == kinds
        named = [name for r in caplog.records if " ended " in r.getMessage()
                 for name in _ended_runs(r.getMessage(), "SUCCEEDED")]
        assert sorted(named) == sorted(f"{r.id} of {r.job_id}" for r in runs)
        assert node.dispatcher._starting == 0 and not node.dispatcher._jobs
    finally:
        node.stop(timeout=10)
        for thread in threads:
            thread.join(5)
        store.close()


def test_a_launched_thread_step_still_times_out(tmp_path: Path) -> None:
    jobs = """
    [jobs.slow]
    [[jobs.slow.steps]]
    name = "nap"
    type = "python"
    callable = "cz_exec_tasks:sleep"
    isolation = "thread"
    timeout = "1s"
    op_kwargs = { seconds = 5 }
    """
    with loaded(tmp_path / "home", jobs) as bench:
        bench.store.create_runs([NewRun("slow", "manual:test")])
        until = bench.store.clock.now() + timedelta(minutes=5)
        with bench.store.write() as conn:
            (started,) = bench.executor.claim_and_start(conn, limit=1, lease_until=until)
        began = time.monotonic()
        assert started.launch()
        assert not started.launch()  # launched once
        outcome = started.go()
        assert time.monotonic() - began < 3.5
        assert outcome.state is RunState.QUEUED  # a step timeout is retried (SPEC §7)
        (nap,) = bench.store.list_step_runs(started.run_id)
        assert nap.state is StepState.FAILED and "timed out after 1s" in (nap.error or "")


def test_a_run_that_cannot_start_is_not_launched(tmp_path: Path) -> None:
    jobs = """
    [jobs.gone]
    [[jobs.gone.steps]]
    name = "a"
    type = "python"
    callable = "cz_exec_tasks:count"
    enabled = false
    """
    with loaded(tmp_path / "home", jobs) as bench:
        bench.store.create_runs([NewRun("gone", "manual:test")])
        until = bench.store.clock.now() + timedelta(minutes=5)
        with bench.store.write() as conn:
            (started,) = bench.executor.claim_and_start(conn, limit=1, lease_until=until)
        assert not started.launch()  # every step disabled: nothing to start
        assert started.go().state is RunState.SUCCEEDED


def _ended_runs(message: str, state: str) -> list[str]:
    """The runs ("R of J") a node's "ended" line names in ``state``: ``run R of J ended S``
    or ``N runs ended S: R1 of J1, R2 of J2``."""
    if message.startswith("run ") and message.endswith(f" ended {state}"):
        return [message.removeprefix("run ").removesuffix(f" ended {state}")]
    count, _, rest = message.partition(f" runs ended {state}: ")
    if not rest:
        return []
    names = rest.split(", ")
    assert len(names) == int(count), message
    return names


def test_the_node_logs_queued_ends_when_they_are_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = make_home(tmp_path, "default", jobs=4)
    clock = FakeClock(FIRE)
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock, scheduler=False)
    try:
        store.create_runs([NewRun(f"j0{k}", "manual:test") for k in range(4)])
        claimed = store.claim_runs("me", FIRE + timedelta(minutes=1), limit=4)
        caplog.set_level(logging.INFO, logger="cadenza.node")
        for run in claimed:
            node.dispatcher._jobs[run.id] = run.job_id
        good, other, failed, lost = claimed
        for run in (good, other):
            node.recorder.finish(Boundary(run.id, run.lease_epoch,
                                          run_end=RunEnd(RunState.SUCCEEDED, 0)))
        node.recorder.finish(Boundary(failed.id, failed.lease_epoch,
                                      run_end=RunEnd(RunState.FAILED, None, "boom")))
        node.recorder.finish(Boundary(lost.id, lost.lease_epoch + 1,
                                      run_end=RunEnd(RunState.SUCCEEDED, 0)))
        assert not [r for r in caplog.records if "ended" in r.getMessage()]
        node.recorder.flush()
        messages = [(r.levelname, r.getMessage()) for r in caplog.records
                    if "ended" in r.getMessage()]
        # One line per state for the ends one commit wrote (a record per run cost a
        # twentieth of a short run in `cadenza serve`); a line of its own for one run.
        assert messages[1:] == [
            ("INFO", f"2 runs ended SUCCEEDED: {good.id} of {good.job_id}, "
                     f"{other.id} of {other.job_id}"),
            ("INFO", f"run {failed.id} of {failed.job_id} ended FAILED")]
        assert messages[0][0] == "WARNING" and messages[0][1].startswith(
            f"run {lost.id} of {lost.job_id} ended (lost): its end was refused")
        assert not node.dispatcher._jobs
    finally:
        node.stop(timeout=5)
        store.close()
