"""A node partitioned from the database by dropped packets: node 0 of three runs in a network
namespace of its own, and the test takes the host's end of its link down (every packet
vanishes: no reset, no refusal, as behind a pulled cable or a dead switch), across a minute
boundary, while it leads and holds runs in flight; then heals it.

Another node leads within the lease; the boundary's minute fires once, not MISSED; the runs
node 0 held are taken back and finished elsewhere, no step running in two processes at once;
healed, node 0 finds its term gone and stays a follower (tests/faults/cluster.py;
docs/reliability.md). Linux with CAP_NET_ADMIN (tests/support/netns.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cadenza.domain.states import RunState
from cadenza.store.boundary import NewRun
from tests.conftest import service_missing
from tests.e2e.serve_helpers import eventually
from tests.faults.cluster import LEASE, Cluster, check_invariants
from tests.support.netns import Netns, why_not
from tests.support.pg_cluster import PrivatePostgres

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def netns() -> Iterator[Netns]:
    why = why_not()
    if why is not None:
        service_missing("a network namespace (iproute2, CAP_NET_ADMIN)", why)
    made = Netns()
    try:
        yield made
    finally:
        made.close()


def _holders(cluster: Cluster, run_ids: list[str]) -> dict[str, int | None]:
    with cluster.store() as store:
        runs = [store.get_run(run_id) for run_id in run_ids]
    pids = {n.proc.pid: i for i, n in enumerate(cluster.nodes) if n is not None}
    return {r.id: pids.get(int(r.lease_owner.split(":")[1])) if r.lease_owner
            and r.state is RunState.RUNNING else None for r in runs if r is not None}


def test_a_leader_partitioned_by_dropped_packets_is_replaced_and_steps_aside(
        tmp_path: Path, pg: PrivatePostgres, netns: Netns) -> None:
    cluster = Cluster(tmp_path, pg, netns=netns)
    run_ids: list[str] = []

    def give_node_0_work() -> None:
        """Long runs, taken by node 0 while it is alone (the others take the rest later)."""
        with cluster.store() as store:
            run_ids.extend(store.create_runs([NewRun("long", "manual:test")
                                              for _ in range(24)]))
        eventually(lambda: 0 in _holders(cluster, run_ids).values(), 20,
                   "node 0 running one of the long runs")

    try:
        # Start about 35 s before a minute: node 0, alone, takes long runs (8 s each, four at
        # a time: 48 s of work), and is still running some when the partition comes.
        boundary = cluster.before_next_minute(35, at_least=40)
        cluster.start(first=0, alone=give_node_0_work)
        time.sleep(max((boundary - cluster.now()).total_seconds() - 3, 0))
        assert cluster.leader() == 0
        assert 0 in _holders(cluster, run_ids).values()
        cluster.partition()
        cut = time.monotonic()
        eventually(lambda: cluster.leader() not in (None, 0), 2 * LEASE + 5,
                   "another node leading")
        assert time.monotonic() - cut <= LEASE * 1.25 + 3
        try:
            eventually(lambda: _tick_done(cluster, boundary), 60, "the boundary's fire run")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the database's sessions:\n{cluster.sessions()}") \
                from None
        with cluster.store() as store:
            eventually(lambda: all((r := store.get_run(i)) is not None
                                   and r.state is RunState.SUCCEEDED for i in run_ids),
                       150, "the long runs finished elsewhere")
        cluster.unpartition()
        time.sleep(3 * LEASE)  # the healed node looks again: the term is another's
        assert cluster.leader() not in (None, 0)
        check_invariants(cluster, [boundary])
        with cluster.store() as store:
            taken_back = [e for i in run_ids
                          for e in store.list_events(run_id=i, event_type="RUN_RECOVERED")]
        assert taken_back, "node 0's runs were taken back"
    finally:
        cluster.close()


def _tick_done(cluster: Cluster, boundary: object) -> bool:
    with cluster.store() as store:
        return any(r.scheduled_for == boundary and r.state is RunState.SUCCEEDED
                   for r in store.list_runs(job="tick", limit=1000))
