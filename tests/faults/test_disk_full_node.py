"""A full disk on one node of three (tests/faults/cluster.py; docs/reliability.md).

With the store on PostgreSQL a node still writes to its own disk: under its home's
``data/`` (what its steps write there, the secrets and their key). Node 0's ``data/`` is a
real 4 MB tmpfs here. Node 0 leads, and runs ``spool`` steps (each writes a file there for
eight seconds) when, a few seconds before a minute boundary, the test fills that disk to the
last byte and keeps it full past the boundary; then frees it.

What a person on call sees: node 0 answers ``degraded`` in ``/api/health``, its reason naming
the disk and the directory, its log says so once; the other nodes answer ``ok``. What holds:
the minute fires once, not MISSED (node 0 still leads: the scheduler writes only to the
database); node 0 claims nothing while full; its steps in flight fail on the disk (retryable)
and are retried, and finished, by the other nodes, never two at once; freed, node 0 is back
to ``ok`` by itself and takes runs again.

Linux, root (a tmpfs mount: tests/support/tmpfs.py) and PostgreSQL's server binaries: skipped
with the reason otherwise (failing under ``CI=true`` where they should be there).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from cadenza.domain.states import RunState
from cadenza.node.local_disk import PROBE_SECONDS, SETTLE_SECONDS
from cadenza.store.boundary import NewRun
from tests.e2e.serve_helpers import eventually
from tests.faults.cluster import Cluster, check_invariants, effects
from tests.support.pg_cluster import PrivatePostgres
from tests.support.tmpfs import fill, small_tmpfs

pytestmark = pytest.mark.timeout(300)


def _health(cluster: Cluster, i: int) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{cluster.nodes[i].port}/api/health", timeout=5)


def _holders(cluster: Cluster, run_ids: list[str]) -> dict[str, int | None]:
    with cluster.store() as store:
        runs = [store.get_run(run_id) for run_id in run_ids]
    pids = {n.proc.pid: i for i, n in enumerate(cluster.nodes) if n is not None}
    return {r.id: pids.get(int(r.lease_owner.split(":")[1])) if r.lease_owner
            and r.state is RunState.RUNNING else None for r in runs if r is not None}


def _tick_done(cluster: Cluster, boundary: datetime) -> bool:
    with cluster.store() as store:
        return any(r.scheduled_for == boundary and r.state is RunState.SUCCEEDED
                   for r in store.list_runs(job="tick", limit=1000))


def _claims_by(cluster: Cluster, pid: int, since: float, until: float) -> list[str]:
    """The claims (the events that give a run its lease) that the node of ``pid`` made
    between those two times."""
    with cluster.store() as store:
        events = store.list_events(since=datetime.fromtimestamp(since, UTC), limit=100_000)
    return [f"{e.event_type} {e.run_id} {e.created_at.isoformat()}" for e in events
            if e.created_at.timestamp() < until
            and e.event_type in ("RUN_STATE_CHANGED", "STEP_STARTED")
            and "lease_owner" in (text := json.dumps(e.payload, default=str))
            and f":{pid}:" in text]


class KeptFull:
    """Fills ``data`` to the last byte and keeps it so (what a failed step removes is taken
    again at once) until :meth:`free`."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.filler = fill(data)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._top_up, daemon=True)
        self._thread.start()

    def _top_up(self) -> None:
        while not self._stop.wait(0.1):
            fill(self.data)

    def free(self) -> None:
        self._stop.set()
        self._thread.join()
        self.filler.unlink()


@pytest.mark.reliability_case(47)
def test_a_full_disk_on_one_node_degrades_it_and_its_runs_finish_elsewhere(
        tmp_path: Path, pg: PrivatePostgres) -> None:
    data = tmp_path / "node0" / "data"
    with small_tmpfs(data, "4m"):
        cluster = Cluster(tmp_path, pg)
        run_ids: list[str] = []

        def give_node_0_work() -> None:
            """Spool runs, taken by node 0 while it is alone (the others take the rest)."""
            with cluster.store() as store:
                run_ids.extend(store.create_runs([NewRun("spool", "manual:test")
                                                  for _ in range(24)]))
            eventually(lambda: 0 in _holders(cluster, run_ids).values(), 20,
                       "node 0 running a spool run")

        full: KeptFull | None = None
        try:
            # About 35 s before a minute: node 0, alone, takes spool runs (8 s each, two
            # workers and two claimed ahead), and still runs some when its disk fills.
            boundary = cluster.before_next_minute(35, at_least=40)
            cluster.start(first=0, alone=give_node_0_work)
            assert all(_health(cluster, i).json()["status"] == "ok" for i in range(3))
            time.sleep(max((boundary - cluster.now()).total_seconds() - 4, 0))
            assert cluster.leader() == 0
            assert 0 in _holders(cluster, run_ids).values(), "node 0 runs spool steps"
            node0 = cluster.nodes[0].proc.pid

            full = KeptFull(data)
            filled = time.time()
            said = eventually(lambda: (r := _health(cluster, 0)).status_code == 503 and r,
                              PROBE_SECONDS + 10, "node 0 saying degraded")
            seen_degraded = time.time()
            body = said.json()
            assert body["status"] == "degraded" and body["store_ok"] is True, body
            assert body["reason"].startswith("disk full: No space left on device (since "), body
            assert body["reason"].endswith(f"; {data})"), body
            assert body["leader"] is True, body  # the scheduler needs no local disk
            for i in (1, 2):
                assert _health(cluster, i).json()["status"] == "ok"

            # The minute fires once and runs elsewhere; node 0's spool steps in flight fail
            # on the disk and are retried by the others.
            eventually(lambda: _tick_done(cluster, boundary), 60, "the boundary's fire run")
            eventually(lambda: 0 not in _holders(cluster, run_ids).values(), 30,
                       "node 0 holding no spool run")
            time.sleep(max(boundary.timestamp() + 5 - time.time(), 0))
            assert _health(cluster, 0).status_code == 503  # full all along
            full.free()
            full = None
            freed = time.time()

            ok = eventually(lambda: (r := _health(cluster, 0)).status_code == 200 and r,
                            SETTLE_SECONDS + 4 * PROBE_SECONDS + 10, "node 0 back to ok")
            assert ok.json()["status"] == "ok" and ok.json()["reason"] is None
            with cluster.store() as store:
                eventually(lambda: all((r := store.get_run(i)) is not None
                                       and r.state is RunState.SUCCEEDED for i in run_ids),
                           150, "every spool run finished")

            # Node 0 takes runs again: the two others stopped for a moment (they hold no
            # run now), it runs what is queued.
            cluster.pause(1)
            cluster.pause(2)
            try:
                with cluster.store() as store:
                    loads = store.create_runs([NewRun("load", "manual:test") for _ in range(2)])
                    eventually(lambda: all((r := store.get_run(i)) is not None
                                           and r.state is RunState.SUCCEEDED for i in loads),
                               20, "node 0 running runs again")
            finally:
                cluster.resume(1)
                cluster.resume(2)
            assert {e.node for e in effects(cluster.effects) if e.run in loads} == {node0}
            check_invariants(cluster, [boundary])
            claims = _claims_by(cluster, node0, seen_degraded + 1, freed)
            with cluster.store() as store:
                (tick_id,) = [r.id for r in store.list_runs(job="tick", limit=1000)
                              if r.scheduled_for == boundary]
        finally:
            if full is not None:
                full.free()
            cluster.close()

    done = effects(cluster.effects)
    spooled = set(run_ids)
    failed_on_disk = [e for e in done if e.run in spooled and e.error]
    assert failed_on_disk, "node 0's spool steps in flight failed on its disk"
    assert {e.node for e in failed_on_disk} == {node0}, failed_on_disk
    assert all(e.error == "No space left on device" for e in failed_on_disk), failed_on_disk
    assert all(filled - 1 <= e.ended <= freed + 1 for e in failed_on_disk), failed_on_disk
    # Each of those runs then finished on another node (a later attempt, no error).
    for failed in failed_on_disk:
        later = [e for e in done if e.run == failed.run and e.attempt > failed.attempt
                 and not e.error]
        assert later and all(e.node != node0 for e in later
                             if e.began < freed), (failed, later)
    # Node 0 claimed nothing from the moment it said degraded (a second's margin) until its
    # disk was freed (the runs it had claimed ahead before began, and failed, meanwhile);
    # the boundary's tick ran elsewhere.
    assert claims == [], claims
    tick = [e for e in done if e.run == tick_id]
    assert tick and all(e.node != node0 for e in tick), tick
    said_log = cluster.outputs[node0]
    assert said_log.count(f"the data directory {data} cannot be written: disk full") == 1, \
        said_log
    assert f"the data directory {data} takes writes again" in said_log, said_log
    assert "Traceback" not in said_log, said_log
