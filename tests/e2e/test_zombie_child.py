"""A worker that cannot renew stops its children (docs/leases.md "The child's own deadline"),
end to end with real `cadenza serve` processes on one SQLite file.

`serve` A runs a python step (a child process that writes a line every 0.1 s); A is stopped
with SIGSTOP past its run lease; `serve` B re-queues the run and runs the step again. The
child of A must have stopped on its own before B's child wrote its first line: at any instant
at most one process performs the run's step (POSIX: SIGSTOP has no Windows equivalent).
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
    gone,
    make_home,
    open_store,
    run_state,
)
from tests.e2e.serve_helpers import Served, eventually

TICKER = '''
"""A step that writes "pid wall-time" to a file every 0.1 s for a while."""

import os
import time


def tick(log_file, seconds=12):
    end = time.time() + float(seconds)
    while time.time() < end:
        with open(log_file, "a") as fh:
            fh.write(f"{os.getpid()} {time.time()}\\n")
        time.sleep(0.1)
    return 1
'''


def _lines(path: Path) -> list[tuple[int, float]]:
    out = []
    for line in path.read_text().splitlines():
        pid, _, at = line.partition(" ")
        if at:
            out.append((int(pid), float(at)))
    return out


@pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP/SIGCONT are POSIX signals")
def test_the_child_of_a_stopped_worker_stops_before_another_node_runs_the_step(
        tmp_path: Path) -> None:
    ticks = tmp_path / "ticks.txt"
    home = make_home(tmp_path / "home", f"""
    [jobs.j]
    [[jobs.j.steps]]
    name = "tick"
    type = "python"
    callable = "cz_ticker:tick"
    op_kwargs = {{ log_file = "{ticks.as_posix()}", seconds = 12 }}
    """, lease="3s")
    (home / "plugins" / "cz_ticker.py").write_text(TICKER, encoding="utf-8")
    first = Served(home)
    second: Served | None = None
    out_first: str | None = None
    try:
        first.wait_ready()
        run_id = enqueue(home, "j")
        eventually(lambda: ticks.exists() and len(_lines(ticks)) >= 3, 30, "the first child")
        child_a = _lines(ticks)[0][0]
        held = run_state(home, run_id)
        assert held.lease_owner.split(":")[1] == str(first.proc.pid)
        freeze_outside_a_write(first.proc.pid, home)
        stopped_at = time.time()
        second = Served(home)
        second.wait_ready()
        done = eventually(lambda: (r := run_state(home, run_id)).state.value == "SUCCEEDED"
                          and r, 60, "the run finished by the second server")
        assert done.lease_epoch > held.lease_epoch
        lines = _lines(ticks)
        of_a = [at for pid, at in lines if pid == child_a]
        others = [(pid, at) for pid, at in lines if pid != child_a]
        assert others, "the second server's child wrote nothing"
        first_of_b = min(at for _, at in others)
        # A's child stopped on its own, before the lease's end: before B could take the run.
        assert max(of_a) < first_of_b, (
            f"A's child wrote until {max(of_a) - stopped_at:.1f}s after SIGSTOP, B's began "
            f"at {first_of_b - stopped_at:.1f}s: the step ran twice at once")
        assert max(of_a) - stopped_at < 3.0  # within the 3 s lease
        assert gone(child_a)
        os.kill(first.proc.pid, signal.SIGCONT)
        out_first = first.stop()
        after = run_state(home, run_id)
        assert (after.state.value, after.lease_epoch) == ("SUCCEEDED", done.lease_epoch)
        with open_store(home) as store:
            steps = store.list_step_runs(run_id)
        assert [(s.attempt, s.state.value) for s in steps] == [(1, "FAILED"), (2, "SUCCEEDED")]
    finally:
        try:
            os.kill(first.proc.pid, signal.SIGCONT)
        except OSError:
            pass
        if out_first is None:
            out_first = first.stop()
        if second is not None:
            second.stop()
    # The child said why it stopped (on its stderr, which reaches A's output when A runs
    # again); A itself learnt that the run is no longer its own.
    assert "stopped itself: its run's lease was not extended in time" in out_first or (
        f"run {run_id} of j ended (lost)" in out_first), out_first
