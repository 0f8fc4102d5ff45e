"""A stopped leader does not hold the scheduler: two real `cadenza serve` nodes on one
PostgreSQL database, the leader stopped with SIGSTOP across a minute boundary for more than
twice its lease (docs/scheduling.md, "Who fires").

The other node takes the next term within the lease, records the boundary's fire (late or on
time, within its grace: never MISSED), and runs it once. Woken with SIGCONT, the former
leader finds its term gone: its renewal (or its first write as leader) is refused, it says
so in its log, and it writes nothing as leader. Real time throughout (the lease is judged
by PostgreSQL's clock): the test waits for the next minute boundary, about a minute at
most. POSIX signals: skipped on
Windows, where a process cannot be stopped this way.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from cadenza.domain.states import RunState
from cadenza.scheduler.service import LOOKAHEAD
from tests.e2e.lease_home import make_home, open_store
from tests.e2e.serve_helpers import Served, eventually

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP is POSIX only")

LEASE = 3.0
STOPPED = 2 * LEASE + 4  # more than twice the lease, across the minute boundary


def _leader_pid(home: Path) -> int | None:
    with open_store(home) as store, store.read() as conn:
        row = conn.execute(sa.text(
            "SELECT holder FROM leadership WHERE until > clock_timestamp()")).first()
    return int(row.holder.split(":")[1]) if row is not None else None


@pytest.mark.timeout(240)
@pytest.mark.reliability_case(40)
def test_a_stopped_leader_is_replaced_and_its_late_writes_refused(
        tmp_path: Path, pg_url: str) -> None:
    log = tmp_path / "runs.txt"
    home = make_home(tmp_path / "home", f"""
    [jobs.tick]
    schedule = "* * * * *"
    timezone = "UTC"
    [[jobs.tick.steps]]
    name = "work"
    type = "python"
    callable = "cz_lease_tasks:work"
    op_kwargs = {{ log_file = "{log.as_posix()}", seconds = 0 }}
    """, lease="3s", store_url=pg_url, extra=f'\n[server]\nleader_lease = "{LEASE:g}s"\n')
    nodes = [Served(home), Served(home)]
    outputs: dict[int, str] = {}
    stopped: Served | None = None
    try:
        for node in nodes:
            node.wait_ready()
        leader_pid = eventually(lambda: _leader_pid(home), 30, "a leader")
        stopped = next(n for n in nodes if n.proc.pid == leader_pid)
        other = next(n for n in nodes if n is not stopped)
        # Stop it a second before it would record the next minute boundary's fire (fires
        # are recorded LOOKAHEAD ahead): the other node must record it.
        before = LOOKAHEAD.total_seconds() + 1
        now = datetime.now(UTC)
        boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        if (boundary - now).total_seconds() < before + 5:
            boundary += timedelta(minutes=1)
        time.sleep(max((boundary - now).total_seconds() - before, 0))
        os.kill(stopped.proc.pid, signal.SIGSTOP)
        try:
            took_over = eventually(lambda: _leader_pid(home) == other.proc.pid and time.time(),
                                   2 * LEASE + 2, "the other node leading")
            assert took_over
            time.sleep(max(STOPPED - LEASE, 0))
        finally:
            os.kill(stopped.proc.pid, signal.SIGCONT)
        fired = eventually(lambda: [r for r in _ticks(home) if r.scheduled_for == boundary
                                    and r.state is RunState.SUCCEEDED], 60,
                           "the boundary's fire run")
        assert len(fired) == 1
        time.sleep(2 * LEASE)  # the former leader wakes, looks and steps aside
        assert _leader_pid(home) == other.proc.pid
    finally:
        for node in nodes:
            outputs[node.proc.pid] = node.stop()
    runs = _ticks(home)
    assert [r for r in runs if r.state is RunState.MISSED] == [], runs
    fires = [r.scheduled_for for r in runs]
    assert len(fires) == len(set(fires)), fires  # no fire recorded twice
    assert stopped is not None
    woken = outputs[stopped.proc.pid]
    # It says so in its log, whichever of its threads looks first: the renewal (refused) or
    # a write as leader (refused by the fence, which also ends its term here).
    assert ("scheduler leadership lost" in woken
            or "scheduler write refused, this node no longer leads" in woken), woken
    with open_store(home) as store:
        terms = [e.payload.get("term") for e in store.list_events(event_type="LEADERSHIP")
                 if e.payload.get("leading")]
    assert len(terms) >= 2 and terms == sorted(terms), terms


def _ticks(home: Path) -> list:  # type: ignore[type-arg]
    with open_store(home) as store:
        return [r for r in store.list_runs(job="tick", limit=1000) if r.trigger == "scheduled"]
