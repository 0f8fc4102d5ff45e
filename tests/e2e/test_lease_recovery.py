"""Leases end to end with real `cadenza serve` processes (SPEC §7 recovery, RELIABILITY
§3 #38-#41; docs/leases.md):

* a worker stopped with SIGSTOP past its lease, then SIGCONT: another server re-queues and
  finishes the run; the stopped worker's late writes are refused by the epoch, and the run
  finishes once (POSIX: SIGSTOP has no Windows equivalent);
* a server killed with kill -9 leaves its run RUNNING; the next `cadenza serve` reclaims it
  at start (the holder's pid is dead) without waiting for the lease to expire.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.lease_home import (
    enqueue,
    freeze_outside_a_write,
    kill_tree,
    make_home,
    open_store,
    run_state,
)
from tests.e2e.serve_helpers import Served, eventually


def _events(home: Path, run_id: str) -> list[str]:
    with open_store(home) as store:
        return [e.event_type for e in store.list_events(run_id=run_id, limit=1000)]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP/SIGCONT are POSIX signals")
@pytest.mark.reliability_case(40)
def test_a_worker_stopped_past_its_lease_loses_the_run_to_another(tmp_path: Path) -> None:
    attempts = tmp_path / "attempts.txt"
    home = make_home(tmp_path / "home", f"""
    [jobs.j]
    [[jobs.j.steps]]
    name = "work"
    type = "python"
    callable = "cz_lease_tasks:work"
    op_kwargs = {{ log_file = "{attempts.as_posix()}", seconds = 4 }}
    """, lease="3s")
    first = Served(home)
    second: Served | None = None
    out_first: str | None = None
    try:
        first.wait_ready()
        run_id = enqueue(home, "j")
        eventually(lambda: attempts.exists() and attempts.read_text().strip(), 30,
                   "the first attempt")
        held = run_state(home, run_id)
        assert held.state.value == "RUNNING"
        assert held.lease_owner.split(":")[1] == str(first.proc.pid)
        freeze_outside_a_write(first.proc.pid, home)
        stopped_at = time.monotonic()
        second = Served(home)
        second.wait_ready()
        done = eventually(lambda: (r := run_state(home, run_id)).state.value == "SUCCEEDED"
                          and r, 60, "the run finished by the second server")
        assert time.monotonic() - stopped_at > 3  # not before the lease expired
        assert done.lease_epoch > held.lease_epoch
        os.kill(first.proc.pid, signal.SIGCONT)
        # The first server wakes up: its renewal and its step's end are refused. Its
        # graceful stop lets its worker finish the run it believes it holds (the lease
        # keeper stops after the workers): once it exited, every write it tried is done.
        out_first = first.stop()
        after = run_state(home, run_id)
        assert (after.state.value, after.lease_epoch) == ("SUCCEEDED", done.lease_epoch)
        with open_store(home) as store:
            steps = store.list_step_runs(run_id)
        assert [(s.attempt, s.state.value, s.error_class) for s in steps] == [
            (1, "FAILED", "lost"), (2, "SUCCEEDED", None)]
        events = _events(home, run_id)
        assert events.count("RUN_FINISHED") == 1 and events.count("RUN_RECOVERED") == 1
        assert len(attempts.read_text().split()) == 2  # at-least-once: both attempts ran
    finally:
        try:
            os.kill(first.proc.pid, signal.SIGCONT)
        except OSError:
            pass
        if out_first is None:
            out_first = first.stop()
        if second is not None:
            out_second = second.stop()
            assert f"run {run_id} of j ended SUCCEEDED" in out_second
    # The first server learnt that the run is no longer its own: from a refused write of the
    # step's end or from its next renewal, whichever came first after SIGCONT.
    assert (f"run {run_id} of j ended (lost)" in out_first
            or f"run {run_id}: lease lost: another holder took the run" in out_first), out_first


def test_serve_start_reclaims_the_run_a_killed_server_left(tmp_path: Path) -> None:
    attempts = tmp_path / "attempts.txt"
    marker = (tmp_path / "marker").as_posix()
    home = make_home(tmp_path / "home", f"""
    [jobs.j]
    [[jobs.j.steps]]
    name = "work"
    type = "python"
    callable = "cz_lease_tasks:work"
    op_kwargs = {{ log_file = "{attempts.as_posix()}", seconds = 600, once_marker = "{marker}" }}
    """)  # the default lease of 60 s: the reclaim must not wait for it
    first = Served(home)
    try:
        first.wait_ready()
        run_id = enqueue(home, "j")
        eventually(lambda: (tmp_path / "marker").exists(), 30, "the first attempt")
    finally:
        kill_tree(first.proc.pid)
        first.output()  # reaps it and closes its pipe
    left = run_state(home, run_id)
    assert left.state.value == "RUNNING"
    second = Served(home)
    try:
        second.wait_ready()
        started = time.monotonic()
        eventually(lambda: run_state(home, run_id).state.value == "SUCCEEDED", 30,
                   "the reclaimed run to finish")
        assert time.monotonic() - started < 30  # well before the 60 s lease expired
        with open_store(home) as store:
            steps = store.list_step_runs(run_id)
        assert [(s.state.value, s.error_class) for s in steps] == [
            ("FAILED", "lost"), ("SUCCEEDED", None)]
        assert "RUN_RECOVERED" in _events(home, run_id)
    finally:
        out = second.stop()
    assert f"run {run_id} of j reclaimed at start" in out, out
