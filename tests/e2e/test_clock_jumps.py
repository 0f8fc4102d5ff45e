"""A node whose wall clock steps (an NTP step) forward one hour, then back one hour, under
libfaketime (Debian's ``faketime``), end to end with a real `cadenza serve` on SQLite.

The fake time is an offset from the real one, read from a file at every clock read
(``FAKETIME_TIMESTAMP_FILE``, ``FAKETIME_NO_CACHE``); monotonic time stays real, as it does
on an NTP step. Each step is followed by a touch of jobs.toml, whose reload makes the
scheduler look at once instead of at its next wake-up (at most a minute later).

Forward: the hour the clock skipped is downtime for the job's ``on_missed = "skip"``: each
of its fires is recorded once, MISSED (the last ones within ``missed_grace`` run). Back:
the fires already recorded are never recorded or run again.

Python's ``time.sleep`` fails under libfaketime when the monotonic clock is left real
(``clock_nanosleep`` answers EINVAL), so the job's step neither sleeps nor runs in a child
process; the node itself waits on events, which work.
"""

from __future__ import annotations

import glob
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cadenza.domain.states import RunState
from tests.conftest import service_missing
from tests.e2e.lease_home import make_home, open_store
from tests.e2e.serve_helpers import Served, eventually

FIRE = datetime(2027, 1, 5, 2, 0, tzinfo=UTC)
TASK = '''
def mark(log_file):
    with open(log_file, "a") as fh:
        fh.write("ran\\n")
'''
"""The step: no sleep (libfaketime's clock_nanosleep fails with a real monotonic clock),
in the node's own process (a step's child process sleeps in its watch)."""


def _libfaketime() -> str:
    if sys.platform != "linux":
        pytest.skip("libfaketime is a Linux LD_PRELOAD library")
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        service_missing("libfaketime (Debian package faketime)", "not installed")
    return found[0]


def _offset(at: datetime) -> str:
    return f"{int((at - datetime.now(UTC)).total_seconds()):+d}"


def _ticks(home: Path) -> list:  # type: ignore[type-arg]
    with open_store(home) as store:
        return [r for r in store.list_runs(job="tick", limit=1000) if r.trigger == "scheduled"]


def _step(clock_file: Path, home: Path, to: datetime) -> None:
    """Step the node's wall clock to ``to`` and make it look (a touch of jobs.toml)."""
    clock_file.write_text(_offset(to), encoding="utf-8")
    jobs = home / "jobs.toml"
    jobs.write_text(jobs.read_text(encoding="utf-8") + "\n# touched\n", encoding="utf-8")


@pytest.mark.timeout(240)
@pytest.mark.reliability_case(48)
def test_a_clock_stepping_forward_then_back_fires_each_time_once(tmp_path: Path) -> None:
    library = _libfaketime()
    ran = tmp_path / "ran.txt"
    home = make_home(tmp_path / "home", f"""
    [jobs.tick]
    schedule = "* * * * *"
    timezone = "UTC"
    on_missed = "skip"
    [[jobs.tick.steps]]
    name = "work"
    type = "python"
    isolation = "thread"
    callable = "cz_clock_tasks:mark"
    op_kwargs = {{ log_file = "{ran.as_posix()}" }}
    """)
    (home / "plugins" / "cz_clock_tasks.py").write_text(TASK, encoding="utf-8")
    clock_file = tmp_path / "faketime"
    # Time to boot first: a schedule's cursor starts at the first tick.
    clock_file.write_text(_offset(FIRE - timedelta(seconds=20)), encoding="utf-8")
    node = Served(home, env={"LD_PRELOAD": library,
                             "FAKETIME_TIMESTAMP_FILE": str(clock_file),
                             "FAKETIME_NO_CACHE": "1",
                             "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    out = ""
    try:
        node.wait_ready(60)
        eventually(lambda: [r for r in _ticks(home) if r.scheduled_for == FIRE
                            and r.state is RunState.SUCCEEDED], 60, "the 02:00 fire run")
        # Forward one hour: 02:01 … 03:00 were skipped by the clock.
        _step(clock_file, home, FIRE + timedelta(hours=1, seconds=10))
        gap = [FIRE + timedelta(minutes=k) for k in range(1, 61)]
        eventually(lambda: {r.scheduled_for for r in _ticks(home)} >= set(gap), 60,
                   "the skipped hour recorded")
        after_forward = _ticks(home)
        missed = [r for r in after_forward if r.state is RunState.MISSED]
        assert len(missed) >= 58, [(r.scheduled_for, r.state) for r in after_forward]
        assert all(r.scheduled_for in gap for r in missed)
        latest = max(gap)
        eventually(lambda: [r for r in _ticks(home) if r.scheduled_for == latest
                            and r.state is RunState.SUCCEEDED], 60, "03:00 run (in grace)")
        # Back one hour (to 02:00:40): everything up to 03:00 is recorded already.
        recorded = {r.id for r in _ticks(home)}
        _step(clock_file, home, FIRE + timedelta(seconds=40))
        eventually(lambda: _reloads(home) >= 2, 30, "the second reload")
        again = _ticks(home)
        assert {r.id for r in again} == recorded, [(r.scheduled_for, r.state) for r in again]
    finally:
        out = node.stop()
    fires = [r.scheduled_for for r in _ticks(home)]
    assert len(fires) == len(set(fires)), out
    assert ran.read_text().count("ran") == len([r for r in _ticks(home)
                                                if r.state is RunState.SUCCEEDED])


def _reloads(home: Path) -> int:
    with open_store(home) as store:
        return len([e for e in store.list_events(event_type="CONFIG_CHANGED")
                    if e.message == "configuration reloaded"])
