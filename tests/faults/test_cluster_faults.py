"""Three real nodes on one PostgreSQL database, through proxies the test controls: the leader
killed, the leader cut from the database, a worker killed in the middle of a step, the
database restarted (tests/faults/cluster.py; docs/reliability.md).

Each test waits for a real minute boundary (the fires are judged on the database's clock),
about a minute at most, and checks the invariants afterwards.
"""

from __future__ import annotations

import time

import pytest

from cadenza.domain.states import RunState
from cadenza.store.boundary import NewRun
from tests.e2e.serve_helpers import eventually
from tests.faults.cluster import LEASE, Cluster, check_invariants, effects

pytestmark = pytest.mark.timeout(300)


def _tick_done(cluster: Cluster, boundary: object) -> bool:
    with cluster.store() as store:
        return any(r.scheduled_for == boundary and r.state is RunState.SUCCEEDED
                   for r in store.list_runs(job="tick", limit=1000))


def _new_leader(cluster: Cluster, former: int) -> tuple[int] | None:
    """(the new leader's index,) once another node than ``former`` leads (a tuple: node 0
    is a true answer too)."""
    now = cluster.leader()
    return (now,) if now is not None and now != former else None


@pytest.mark.reliability_case(39)
def test_the_leader_killed_is_replaced_within_its_lease(cluster: Cluster) -> None:
    first = cluster.leader()
    assert first is not None
    boundary = cluster.before_next_minute(2)
    cluster.kill(first)
    killed = time.monotonic()
    eventually(lambda: _new_leader(cluster, first), 2 * LEASE + 5, "a new leader")
    assert time.monotonic() - killed <= LEASE * 1.25 + 3
    eventually(lambda: _tick_done(cluster, boundary), 60, "the boundary's fire run")
    check_invariants(cluster, [boundary])


def test_a_leader_cut_from_the_database_is_replaced_and_steps_aside(cluster: Cluster) -> None:
    first = cluster.leader()
    assert first is not None
    boundary = cluster.before_next_minute(3)
    cluster.cut(first)
    eventually(lambda: _new_leader(cluster, first), 2 * LEASE + 5, "a new leader")
    eventually(lambda: _tick_done(cluster, boundary), 60, "the boundary's fire run")
    cluster.heal(first)
    time.sleep(2 * LEASE)  # the healed node looks again: the term is another's
    assert cluster.leader() not in (None, first)
    check_invariants(cluster, [boundary])
    cluster.close()
    said = cluster.outputs[cluster.nodes[first].proc.pid]
    assert "scheduler leadership lost" in said or "cannot reach" in said, said


@pytest.mark.reliability_case(38)
def test_a_worker_killed_mid_step_never_runs_a_step_twice_at_once(cluster: Cluster) -> None:
    with cluster.store() as store:
        run_id = store.create_runs([NewRun("long", "manual:test")])[0]

    def holder() -> int | None:
        with cluster.store() as store:
            run = store.get_run(run_id)
        if run is None or run.state is not RunState.RUNNING or not run.lease_owner:
            return None
        pid = int(run.lease_owner.split(":")[1])
        return next((i for i, n in enumerate(cluster.nodes) if n.proc.pid == pid), None)

    (victim,) = eventually(lambda: (h,) if (h := holder()) is not None else None, 30,
                           "the run taken by a node")
    time.sleep(2)  # in the middle of its eight seconds
    cluster.kill(victim)
    eventually(lambda: holder() not in (None, victim), 60, "the run taken back elsewhere")
    # (holder() is an index; "not in (None, victim)" is a bool, true for node 0 too)
    with cluster.store() as store:
        eventually(lambda: (r := store.get_run(run_id)) is not None
                   and r.state is RunState.SUCCEEDED, 60, "the run finished")
        assert store.list_events(run_id=run_id, event_type="RUN_RECOVERED")
    check_invariants(cluster, [])
    # The killed node's step process stops by itself once the run's lease is not extended;
    # whatever it finished ended before the attempt elsewhere began (check_invariants).
    assert [e for e in effects(cluster.effects) if e.run == run_id]


@pytest.mark.reliability_case(27)
def test_the_database_restarted_mid_run(cluster: Cluster) -> None:
    with cluster.store() as store:
        run_id = store.create_runs([NewRun("long", "manual:test")])[0]
    boundary = cluster.before_next_minute(2, at_least=12)
    cluster.pg.restart()
    eventually(lambda: _tick_done(cluster, boundary), 90, "the boundary's fire run")
    with cluster.store() as store:
        eventually(lambda: (r := store.get_run(run_id)) is not None
                   and r.state is RunState.SUCCEEDED, 90, "the long run finished")
    check_invariants(cluster, [boundary])
    assert cluster.leader() is not None
