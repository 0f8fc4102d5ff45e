"""A process of worker threads that lease pool members through the real claim (driven by
test_pool_lease_safety.py).

Usage: ``python pool_lease_worker.py URL LEASES THREADS OUT``. Each thread loops: claim one
queued run of job ``lease`` (its claim hook leases one unit; the first step's start moves
it RUNNING, in the same transaction, as the executor does), note the unit and the time the
claim committed, note the time again just before the run's end, and end the run
SUCCEEDED (the run end hook releases the unit). Intervals are written to OUT as lines
``unit start end run`` (microseconds of the wall clock this host shares with the other
process). Prints ``done N`` with the leases this process made.
"""

from __future__ import annotations

import sys
import threading
from datetime import timedelta

import sqlalchemy as sa

from cadenza.clock import SystemClock
from cadenza.config.schema_settings import Pool, PoolMember
from cadenza.domain.states import RunState, StepState
from cadenza.resources.plan import PoolPlan
from cadenza.resources.pools import install_leaser
from cadenza.store import Store
from cadenza.store.boundary import Boundary, RunEnd, StepEnd, StepStart
from cadenza.store.tables import resources

UNITS = 4


def plan() -> PoolPlan:
    """A pool ``units`` of :data:`UNITS` members without cooldown, needed by job ``lease``."""
    pool = Pool(kind="unit", cooldown=timedelta(0),
                members=[PoolMember(id=f"u-{k}") for k in range(1, UNITS + 1)])
    return PoolPlan({"units": pool}, {m.id: ("units", m) for m in pool.members},
                    {"lease": {"units": 1}})


def main(url: str, leases: int, threads: int, out: str) -> None:
    store = Store.open(url, migrate=False)
    install_leaser(store, plan())
    clock = SystemClock()
    lock = threading.Lock()
    freed = threading.Condition(lock)
    left = [leases]
    lines: list[str] = []

    def micros() -> int:
        now = clock.now()
        return int(now.timestamp() * 1_000_000)

    def work(k: int) -> None:
        owner = f"lease-worker:{k}"
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1  # this thread's next lease
            while True:
                with store.write() as conn:
                    claimed = store.claim_runs(owner, clock.now() + timedelta(minutes=5),
                                               job_ids=["lease"], conn=conn)
                    if claimed:
                        run = claimed[0]
                        result = store.record_boundaries(
                            [Boundary(run.id, run.lease_epoch,
                                      starts=[StepStart("s", "python")])], conn=conn)
                        break
                # Every unit is held: wait for a release (this process's, or a few ms for
                # the other's) instead of claiming and giving back in a tight loop.
                with freed:
                    freed.wait(0.005)
            started = micros()
            with store.read() as c:
                unit = c.execute(sa.select(resources.c.resource_id)
                                 .where(resources.c.lease_owner == run.id)).scalar_one()
            ending = micros()
            step_run_id = result[0].step_run_ids[0]
            done = store.record_boundaries([Boundary(
                run.id, run.lease_epoch,
                step_end=StepEnd(step_run_id, "s", "python", 1, StepState.SUCCEEDED),
                run_end=RunEnd(RunState.SUCCEEDED))])
            assert done[0].applied
            with freed:
                lines.append(f"{unit} {started} {ending} {run.id}")
                freed.notify()

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    store.close()
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"done {len(lines)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
