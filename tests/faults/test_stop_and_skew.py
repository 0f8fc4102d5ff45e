"""Two more faults in the three-node harness (tests/faults/cluster.py; docs/reliability.md):

* a node stopped with SIGSTOP while it runs steps (the node that polled first; it may lead
  too), for more than twice the run lease: its runs are taken back and finished elsewhere;
  its step's child process stops by itself, so when the node is woken nothing of it
  overlaps the new attempt;
* a node whose **wall clock runs five minutes ahead** among two good ones: it reports
  `degraded` with its skew, never leads (not even when the leader is killed: the other good
  node takes over), and the minutes fire once;
* a node whose **wall clock runs five minutes behind**: the same, and its reaper takes none
  of the killed leader's runs back (the good node does), and a run submitted through its API
  carries the database's time.

POSIX signals and real minute boundaries: about a minute each; skipped on Windows.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
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


@pytest.mark.reliability_case(49)
def test_a_node_five_minutes_behind_never_leads_nor_reaps_and_stamps_the_databases_time(
        tmp_path: Path, pg: PrivatePostgres) -> None:
    cluster = Cluster(tmp_path, pg, skewed={2: -timedelta(minutes=5)})
    run_ids: list[str] = []

    def give_node_0_work() -> None:
        """Long runs held by node 0 (it takes them alone) when it is killed."""
        with cluster.store() as store:
            run_ids.extend(store.create_runs([NewRun("long", "manual:test")
                                              for _ in range(4)]))
        eventually(lambda: 0 in _holders(cluster, run_ids).values(), 20,
                   "node 0 running a long run")

    try:
        cluster.start(first=0, alone=give_node_0_work)
        skewed = cluster.nodes[2]
        health = httpx.get(f"http://127.0.0.1:{skewed.port}/api/health", timeout=5).json()
        assert health["status"] == "degraded", health
        assert -310 <= health["clock_skew_seconds"] <= -290, health
        assert health["reason"].startswith("clock skew: "), health
        assert "behind the store's time" in health["reason"], health
        assert "nor leads the scheduler" in health["reason"], health

        # A run submitted through the slow node carries the database's time.
        made = CliRunner().invoke(app, ["--home", str(cluster.homes[2]), "tokens", "create",
                                        "ci", "--role", "operator"])
        assert made.exit_code == 0, made.output
        token = next(w for w in made.output.split() if w.startswith("cdz_"))
        submitted = httpx.post(f"http://127.0.0.1:{skewed.port}/api/jobs/load/runs", json={},
                               headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert submitted.status_code in (200, 201, 202), submitted.text
        with cluster.store() as store:
            created = store.get_run(submitted.json()["run_id"])
        assert created is not None
        assert abs(created.created_at - datetime.now(UTC)) < timedelta(seconds=30), created

        # The leader, holding long runs, is killed: the good node leads and takes its runs
        # back; the slow one does neither, and the next minute fires once.
        assert 0 in _holders(cluster, run_ids).values()
        cluster.kill(0)
        eventually(lambda: cluster.leader() == 1, 2 * LEASE + 5, "node 1 leading")
        with cluster.store() as store:
            eventually(lambda: all((r := store.get_run(i)) is not None
                                   and r.state is RunState.SUCCEEDED for i in run_ids),
                       90, "node 0's long runs finished elsewhere")
            recovered = [e for i in run_ids
                         for e in store.list_events(run_id=i, event_type="RUN_RECOVERED")]
        assert recovered, "node 0's runs were taken back"
        boundary = cluster.before_next_minute(60, at_least=5)  # no sleep: the next minute
        eventually(lambda: _tick_done(cluster, boundary), 75, "the next minute's fire run")
        assert cluster.leader() == 1  # never the skewed node
        check_invariants(cluster, [boundary])
        with cluster.store() as store:
            holders = {str(e.payload.get("holder", "")) for e in
                       store.list_events(event_type="LEADERSHIP") if e.payload.get("leading")}
        assert not any(f":{skewed.proc.pid}:" in h or h.endswith(f":{skewed.proc.pid}")
                       for h in holders), holders
    finally:
        cluster.close()
    said = cluster.outputs[cluster.nodes[2].proc.pid]
    assert "behind the store's time" in said, said
    assert " recovered from " not in said, said  # its reaper took nothing back
    reaped = cluster.outputs[cluster.nodes[1].proc.pid]
    assert " recovered from " in reaped, reaped
