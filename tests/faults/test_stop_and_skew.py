"""Two more faults in the three-node harness (tests/faults/cluster.py; docs/reliability.md):

* a node stopped with SIGSTOP while it runs steps (the node that polled first; it may lead
  too), for more than twice the run lease: its runs are taken back and finished elsewhere;
  its step's child process stops by itself, so when the node is woken nothing of it
  overlaps the new attempt;
* a node whose **wall clock runs five minutes ahead** among two good ones: it reports
  `degraded` with its skew, never leads (not even when the leader is killed: the other good
  node takes over), and the minutes fire once.

POSIX signals and real minute boundaries: about a minute each; skipped on Windows.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from cadenza.domain.states import RunState
from cadenza.store.boundary import NewRun
from tests.e2e.serve_helpers import eventually
from tests.faults.cluster import LEASE, Cluster, check_invariants
from tests.support.pg_cluster import PrivatePostgres

pytestmark = pytest.mark.timeout(300)


def _holders(cluster: Cluster, run_ids: list[str]) -> dict[str, int | None]:
    with cluster.store() as store:
        runs = [store.get_run(run_id) for run_id in run_ids]
    pids = {n.proc.pid: i for i, n in enumerate(cluster.nodes) if n is not None}
    return {r.id: pids.get(int(r.lease_owner.split(":")[1])) if r.lease_owner
            and r.state is RunState.RUNNING else None for r in runs if r is not None}


def test_a_stopped_node_loses_its_runs_and_its_step_never_overlaps(
        tmp_path: Path, pg: PrivatePostgres) -> None:
    cluster = Cluster(tmp_path, pg)
    try:
        cluster.start()
        with cluster.store() as store:
            run_ids = store.create_runs([NewRun("long", "manual:test") for _ in range(4)])
        # The node that polls first takes them (up to the job's 4), leader or not.
        held = eventually(lambda: [(r, n) for r, n in _holders(cluster, run_ids).items()
                                   if n is not None], 20, "a run held by a node")
        run_id, victim = held[0]
        time.sleep(1)  # in the middle of its eight seconds
        cluster.pause(victim)
        try:
            eventually(lambda: _holders(cluster, [run_id])[run_id] not in (None, victim),
                       4 * LEASE + 10, "the run taken back by another node")
        finally:
            cluster.resume(victim)
        with cluster.store() as store:
            eventually(lambda: all((r := store.get_run(i)) is not None
                                   and r.state is RunState.SUCCEEDED for i in run_ids),
                       90, "every run finished")
            assert store.list_events(run_id=run_id, event_type="RUN_RECOVERED")
        time.sleep(2)  # the woken node's child, if any, would write its effect now
        check_invariants(cluster, [])
    finally:
        cluster.close()


def test_a_node_five_minutes_ahead_never_leads_and_says_it_is_degraded(
        tmp_path: Path, pg: PrivatePostgres) -> None:
    cluster = Cluster(tmp_path, pg, skewed={2: timedelta(minutes=5)})
    try:
        cluster.start(first=0)
        skewed = cluster.nodes[2]
        health = httpx.get(f"http://127.0.0.1:{skewed.port}/api/health", timeout=5).json()
        assert health["status"] == "degraded", health
        assert 290 <= health["clock_skew_seconds"] <= 310, health
        boundary = cluster.before_next_minute(2)
        cluster.kill(0)
        eventually(lambda: cluster.leader() == 1, 2 * LEASE + 5, "node 1 leading")
        eventually(lambda: _tick_done(cluster, boundary), 60, "the boundary's fire run")
        time.sleep(2 * LEASE)
        assert cluster.leader() == 1  # never the skewed node
        check_invariants(cluster, [boundary])
        with cluster.store() as store:
            holders = {str(e.payload.get("holder", "")) for e in
                       store.list_events(event_type="LEADERSHIP") if e.payload.get("leading")}
        assert not any(f":{skewed.proc.pid}:" in h or h.endswith(f":{skewed.proc.pid}")
                       for h in holders), holders
    finally:
        cluster.close()


def _tick_done(cluster: Cluster, boundary: object) -> bool:
    with cluster.store() as store:
        return any(r.scheduled_for == boundary and r.state is RunState.SUCCEEDED
                   for r in store.list_runs(job="tick", limit=1000))
