"""Resource leases through the one claim and the run end (SPEC §8), executed for real:
a home with pools, python steps that read ``ctx.resources``, SQLite and PostgreSQL, a
FakeClock for cooldowns and lease expiry."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from tests.integration.pools_home import ACCT_PW, PROXY_PW, pool_bench, python_job
from tests.support.store_helpers import end_run, transition_resource_or_raise

from cadenza.domain.states import ResourceState, RunState
from cadenza.store.boundary import Boundary, StepStart
from cadenza.store.tables import event_log, resources, run_logs, step_runs

X = ResourceState
SHOW_UNIT = python_job("scrape", "show", "units = 1")


def test_a_run_leases_its_unit_with_the_bound_route_and_releases_both(
        tmp_path: Path, store_url: str) -> None:
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        assert b.states() == {"u-1": "AVAILABLE", "u-2": "AVAILABLE", "fr-1": "AVAILABLE",
                              "fr-2": "AVAILABLE", "acct-1": "AVAILABLE"}
        run_id = b.enqueue("scrape")
        outcome = b.execute(run_id)
        assert outcome.state is RunState.SUCCEEDED
        output = b.store.list_step_runs(run_id)[0].output
        assert output is not None
        held = output["held"]
        # u-1 comes first (same score, same last use, then id) and brings fr-1 with it.
        assert [m["id"] for m in held["units"]] == ["u-1"]
        assert held["units"][0]["route"] == "fr-1"
        assert [m["id"] for m in held["egress"]] == ["fr-1"]
        assert held["egress"][0]["region"] == "FR"
        assert output["route"] == "fr-1"
        # The step saw the proxy's password; nothing stored shows it.
        assert held["egress"][0]["proxy"] == "http://***@127.0.0.1:3128"
        with b.store.read() as c:
            for table, column in ((step_runs, step_runs.c.output_json),
                                  (run_logs, run_logs.c.message),
                                  (event_log, event_log.c.payload_json)):
                texts = [t or "" for t in c.execute(sa.select(column)).scalars()]
                assert not any(PROXY_PW in t for t in texts), table.name
        assert b.resource("u-1").state is X.COOLDOWN
        assert b.resource("fr-1").state is X.COOLDOWN
        assert b.resource("u-1").lease_owner is None
        u1, fr1 = b.resource("u-1").health, b.resource("fr-1").health
        assert u1 is not None and u1.cooldown_until == b.clock.now() + timedelta(seconds=10)
        assert fr1 is not None and fr1.cooldown_until == b.clock.now() + timedelta(seconds=5)
        assert b.resource("u-2").state is X.AVAILABLE
        # Leased by the claim and started by the first step in one transaction: one
        # event carries both changes.
        assert b.resource_events("u-1") == [
            ("RESOURCE_STATE_CHANGED", None, "AVAILABLE"),
            ("RESOURCE_LEASED", "AVAILABLE", "RUNNING"),
            ("RESOURCE_RELEASED", "RUNNING", "COOLDOWN"),
        ]
        both = b.store.list_events(resource_id="u-1")[1]
        assert both.payload["transitions"] == [["AVAILABLE", "LEASED", "leased"],
                                               ["LEASED", "RUNNING", f"run {run_id} started"]]
        leased = [e for e in b.store.list_events(resource_id="fr-1")
                  if e.event_type == "RESOURCE_LEASED"]
        assert leased[0].run_id == run_id and leased[0].payload["run_id"] == run_id



def test_ctx_resources_is_read_at_its_first_use_only(tmp_path: Path) -> None:
    """A thread step that never looks at ``ctx.resources`` costs no read of what the run
    holds (most steps: the drain's cost of ``requires``, docs/benchmarks.md); one that
    looks sees the members, read once however often it looks."""
    jobs = SHOW_UNIT + python_job("quiet", "ignore", "units = 1")
    with pool_bench(tmp_path / "home", jobs) as b:
        reader = b.executor.steps.resources
        assert reader is not None
        reads: list[str] = []

        def counting(run_id: str, job_id: str):  # type: ignore[no-untyped-def]
            reads.append(job_id)
            return reader(run_id, job_id)

        b.executor.steps.resources = counting
        run_id = b.enqueue("scrape")
        assert b.execute(run_id).state is RunState.SUCCEEDED
        assert reads == ["scrape"]  # show() iterates, then ctx.route() looks again
        output = b.store.list_step_runs(run_id)[0].output
        assert output is not None and output["route"] == "fr-1"
        assert [m["id"] for m in output["held"]["units"]] == ["u-1"]
        quiet = b.enqueue("quiet")
        assert b.execute(quiet).state is RunState.SUCCEEDED
        assert b.resource("u-2").state is X.COOLDOWN  # it held u-2 all the same
        assert reads == ["scrape"]

def test_a_process_isolated_step_sees_the_same_resources(tmp_path: Path) -> None:
    jobs = python_job("scrape", "show", "units = 1").replace('isolation = "thread"',
                                                             'isolation = "process"')
    with pool_bench(tmp_path / "home", jobs) as b:
        run_id = b.enqueue("scrape")
        assert b.execute(run_id).state is RunState.SUCCEEDED
        output = b.store.list_step_runs(run_id)[0].output
        assert output is not None and output["route"] == "fr-1"
        assert output["held"]["units"][0]["route"] == "fr-1"
        lines = [line.message for line in b.store.list_logs(run_id)]
        assert "using proxy http://***@127.0.0.1:3128" in lines


def test_credentials_fields_reach_the_step_and_never_the_store(tmp_path: Path) -> None:
    jobs = python_job("login", "show", "logins = 1")
    with pool_bench(tmp_path / "home", jobs) as b:
        run_id = b.enqueue("login")
        assert b.execute(run_id).state is RunState.SUCCEEDED
        output = b.store.list_step_runs(run_id)[0].output
        assert output is not None
        fields = output["held"]["logins"][0]["fields"]
        assert fields["user"] == "alice" and fields["password"] == "***"
        raw = (b.home.path / "data" / "cadenza.db").read_bytes()
        assert ACCT_PW.encode() not in raw
        # cooldown = "0s": back at once for the next claim.
        again = b.enqueue("login")
        assert b.execute(again).state is RunState.SUCCEEDED


def test_a_unit_whose_bound_route_is_disabled_is_unavailable_and_says_why(
        tmp_path: Path, store_url: str) -> None:
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        transition_resource_or_raise(b.store, "fr-1", X.DISABLED, actor="ops", reason="test")
        transition_resource_or_raise(b.store, "u-2", X.DISABLED, actor="ops", reason="test")
        run_id = b.enqueue("scrape")
        assert b.execute(run_id).claimed is False
        run = b.store.get_run(run_id)
        assert run is not None and run.state is RunState.QUEUED and run.lease_epoch == 0
        assert run.wait_reason is not None
        assert run.wait_reason.startswith("waiting for 1 of pool units: ")
        assert "1 disabled" in run.wait_reason
        assert "u-1 is bound to route fr-1, which is DISABLED" in run.wait_reason
        # Nothing was left leased by the refused claim, and it wrote no lease event.
        assert b.resource("u-1").state is X.AVAILABLE
        assert all(e.event_type != "RESOURCE_LEASED"
                   for e in b.store.list_events(resource_id="u-1"))
        transition_resource_or_raise(b.store, "fr-1", X.AVAILABLE, actor="ops")
        assert b.execute(run_id).state is RunState.SUCCEEDED


def test_a_disabled_member_is_never_leased_and_never_goes_running(tmp_path: Path,
                                                                  store_url: str) -> None:
    jobs = python_job("login", "show", "logins = 1")
    with pool_bench(tmp_path / "home", jobs, store_url=store_url) as b:
        transition_resource_or_raise(b.store, "acct-1", X.DISABLED, actor="ops")
        run_id = b.enqueue("login")
        assert b.execute(run_id).claimed is False
        assert b.resource("acct-1").state is X.DISABLED
        assert not b.store.transition_resource("acct-1", X.RUNNING)
        assert not b.store.transition_resource("acct-1", X.LEASED)
        run = b.store.get_run(run_id)
        assert run is not None and run.wait_reason == "waiting for 1 of pool logins: 1 disabled"


def test_cooldown_blocks_until_it_passes(tmp_path: Path, store_url: str) -> None:
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        assert b.execute(b.enqueue("scrape")).state is RunState.SUCCEEDED
        transition_resource_or_raise(b.store, "u-2", X.DISABLED, actor="ops")
        run_id = b.enqueue("scrape")
        assert b.execute(run_id).claimed is False
        run = b.store.get_run(run_id)
        assert run is not None
        assert run.wait_reason == ("waiting for 1 of pool units: 1 cooling down until "
                                   "10:00:10 UTC, 1 disabled")
        b.clock.advance(9)
        assert b.execute(run_id).claimed is False
        b.clock.advance(1)
        assert b.execute(run_id).state is RunState.SUCCEEDED
        # The claim that wants it ends its cooldown and leases it, the first step starts:
        # one event records the three changes (same transaction).
        assert [(kind, frm, to) for kind, frm, to in b.resource_events("u-1")][-2:] == [
            ("RESOURCE_LEASED", "COOLDOWN", "RUNNING"),
            ("RESOURCE_RELEASED", "RUNNING", "COOLDOWN"),
        ]
        leased = b.store.list_events(resource_id="u-1")[-2]
        assert [t[:2] for t in leased.payload["transitions"]] == [
            ["COOLDOWN", "AVAILABLE"], ["AVAILABLE", "LEASED"], ["LEASED", "RUNNING"]]
        assert leased.message == (f"resource u-1 (unit of pool units) COOLDOWN -> AVAILABLE: "
                                  f"cooldown over; leased by run {run_id}; "
                                  f"LEASED -> RUNNING: run {run_id} started")


def test_a_resource_fault_puts_the_route_at_fault_and_the_run_resumes_on_another(
        tmp_path: Path, store_url: str) -> None:
    jobs = python_job("fetch", "refuse_on", "egress = 1", '{ bad = "fr-1" }')
    with pool_bench(tmp_path / "home", jobs, store_url=store_url) as b:
        run_id = b.enqueue("fetch")
        first = b.execute(run_id)
        assert first.state is RunState.QUEUED
        fr1 = b.resource("fr-1")
        assert fr1.state is X.FAULT
        assert fr1.last_error is not None and "proxy refused the tunnel" in fr1.last_error
        assert b.resource("fr-2").state is X.AVAILABLE
        run = b.store.get_run(run_id)
        assert run is not None and run.attempt == 0
        done = b.execute(run_id)
        assert done.state is RunState.SUCCEEDED
        output = b.store.list_step_runs(run_id)[-1].output
        assert output == {"route": "fr-2"}
        run = b.store.get_run(run_id)
        assert run is not None and run.attempt == 0
        assert [s.error_class for s in b.store.list_step_runs(run_id)] == ["resource", None]
        assert b.resource("fr-1").state is X.FAULT
        assert b.resource("fr-2").state is X.COOLDOWN


def test_a_fault_naming_no_member_faults_every_route_the_run_held(tmp_path: Path) -> None:
    jobs = python_job("fetch", "refuse_on", "units = 1",
                      '{ bad = "fr-1", named = false }')
    with pool_bench(tmp_path / "home", jobs) as b:
        run_id = b.enqueue("fetch")
        assert b.execute(run_id).state is RunState.QUEUED
        # u-1 is a unit: it cools down; its bound route fr-1 is at fault.
        assert b.resource("fr-1").state is X.FAULT
        assert b.resource("u-1").state is X.COOLDOWN
        assert b.execute(run_id).state is RunState.SUCCEEDED  # on u-2, no route
        assert b.store.list_step_runs(run_id)[-1].output == {"route": None}


def _claim(b: object, run_id: str) -> None:
    from tests.integration.pools_home import PoolBench

    assert isinstance(b, PoolBench)
    until = b.clock.now() + timedelta(seconds=30)
    claimed = b.store.claim_runs("node-a:1:1", until, run_ids=[run_id])
    assert [r.id for r in claimed] == [run_id]


def test_the_reaper_returns_a_lost_runs_resources_by_the_rules(tmp_path: Path,
                                                               store_url: str) -> None:
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        started, waiting = b.enqueue("scrape"), b.enqueue("scrape")
        _claim(b, started)
        _claim(b, waiting)
        assert b.resource("u-1").lease_owner == started
        assert b.resource("u-2").lease_owner == waiting
        # The first run's first step starts: its members go RUNNING.
        b.store.record_boundaries([Boundary(started, 1, starts=[StepStart("call", "python")])])
        assert (b.resource("u-1").state, b.resource("fr-1").state) == (X.RUNNING, X.RUNNING)
        assert b.resource("u-2").state is X.LEASED
        lease = b.resource("u-1").lease_until
        assert lease is not None and lease == b.store.get_run(started).lease_until  # type: ignore[union-attr]
        b.clock.advance(31)
        reaped = b.store.reap_expired_run_leases()
        assert {r.run_id for r in reaped} == {started, waiting}
        assert b.states() == {"u-1": "COOLDOWN", "fr-1": "COOLDOWN", "u-2": "AVAILABLE",
                              "fr-2": "AVAILABLE", "acct-1": "AVAILABLE"}
        # Nothing is held by anyone; the re-queued runs lease again and succeed.
        transition_resource_or_raise(b.store, "u-2", X.DISABLED, actor="ops")
        transition_resource_or_raise(b.store, "u-2", X.AVAILABLE, actor="ops")
        assert b.execute(waiting).state is RunState.SUCCEEDED
        b.clock.advance(10)
        assert b.execute(started).state is RunState.SUCCEEDED


def test_a_canceled_run_releases_what_it_held(tmp_path: Path, store_url: str) -> None:
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        run_id = b.enqueue("scrape")
        _claim(b, run_id)
        assert b.resource("u-1").state is X.LEASED
        assert end_run(b.store, run_id, RunState.CANCELED, reason="stop")
        assert (b.resource("u-1").state, b.resource("fr-1").state) == (X.AVAILABLE,
                                                                        X.AVAILABLE)
        released = [e for e in b.store.list_events(resource_id="u-1")
                    if e.event_type == "RESOURCE_RELEASED"]
        assert released[-1].payload["reason"] == "released unused"


def test_renewing_a_run_lease_extends_its_resource_leases(tmp_path: Path) -> None:
    from cadenza.store.run_leases import RunLease

    with pool_bench(tmp_path / "home", SHOW_UNIT) as b:
        run_id = b.enqueue("scrape")
        _claim(b, run_id)
        b.clock.advance(20)
        until = b.clock.now() + timedelta(seconds=30)
        renewal = b.store.renew_run_leases([RunLease(run_id, 1, "node-a:1:1")], until)
        assert run_id in renewal.renewed
        assert b.resource("u-1").lease_until == until
        assert b.resource("fr-1").lease_until == until


def test_a_removed_member_finishes_its_lease_then_goes(tmp_path: Path) -> None:
    from cadenza.resources.pools import apply_pools

    with pool_bench(tmp_path / "home", SHOW_UNIT) as b:
        run_id = b.enqueue("scrape")
        _claim(b, run_id)
        text = b.home.config_file.read_text(encoding="utf-8")
        b.home.config_file.write_text(text.replace('id = "u-1"\nroute = "fr-1"\n',
                                                   'id = "u-3"\n'), encoding="utf-8")
        apply_pools(b.store, b.home.load_config())
        states = b.states()
        assert states["u-1"] == "LEASED" and states["u-3"] == "AVAILABLE"
        assert end_run(b.store, run_id, RunState.CANCELED, actor="ops")
        assert "u-1" not in b.states()
        assert b.store.list_events(resource_id="u-1")[-1].message == (
            "resource u-1 removed: no longer in the configuration")
        with b.store.read() as c:
            assert c.execute(sa.select(sa.func.count()).select_from(resources)).scalar() == 5


def test_admission_leaves_a_refused_run_alone_until_a_member_comes_back(
        tmp_path: Path) -> None:
    from cadenza.resources.pools import leaser_of

    with pool_bench(tmp_path / "home", SHOW_UNIT) as b:
        leaser = leaser_of(b.store)
        assert leaser is not None
        transition_resource_or_raise(b.store, "u-2", X.DISABLED, actor="ops")
        holder = b.enqueue("scrape")
        _claim(b, holder)  # holds u-1 (and fr-1)
        waiting = b.enqueue("scrape")
        assert b.execute(waiting).claimed is False
        now = b.clock.now()
        # Refused: the dispatcher skips it (no claim, no give-back) ...
        assert leaser.may_try(waiting, now) is False
        assert leaser.next_recheck() == now + timedelta(seconds=30)
        assert leaser.may_try(waiting, now + timedelta(seconds=29)) is False
        # ... until a member is released in this process.
        assert end_run(b.store, holder, RunState.CANCELED, actor="ops")
        assert leaser.may_try(waiting, now) is True
        assert b.execute(waiting).state is RunState.SUCCEEDED


def test_a_member_freed_by_another_process_is_seen_within_a_second(
        tmp_path: Path, store_url: str) -> None:
    """The CLI in a terminal, another node: a change this process's leaser did not make
    reaches admission through the watch, at its next look (at most every second), not
    after RECHECK."""
    from cadenza.resources.pools import leaser_of
    from cadenza.resources.watch import WATCH
    from cadenza.store import Store

    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        leaser = leaser_of(b.store)
        assert leaser is not None
        transition_resource_or_raise(b.store, "u-2", X.DISABLED, actor="ops")
        _claim(b, b.enqueue("scrape"))  # holds u-1 (and fr-1)
        waiting = b.enqueue("scrape")
        assert b.execute(waiting).claimed is False
        now = b.clock.now()

        def look(at: object) -> bool:
            with b.store.write() as conn:
                return leaser.watch(conn, at)  # type: ignore[arg-type]

        assert look(now) is False  # nothing came back
        other = Store.open(b.store.engine.url.render_as_string(hide_password=False),
                           migrate=False)
        try:
            transition_resource_or_raise(other, "u-2", X.AVAILABLE, actor="cli:ops")
        finally:
            other.close()
        assert leaser.may_try(waiting, now) is False  # this process did not see it ...
        assert look(now + WATCH / 2) is False  # ... nor looks again within a second ...
        assert leaser.may_try(waiting, now + WATCH / 2) is False
        assert look(now + WATCH) is True  # ... and its next look finds it
        assert leaser.may_try(waiting, now + WATCH) is True
        assert b.execute(waiting).state is RunState.SUCCEEDED
        # nothing refused any more: the watch reads nothing
        assert look(now + 5 * WATCH) is False


def test_a_refused_run_is_tried_again_when_the_cooldown_it_waits_for_ends(
        tmp_path: Path) -> None:
    from cadenza.resources.pools import leaser_of

    with pool_bench(tmp_path / "home", SHOW_UNIT) as b:
        leaser = leaser_of(b.store)
        assert leaser is not None
        assert b.execute(b.enqueue("scrape")).state is RunState.SUCCEEDED
        transition_resource_or_raise(b.store, "u-2", X.DISABLED, actor="ops")
        waiting = b.enqueue("scrape")
        assert b.execute(waiting).claimed is False
        cooled = b.clock.now() + timedelta(seconds=10)
        assert leaser.next_recheck() == cooled
        assert leaser.may_try(waiting, cooled - timedelta(seconds=1)) is False
        assert leaser.may_try(waiting, cooled) is True


def _starting_claim(b: object, run_id: str, *boundaries: Boundary) -> list[str]:
    """A claim that writes its run's first boundaries in its own transaction (as the
    executor's claim_and_start); returns the SQLite statements of that transaction that
    touch ``resources`` (empty on PostgreSQL: no trace there), each once."""
    from tests.integration.pools_home import PoolBench

    assert isinstance(b, PoolBench)
    seen: list[str] = []
    until = b.clock.now() + timedelta(seconds=30)
    with b.store.write() as conn:
        raw = conn.connection.driver_connection
        traced = b.store.dialect == "sqlite"
        if traced:
            raw.set_trace_callback(seen.append)  # type: ignore[union-attr]
        try:
            claimed = b.store.claim_runs("node-a:1:1", until, run_ids=[run_id], conn=conn,
                                         starting=True)
            assert [r.id for r in claimed] == [run_id]
            b.store.record_boundaries(list(boundaries), conn=conn)
            b.store.claim_written(conn)
        finally:
            if traced:
                raw.set_trace_callback(None)  # type: ignore[union-attr]
    # SQLite traces a statement again each time a trigger of it runs (the resource state
    # guard, once per row changed): those repeats are no round trip.
    once = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
    return [s for s in once if "resources" in s and not s.startswith("SELECT")]


def test_a_starting_claim_leases_straight_to_running_in_one_statement(
        tmp_path: Path, store_url: str) -> None:
    """The claim knows the first step starts in its transaction: its lease UPDATE takes
    the members to RUNNING (no second UPDATE for the start); the audit log still shows
    both changes in one event."""
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        run_id = b.enqueue("scrape")
        writes = _starting_claim(b, run_id, Boundary(run_id, 1, starts=[
            StepStart("call", "python")]))
        if b.store.dialect == "sqlite":
            assert len(writes) == 1, writes
        assert (b.resource("u-1").state, b.resource("fr-1").state) == (X.RUNNING, X.RUNNING)
        assert b.resource_events("u-1")[-1] == ("RESOURCE_LEASED", "AVAILABLE", "RUNNING")
        event = b.store.list_events(resource_id="u-1")[-1]
        assert event.payload["transitions"] == [["AVAILABLE", "LEASED", "leased"],
                                                ["LEASED", "RUNNING", f"run {run_id} started"]]


def test_a_starting_claim_whose_run_starts_no_step_leaves_its_members_leased(
        tmp_path: Path, store_url: str) -> None:
    """A first boundary that starts nothing: the members are LEASED when the transaction
    commits, as if the claim had leased them the usual way; the later start moves them."""
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        run_id = b.enqueue("scrape")
        _starting_claim(b, run_id, Boundary(run_id, 1))
        assert (b.resource("u-1").state, b.resource("fr-1").state) == (X.LEASED, X.LEASED)
        assert b.resource_events("u-1")[-1] == ("RESOURCE_LEASED", "AVAILABLE", "LEASED")
        b.store.record_boundaries([Boundary(run_id, 1, starts=[StepStart("call", "python")])])
        assert b.resource("u-1").state is X.RUNNING
        assert b.resource_events("u-1")[-1] == ("RESOURCE_STATE_CHANGED", "LEASED",
                                                "RUNNING")


def test_a_starting_claim_whose_run_ends_at_once_releases_unused(
        tmp_path: Path, store_url: str) -> None:
    """A run that ends in its first boundary, no step started: LEASED -> AVAILABLE (no
    cooldown), as for any run that ends before it starts."""
    from cadenza.store.boundary import RunEnd

    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=store_url) as b:
        run_id = b.enqueue("scrape")
        _starting_claim(b, run_id, Boundary(run_id, 1, run_end=RunEnd(RunState.SUCCEEDED)))
        assert b.store.get_run(run_id).state is RunState.SUCCEEDED  # type: ignore[union-attr]
        assert (b.resource("u-1").state, b.resource("fr-1").state) == (X.AVAILABLE,
                                                                        X.AVAILABLE)
        released = [e for e in b.store.list_events(resource_id="u-1")
                    if e.event_type == "RESOURCE_RELEASED"]
        assert released[-1].payload["reason"] == "released unused"
        assert released[-1].payload["from"] == "LEASED"


def test_claims_that_saw_the_same_free_unit_do_not_claim_runs_to_give_back(
        tmp_path: Path, pg_url: str) -> None:
    """PostgreSQL, three claims by job id at once over two free units: the first two
    lock one unit each before they claim; the third finds both locked and claims nothing,
    where it used to claim a run, lose both compare-and-swaps and give the run back."""
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=pg_url) as b:
        for _ in range(3):
            b.enqueue("scrape")
        until = b.clock.now() + timedelta(seconds=30)
        with b.store.write() as c1, b.store.write() as c2, b.store.write() as c3:
            got = [b.store.claim_runs(f"node-{k}:1:1", until, job_ids=["scrape"], conn=c)
                   for k, c in enumerate((c1, c2, c3))]
            written = c3.exec_driver_sql(
                "SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_xact_user_tables"
                " WHERE relname = 'runs'").scalar_one()
        assert [len(g) for g in got] == [1, 1, 0]
        assert written == 0  # no run claimed and given back
        held = {b.resource("u-1").lease_owner, b.resource("u-2").lease_owner}
        assert held == {got[0][0].id, got[1][0].id}



def test_a_unit_reserved_by_a_claim_in_its_transaction_looks_taken_to_other_claims(
        tmp_path: Path, pg_url: str) -> None:
    """PostgreSQL: while a claim holds u-2 reserved in its transaction, another claim by
    job id sees u-2 taken in its snapshot and begins no transaction (it used to begin one,
    try the lock, find it held and roll back: W4's most common failed try); once the
    first claim gives u-2 back, the next claim takes it."""
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=pg_url) as b:
        for _ in range(3):
            b.enqueue("scrape")
        until = b.clock.now() + timedelta(seconds=30)
        assert len(b.store.claim_runs("node-0:1:1", until, job_ids=["scrape"])) == 1  # u-1
        with b.store.write() as c1:
            assert len(b.store.claim_runs("node-1:1:1", until, job_ids=["scrape"],
                                          conn=c1)) == 1  # u-2, not committed
            for _ in range(2):
                with b.store.write() as c2:
                    assert b.store.claim_runs("node-2:1:1", until, job_ids=["scrape"],
                                              conn=c2) == []
                    raw = c2.connection.driver_connection
                    assert raw is not None
                    assert raw.info.transaction_status == 0  # IDLE: nothing begun
            c1.get_transaction().rollback()  # gives u-2 back
        assert b.states()["u-2"] == "AVAILABLE"
        got = b.store.claim_runs("node-3:1:1", until, job_ids=["scrape"])
        assert len(got) == 1 and b.resource("u-2").lease_owner == got[0].id

def test_a_claim_by_job_that_finds_nothing_free_begins_no_transaction(
        tmp_path: Path, pg_url: str) -> None:
    """PostgreSQL: the pools' snapshot of a claim by job ids is read before the claim's
    transaction begins, so a claim that finds every unit held costs one round trip (no
    BEGIN, no COMMIT); one that finds a unit free claims in a transaction as before."""
    with pool_bench(tmp_path / "home", SHOW_UNIT, store_url=pg_url) as b:
        for _ in range(3):
            b.enqueue("scrape")
        until = b.clock.now() + timedelta(seconds=30)
        for k in range(2):  # both units held
            assert len(b.store.claim_runs(f"node-{k}:1:1", until, job_ids=["scrape"])) == 1
        with b.store.write() as conn:
            assert b.store.claim_runs("node-2:1:1", until, job_ids=["scrape"], conn=conn) == []
            raw = conn.connection.driver_connection
            assert raw is not None
            assert raw.info.transaction_status == 0  # IDLE: nothing begun
            assert raw.autocommit is False
        assert b.states()["u-1"] == "LEASED" and b.states()["u-2"] == "LEASED"
