"""A step's own ``requires`` (and an http step's ``via``): taken at that step's start in the
boundary's transaction, released at its end; a step that cannot have them sends its run
back to the queue without spending an attempt (SPEC §8, docs/pools.md). Executed for real
on SQLite and PostgreSQL, with a FakeClock."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.integration.pools_home import PoolBench, pool_bench
from tests.support.store_helpers import end_run

from cadenza.domain.states import ResourceState, RunState, StepState
from cadenza.resources.plan import job_needs, peak_needs, step_needs
from cadenza.store.boundary import Boundary, Checkpoint, StepEnd, StepStart

X = ResourceState

# Only the units pool matters here: one member, no bound route.
ONE_UNIT = """
[pools.units]
kind = "unit"
cooldown = "10s"
[[pools.units.members]]
id = "u-1"
"""

THREE_STEPS = """
[jobs.scrape.retry]
attempts = 2
base_seconds = 0
jitter = 0
[[jobs.scrape.steps]]
name = "prepare"
type = "python"
callable = "cz_pool_tasks:show"
isolation = "thread"
[[jobs.scrape.steps]]
name = "use"
type = "python"
callable = "cz_pool_tasks:show"
isolation = "thread"
requires = { units = 1 }
[[jobs.scrape.steps]]
name = "after"
type = "python"
callable = "cz_pool_tasks:show"
isolation = "thread"

[jobs.holder]
requires = { units = 1 }
[[jobs.holder.steps]]
name = "call"
type = "python"
callable = "cz_pool_tasks:show"
isolation = "thread"
"""


def _outputs(b: PoolBench, run_id: str) -> dict[str, Any]:
    return {s.step: s.output for s in b.store.list_step_runs(run_id)
            if s.state is StepState.SUCCEEDED}


def _ids(b: PoolBench, run_id: str) -> list[tuple[str, str | None]]:
    """(event type, step or resource) of the run's events, in the order written."""
    out = []
    for e in b.store.list_events(run_id=run_id):
        payload = e.payload or {}
        out.append((e.event_type, payload.get("step") if e.resource_id is None
                    else e.resource_id))
    return out


def test_step_needs_count_what_the_run_holds(tmp_path: Path) -> None:
    from tests.integration.pools_home import write_home

    from cadenza.resources.plan import PoolPlan

    jobs = """
    [jobs.j]
    requires = { units = 1 }
    [[jobs.j.steps]]
    name = "a"
    type = "python"
    callable = "cz_pool_tasks:show"
    [[jobs.j.steps]]
    name = "b"
    type = "python"
    callable = "cz_pool_tasks:show"
    requires = { units = 2, logins = 1 }
    [[jobs.j.steps]]
    name = "c"
    type = "http"
    url = "https://example.org/"
    via = "egress"
    """
    config = write_home(tmp_path / "home", jobs).load_config()
    job = config.jobs["j"]
    assert job_needs(job) == {"units": 1}
    assert step_needs(job) == {"b": {"units": 2, "logins": 1}, "c": {"egress": 1}}
    assert peak_needs(job) == {"units": 2, "logins": 1, "egress": 1}
    plan = PoolPlan.of(config)
    assert plan.needs == {"j": {"units": 1}} and plan.step("j", "c") == {"egress": 1}
    assert plan.step("j", "a") == {} and plan.step("j", None) == {}


def test_a_steps_unit_is_held_only_during_that_step(tmp_path: Path, store_url: str) -> None:
    with pool_bench(tmp_path / "home", THREE_STEPS, store_url=store_url,
                    pools=ONE_UNIT) as b:
        run_id = b.enqueue("scrape")
        assert b.execute(run_id).state is RunState.SUCCEEDED
        out = _outputs(b, run_id)
        assert out["prepare"]["held"] == {}
        assert [m["id"] for m in out["use"]["held"]["units"]] == ["u-1"]
        assert out["after"]["held"] == {}  # released at the end of "use"
        unit = b.resource("u-1")
        assert unit.state is X.COOLDOWN and unit.lease_owner is None
        assert unit.lease_step is None
        assert b.resource_events("u-1") == [
            ("RESOURCE_STATE_CHANGED", None, "AVAILABLE"),
            ("RESOURCE_LEASED", "AVAILABLE", "RUNNING"),  # leased and started: one event
            ("RESOURCE_RELEASED", "RUNNING", "COOLDOWN"),
        ]
        leased, released = b.store.list_events(resource_id="u-1")[1:]
        assert leased.payload["step"] == "use" and released.payload["step"] == "use"
        assert leased.message == (f"resource u-1 (unit of pool units) leased by run {run_id} "
                                  f"for step use; LEASED -> RUNNING: run {run_id} started "
                                  "step use")
        assert released.message.startswith(
            "resource u-1 RUNNING -> COOLDOWN: released at the end of step use; cooling down "
            "until")
        # Written in the transactions of the step's start and of its end.
        events = _ids(b, run_id)
        order = [events.index(e) for e in [
            ("STEP_STARTED", "prepare"), ("RESOURCE_LEASED", "u-1"), ("STEP_STARTED", "use"),
            ("RESOURCE_RELEASED", "u-1"), ("STEP_STARTED", "after")]]
        assert order == sorted(order)
        with b.store.read() as c:
            import sqlalchemy as sa

            from cadenza.store.tables import event_log
            times = dict(c.execute(sa.select(event_log.c.event_type, event_log.c.created_at)
                                   .where(event_log.c.resource_id == "u-1")).all())
        assert times["RESOURCE_LEASED"] == times["RESOURCE_RELEASED"]  # a FakeClock


def test_a_step_that_cannot_have_its_unit_sends_the_run_back_to_the_queue(
        tmp_path: Path, store_url: str) -> None:
    from cadenza.resources.pools import leaser_of

    with pool_bench(tmp_path / "home", THREE_STEPS, store_url=store_url,
                    pools=ONE_UNIT) as b:
        leaser = leaser_of(b.store)
        assert leaser is not None
        holder = b.enqueue("holder")
        until = b.clock.now() + timedelta(seconds=30)
        assert [r.id for r in b.store.claim_runs("node-a:1:1", until, run_ids=[holder])]
        run_id = b.enqueue("scrape")
        outcome = b.execute(run_id)
        assert outcome.state is RunState.QUEUED
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.QUEUED
        assert run.attempt == 0  # no attempt spent
        assert run.wait_reason == (f"waiting for 1 of pool units for step use: 1 leased by "
                                   f"run {holder}")
        assert [(s.step, s.state) for s in b.store.list_step_runs(run_id)] == [
            ("prepare", StepState.SUCCEEDED)]
        point = b.store.get_run_checkpoint(run_id)
        assert point is not None and point.next_step == "use"
        assert b.resource("u-1").lease_owner == holder
        lines = [line.message for line in b.store.list_logs(run_id)]
        assert f"run QUEUED again: {run.wait_reason}" in lines
        # Admission leaves it alone until a member is released in this process.
        assert leaser.may_try(run_id, b.clock.now()) is False
        assert end_run(b.store, holder, RunState.CANCELED, actor="ops")
        assert leaser.may_try(run_id, b.clock.now()) is True
        assert b.execute(run_id).state is RunState.SUCCEEDED
        steps = [(s.step, s.attempt, s.state) for s in b.store.list_step_runs(run_id)]
        assert steps == [("prepare", 1, StepState.SUCCEEDED), ("use", 1, StepState.SUCCEEDED),
                         ("after", 1, StepState.SUCCEEDED)]
        done = b.store.get_run(run_id)
        assert done is not None and done.attempt == 0


def test_a_crash_during_the_step_returns_its_unit_through_the_reaper(
        tmp_path: Path, store_url: str) -> None:
    with pool_bench(tmp_path / "home", THREE_STEPS, store_url=store_url,
                    pools=ONE_UNIT) as b:
        run_id = b.enqueue("scrape")
        until = b.clock.now() + timedelta(seconds=30)
        assert [r.id for r in b.store.claim_runs("node-a:1:1", until, run_ids=[run_id])]
        first = b.store.record_boundaries([Boundary(run_id, 1, starts=[
            StepStart("prepare", "python")])])[0]
        assert b.resource("u-1").state is X.AVAILABLE
        second = b.store.record_boundaries([Boundary(
            run_id, 1, step_end=StepEnd(first.step_run_ids[0], "prepare", "python", 1,
                                        StepState.SUCCEEDED, 0, {}),
            starts=[StepStart("use", "python")],
            checkpoint=Checkpoint("use", {"prepare": {"rows": 0}}))])[0]
        assert second.applied and second.state is RunState.RUNNING
        unit = b.resource("u-1")
        assert (unit.state, unit.lease_owner, unit.lease_step) == (X.RUNNING, run_id, "use")
        # The worker dies during "use": its run lease expires, the reaper re-queues the run
        # and its unit cools down.
        b.clock.advance(31)
        reaped = b.store.reap_expired_run_leases()
        assert [r.run_id for r in reaped] == [run_id]
        unit = b.resource("u-1")
        assert (unit.state, unit.lease_owner, unit.lease_step) == (X.COOLDOWN, None, None)
        assert b.resource_events("u-1")[-1] == ("RESOURCE_RELEASED", "RUNNING", "COOLDOWN")
        # After the cooldown the run resumes at "use" and takes the unit again.
        b.clock.advance(10)
        assert b.execute(run_id).state is RunState.SUCCEEDED
        assert [s.step for s in b.store.list_step_runs(run_id)
                if s.state is StepState.SUCCEEDED] == ["prepare", "use", "after"]
        assert b.resource("u-1").state is X.COOLDOWN


def test_a_staged_claim_takes_its_first_steps_needs_all_or_nothing(
        tmp_path: Path, store_url: str) -> None:
    jobs = THREE_STEPS.replace('name = "prepare"\ntype = "python"\ncallable = '
                               '"cz_pool_tasks:show"\nisolation = "thread"\n',
                               'name = "prepare"\ntype = "python"\ncallable = '
                               '"cz_pool_tasks:show"\nisolation = "thread"\n'
                               'requires = { units = 1 }\n')
    with pool_bench(tmp_path / "home", jobs, store_url=store_url, pools=ONE_UNIT) as b:
        until = b.clock.now() + timedelta(seconds=30)
        first, second = b.enqueue("scrape"), b.enqueue("scrape")
        staged = []
        for run_id in (first, second):
            start = b.store.stage_start(
                Boundary(run_id, 1, starts=[StepStart("prepare", "python")]), "scrape",
                "node-a:1:1", until)
            assert start is not None
            staged.append(start)
        with b.store.write() as conn:
            ids = b.store.claim_staged(conn, staged, "node-a:1:1", until)
        assert list(ids) == [first]
        unit = b.resource("u-1")
        assert (unit.state, unit.lease_owner, unit.lease_step) == (X.RUNNING, first,
                                                                   "prepare")
        waiting = b.store.get_run(second)
        assert waiting is not None and waiting.state is RunState.QUEUED
        assert waiting.lease_epoch == 0  # given back: nobody saw the claim
        assert waiting.wait_reason == (f"waiting for 1 of pool units for step prepare: "
                                       f"1 leased by run {first}")
        assert b.store.list_events(run_id=second)[-1].event_type == "RUN_CREATED"


def test_a_claim_batch_that_lost_a_race_puts_back_what_it_took(
        tmp_path: Path, store_url: str) -> None:
    """The claim leases a batch's members with one compare-and-swap UPDATE; a member that
    changed since the snapshot fails it: what the run took besides is put back (nobody
    sees it) and the run is leased one member at a time."""
    from tests.integration.pools_home import python_job

    from cadenza.resources.pools import leaser_of

    with pool_bench(tmp_path / "home", python_job("scrape", "show", "units = 1"),
                    store_url=store_url) as b:
        leaser = leaser_of(b.store)
        assert leaser is not None
        before = {r.resource_id: r.lease_epoch for r in b.store.list_resources()}
        real = leaser._snapshot

        reads = []

        def stale(cursor: Any, pools: list[str]) -> Any:
            found = real(cursor, pools)
            if not reads:  # the first read is stale: u-1 was seen cooling down, as it were
                found["u-1"].state = "COOLDOWN"
            reads.append(pools)
            return found

        leaser._snapshot = stale  # type: ignore[method-assign]
        run_id = b.enqueue("scrape")
        until = b.clock.now() + timedelta(seconds=30)
        assert [r.id for r in b.store.claim_runs("node-a:1:1", until, run_ids=[run_id])]
        leaser._snapshot = real  # type: ignore[method-assign]
        states = {r.resource_id: (r.state, r.lease_owner, r.lease_epoch)
                  for r in b.store.list_resources()}
        held = sorted(rid for rid, (_, owner, _) in states.items() if owner == run_id)
        # SQLite: the snapshot was read under the write lock, the one-by-one lease trusts
        # it (u-1 is someone else's) and takes u-2; PostgreSQL reads again and takes u-1
        # with its route. Either way fr-1, taken with u-1 by the batch, was put back first.
        assert held == (["fr-1", "u-1"] if b.store.dialect == "postgresql" else ["u-2"])
        for rid, (state, owner, epoch) in states.items():
            if rid in held:
                assert (state, epoch) == (X.LEASED, before[rid] + 1)
            else:
                assert (state, owner, epoch) == (X.AVAILABLE, None, before[rid])
        leased = sorted(e.resource_id for e in b.store.list_events(run_id=run_id)
                        if e.event_type == "RESOURCE_LEASED")
        assert leased == held


def test_a_claim_by_job_asks_the_pools_first(tmp_path: Path, store_url: str) -> None:
    """``claim_runs(job_ids=...)`` claims nothing while no member of a pool its jobs need is
    free: no claim made only to be given back (no epoch spent, no event)."""
    with pool_bench(tmp_path / "home", THREE_STEPS, store_url=store_url,
                    pools=ONE_UNIT) as b:
        until = b.clock.now() + timedelta(seconds=30)
        holder, waiting = b.enqueue("holder"), b.enqueue("holder")
        assert [r.id for r in b.store.claim_runs("node-a:1:1", until, run_ids=[holder])]
        assert b.store.claim_runs("node-a:1:1", until, job_ids=["holder"]) == []
        run = b.store.get_run(waiting)
        assert run is not None and run.lease_epoch == 0 and run.state is RunState.QUEUED
        assert [e.event_type for e in b.store.list_events(run_id=waiting)] == ["RUN_CREATED"]
        # A job that needs no pool at its claim is claimed as ever.
        scrape = b.enqueue("scrape")
        assert [r.id for r in b.store.claim_runs("node-a:1:1", until, limit=2,
                                                 job_ids=["holder", "scrape"])] == [scrape]
        assert end_run(b.store, holder, RunState.CANCELED, actor="ops")
        b.clock.advance(10)  # u-1 cooled down (10 s)
        assert [r.id for r in b.store.claim_runs("node-a:1:1", until,
                                                 job_ids=["holder"])] == [waiting]
