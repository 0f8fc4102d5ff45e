"""What admission reads and writes, on SQLite and PostgreSQL: candidates, load, wait reasons,
the admission lock, and whole decisions on a FakeClock checked from recorded start/end times."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from tests.support.store_helpers import end_run, start_run

from cadenza.clock import FakeClock
from cadenza.domain.admission import HOUR, Decision, Limits, admit, limits_from_config
from cadenza.domain.states import RunState
from cadenza.store import Store, admission, hotsql
from cadenza.store.admission import ADMISSION_LOCK_KEY, RUN_WAITING
from cadenza.store.boundary import NewRun
from cadenza.store.tables import runs

Force = Callable[[sa.Table, object, StrEnum], None]
PARIS = ZoneInfo("Europe/Paris")


def queue(store: Store, job: str, trigger: str = "manual", **kwargs: Any) -> str:
    run_id = store.create_run(job, trigger, **kwargs)
    assert run_id is not None
    return run_id


def start(store: Store, run_id: str) -> None:
    start_run(store, run_id, owner="node-1")


def finish(store: Store, run_id: str) -> None:
    assert end_run(store, run_id, RunState.SUCCEEDED)


# --- queued_candidates ----------------------------------------------------------------------


def test_candidates_are_queued_runs_in_priority_then_scheduled_time_order(
    store: Store, clock: FakeClock, force: Force
) -> None:
    t0 = clock.now()
    late = queue(store, "a", schedule="job", trigger="scheduled", scheduled_for=t0)
    clock.advance(10)
    manual_early = queue(store, "b")  # created_at t0+10s
    clock.advance(10)
    urgent = queue(store, "c", priority=5)
    early_fire = queue(store, "a", schedule="job", trigger="scheduled",
                       scheduled_for=t0 - timedelta(minutes=1))
    running = queue(store, "a", priority=9)
    start(store, running)
    done = queue(store, "a", priority=9)
    force(runs, done, RunState.SUCCEEDED)

    candidates = store.queued_candidates(clock.now())
    assert [c.run_id for c in candidates] == [urgent, early_fire, late, manual_early]
    first = candidates[1]
    assert (first.job_id, first.priority, first.queued_at) == ("a", 0, t0 - timedelta(minutes=1))
    assert (first.not_before, first.attempt, first.requeued) == (None, 0, False)
    assert candidates[3].queued_at == t0 + timedelta(seconds=10)


def test_candidates_limit_ready_and_held_runs_separately(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    held = [queue(store, "r", priority=9, not_before=now + timedelta(minutes=k + 1))
            for k in range(3)]
    clock.advance(1)
    ready = [queue(store, "r", not_before=now if k == 0 else None) for k in range(3)]
    got = store.queued_candidates(clock.now(), limit=2)
    assert [c.run_id for c in got] == held[:2] + ready[:2]
    assert got[0].not_before == now + timedelta(minutes=1)


def test_candidates_mark_runs_that_ran_before(store: Store, clock: FakeClock) -> None:
    run_id = queue(store, "r")
    start(store, run_id)
    assert end_run(store, run_id, RunState.QUEUED, reason="retry", attempt=1,
                   not_before=clock.now() + HOUR)
    (candidate,) = store.queued_candidates(clock.now())
    assert (candidate.attempt, candidate.requeued) == (1, True)
    assert candidate.not_before == clock.now() + HOUR


# --- admission_load -------------------------------------------------------------------------


def test_load_counts_running_runs_and_starts_of_the_last_hour(
    store: Store, clock: FakeClock
) -> None:
    old = queue(store, "a")
    start(store, old)  # started 70 minutes before "now" below
    finish(store, old)
    clock.advance(timedelta(minutes=20))
    first = queue(store, "a")
    start(store, first)
    finish(store, first)  # ended, but its start still spends budget
    started_at = clock.now()
    clock.advance(timedelta(minutes=10))
    for job in ("a", "b", "b"):
        start(store, queue(store, job))
    queue(store, "c")  # queued only
    clock.advance(timedelta(minutes=40))
    now = clock.now()

    load = store.admission_load(now)
    assert load.running_total == 3
    assert dict(load.running_by_job) == {"a": 1, "b": 2}
    assert load.starts_by_job["a"] == (started_at, started_at + timedelta(minutes=10))
    assert len(load.starts_by_job["b"]) == 2
    assert "c" not in load.starts_by_job

    only_a = store.admission_load(now, budget_jobs={"a"})
    assert set(only_a.starts_by_job) == {"a"}
    assert only_a.running_total == 3
    assert dict(store.admission_load(now, budget_jobs=()).starts_by_job) == {}
    # A start exactly an hour old is out of the rolling hour.
    assert len(store.admission_load(started_at + HOUR).starts_by_job["a"]) == 1


# --- set_wait_reasons -----------------------------------------------------------------------


def waiting_events(store: Store, run_id: str) -> list[str]:
    return [e.message for e in store.list_events(run_id=run_id, event_type=RUN_WAITING)]


def test_wait_reasons_write_changes_only_and_one_event_per_waiting_episode(
    store: Store, clock: FakeClock
) -> None:
    a, b = queue(store, "a"), queue(store, "b")
    busy = queue(store, "c")
    start(store, busy)
    clock.advance(1)
    assert store.set_wait_reasons({a: "tag scraping at max_concurrency 2", b: "x",
                                   busy: "y", "no-such-run": "z"}) == 2
    assert store.get_run(busy).wait_reason is None  # type: ignore[union-attr]
    assert waiting_events(store, a) == ["run of a waits: tag scraping at max_concurrency 2"]
    event = store.list_events(run_id=a, event_type=RUN_WAITING)[0]
    assert event.payload == {"job_id": "a", "wait_reason": "tag scraping at max_concurrency 2"}

    # The same text again writes nothing, not even updated_at.
    before = store.get_run(a)
    clock.advance(1)
    assert store.set_wait_reasons({a: "tag scraping at max_concurrency 2"}) == 0
    assert store.get_run(a) == before

    # A new text updates the column, without another event.
    assert store.set_wait_reasons({a: "budget 3/h for tag scraping used; next slot 09:07"}) == 1
    run_a = store.get_run(a)
    assert run_a is not None and run_a.wait_reason.endswith("next slot 09:07")  # type: ignore[union-attr]
    assert run_a.updated_at == clock.now()
    assert len(waiting_events(store, a)) == 1

    # Starting clears the reason; waiting again after a retry is a new episode.
    start(store, a)
    assert store.get_run(a).wait_reason is None  # type: ignore[union-attr]
    assert end_run(store, a, RunState.QUEUED, reason="retry")
    assert store.set_wait_reasons({a: "not before 09:10:00 (retry backoff)"}) == 1
    assert len(waiting_events(store, a)) == 2

    # None clears a reason, without an event.
    assert store.set_wait_reasons({b: None}) == 1
    assert store.get_run(b).wait_reason is None  # type: ignore[union-attr]
    assert len(waiting_events(store, b)) == 1
    assert store.set_wait_reasons({}) == 0


def test_wait_reasons_join_the_callers_transaction(store: Store) -> None:
    a = queue(store, "a")
    with pytest.raises(RuntimeError), store.write() as conn:
        store.set_wait_reasons({a: "held"}, conn=conn)
        raise RuntimeError("roll back")
    assert store.get_run(a).wait_reason is None  # type: ignore[union-attr]
    assert waiting_events(store, a) == []


def test_wait_reasons_are_redacted(store_url: str, clock: FakeClock) -> None:
    class Hide:
        def redact_text(self, text: str) -> str:
            return text.replace("s3cret", "***")

        def redact_value(self, value: Any) -> Any:
            return {k: self.redact_text(v) if isinstance(v, str) else v
                    for k, v in value.items()} if isinstance(value, dict) else value

    with Store.open(store_url, clock=clock, redactor=Hide()) as store:
        a = queue(store, "a")
        store.set_wait_reasons({a: "waiting for s3cret"})
        assert store.get_run(a).wait_reason == "waiting for ***"  # type: ignore[union-attr]
        assert store.set_wait_reasons({a: "waiting for s3cret"}) == 0
        assert "s3cret" not in waiting_events(store, a)[0]


def test_many_wait_reasons_in_one_call(store: Store, clock: FakeClock) -> None:
    ids = [queue(store, "bulk") for _ in range(1200)]
    assert store.set_wait_reasons(dict.fromkeys(ids, "no free worker on this node")) == 1200
    assert len(store.queued_candidates(clock.now(), limit=2000)) == 1200
    assert store.set_wait_reasons(dict.fromkeys(ids, "no free worker on this node")) == 0


# --- the admission lock -------------------------------------------------------------------------


@pytest.mark.reliability_case(51)
def test_admission_lock_is_held_until_the_transaction_ends(store: Store) -> None:
    with store.write() as conn:
        store.lock_admission(conn)
        if store.dialect == "postgresql":
            with store.engine.connect() as other:
                taken = other.execute(
                    sa.select(sa.func.pg_try_advisory_xact_lock(ADMISSION_LOCK_KEY))
                ).scalar()
                other.rollback()
            assert taken is False
    with store.write() as conn:  # released: taken again at once
        store.lock_admission(conn)


@pytest.mark.reliability_case(51)
def test_a_decision_opens_with_the_lock_the_queue_and_the_running_runs(
    store: Store, clock: FakeClock
) -> None:
    """``open_decision``: the admission lock, the queued candidates and (PostgreSQL) the
    running runs per job, read in one round trip, as the three calls would read them."""
    ids = [queue(store, job) for job in ("a", "b", "b", "c")]
    start(store, ids[0])
    start(store, ids[1])
    now = clock.now()
    with store.write() as conn:
        read, running = store.open_decision(conn, now, 200)
        assert read == store.queued_candidates(now, conn=conn)
        assert [c.run_id for c in read] == ids[2:]
        if store.dialect == "postgresql":
            assert running == {"a": 1, "b": 1}
            with store.engine.connect() as other:
                taken = other.execute(
                    sa.select(sa.func.pg_try_advisory_xact_lock(ADMISSION_LOCK_KEY))
                ).scalar()
                other.rollback()
            assert taken is False  # the lock is held until the decision's commit
        else:
            assert running is None  # read with the load, when a decision needs it
        load = store.admission_load(now, conn=conn, running=running)
        assert dict(load.running_by_job) == {"a": 1, "b": 1} and load.running_total == 2
    with store.write() as conn:  # released: taken again at once
        store.lock_admission(conn)


def test_the_running_count_is_an_index_scan_that_skips_ended_runs_after_one_pass(
    store: Store, clock: FakeClock
) -> None:
    """PostgreSQL: each run that ended since the last vacuum leaves a dead entry in the
    indexes on ``state``. A bitmap scan reads them all again at every decision; the count
    runs as an index scan, which marks them dead once and skips them after. The decision
    sets the planner back as it was. (Whether the planner left to itself takes the bitmap
    scan depends on its statistics: it did in a drain of 10,000 runs, 2.2 ms per count at
    its end; it does not with this test's.)"""
    if store.dialect != "postgresql":
        pytest.skip("PostgreSQL's planner and its dead index entries")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE runs SET (autovacuum_enabled = false)")
    # A drain's history: 10,000 runs that went RUNNING, then SUCCEEDED (one dead index
    # entry each for their RUNNING row version).
    store.create_runs([NewRun("a", "manual:test") for _ in range(10_000)])
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE runs")  # as autovacuum does once they are queued
        conn.exec_driver_sql("UPDATE runs SET state = 'RUNNING', started_at = now(),"
                             " lease_until = now()")
        conn.exec_driver_sql("UPDATE runs SET state = 'SUCCEEDED', finished_at = now(),"
                             " lease_until = NULL")
    running = queue(store, "a")
    start(store, running)

    def plan(conn: sa.Connection) -> dict[str, Any]:
        raw = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                                   + admission._RUNNING_BY_JOB).scalar_one()
        return raw[0]["Plan"]  # type: ignore[no-any-return]

    def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node, *(n for child in node.get("Plans", []) for n in nodes(child))]

    with store.write() as conn:
        _, counted = store.open_decision(conn, clock.now(), 200)
        assert counted == {"a": 1}
        assert conn.exec_driver_sql("SHOW enable_bitmapscan").scalar_one() == "on"
        conn.exec_driver_sql(hotsql.INDEX_SCAN)
        plan(conn)  # the pass that marks the ended runs' entries dead
        again = nodes(plan(conn))
        conn.exec_driver_sql(hotsql.BITMAPS_AGAIN)
        assert conn.exec_driver_sql("SHOW enable_bitmapscan").scalar_one() == "on"
    assert not any("Bitmap" in n["Node Type"] for n in again)
    scan = next(n for n in again if n["Node Type"].startswith("Index"))
    assert scan["Actual Rows"] == 1 and scan["Shared Hit Blocks"] < 20  # not 300 dead rows


@pytest.mark.parametrize("opening", ["lock_admission", "open_decision"])
def test_a_decision_left_idle_is_ended_and_frees_the_admission_lock(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, opening: str
) -> None:
    """PostgreSQL: a node stopped in the middle of a decision (its transaction idle, holding
    the admission lock) does not hold the other nodes' decisions until it resumes: the
    database ends that transaction after ADMISSION_IDLE_MS, and its writes are lost. Also
    right after a decision's opening, which reads the queue with the lock in one round trip
    (a pipeline's closing Flush stopped the database's idle timer: a node cut off just then
    held the lock until its connection died)."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite's one writer is one process: no other node waits for it")
    monkeypatch.setattr(admission, "ADMISSION_IDLE_MS", 500)
    queue(store, "a")
    other = Store.open(store.engine.url.render_as_string(hide_password=False))
    try:
        with pytest.raises(Exception), store.write() as conn:  # noqa: B017 (the driver's)
            if opening == "lock_admission":
                store.lock_admission(conn)
            else:
                read, _running = store.open_decision(conn, clock.now(), 200)
                assert len(read) == 1
            time.sleep(1.2)  # "stopped": idle in transaction past the limit
            conn.execute(sa.text("CREATE TABLE never_written (x int)"))
        started = time.monotonic()
        with other.write() as conn:
            other.lock_admission(conn)  # free: the stopped decision was ended
        assert time.monotonic() - started < 1.0
        with other.read() as conn:
            assert conn.execute(sa.text("SELECT to_regclass('never_written')")).scalar() is None
    finally:
        other.close()


# --- whole decisions on a FakeClock ------------------------------------------------------------


def decide(store: Store, limits: Limits, clock: FakeClock, free_slots: int) -> Decision:
    """One decision of a worker pool: read, decide and claim in one locked transaction."""
    now = clock.now()
    with store.write() as conn:
        candidates, running = store.open_decision(conn, now, 200)
        load = store.admission_load(now, budget_jobs=limits.budgeted_jobs(), conn=conn,
                                    running=running)
        decision = admit(candidates, limits, load, now, free_slots)
        for run in decision.admitted:
            assert start_run(store, run.run_id, conn=conn)
        store.set_wait_reasons(decision.wait_texts(), conn=conn)
    return decision


@pytest.mark.reliability_case(51)
def test_five_runs_with_max_concurrency_2_never_overlap_more_than_2(
    store: Store, clock: FakeClock
) -> None:
    limits = limits_from_config(max_concurrent_runs=16, jobs={"sales-load": {
        "max_concurrency": 2}}, default_timezone=PARIS)
    ids = [queue(store, "sales-load") for _ in range(5)]
    durations = dict(zip(ids, [90, 30, 150, 60, 45], strict=True))
    running: dict[str, datetime] = {}
    for _ in range(40):
        for run_id, started in list(running.items()):
            if clock.now() >= started + timedelta(seconds=durations[run_id]):
                finish(store, run_id)
                del running[run_id]
        decision = decide(store, limits, clock, free_slots=4)
        running.update(dict.fromkeys((c.run_id for c in decision.admitted), clock.now()))
        for run_id, why in decision.waiting.items():
            assert store.get_run(run_id).wait_reason == why.text  # type: ignore[union-attr]
        clock.advance(15)

    recorded = [store.get_run(run_id) for run_id in ids]
    spans: list[tuple[datetime, datetime]] = []
    for r in recorded:
        assert r is not None and r.started_at is not None and r.finished_at is not None
        spans.append((r.started_at, r.finished_at))
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    overlap = peak = 0
    for _, step in edges:  # an end at t sorts before a start at t
        overlap += step
        peak = max(peak, overlap)
    assert peak == 2
    waited = [r for r, (s, _) in zip(recorded, spans, strict=True) if s != spans[0][0]]
    assert waited, "some runs had to wait"
    for r in waited:
        assert r is not None
        assert [e.message for e in store.list_events(run_id=r.id, event_type=RUN_WAITING)] == [
            "run of sales-load waits: job sales-load already runs 2 of max_concurrency 2"
        ]


def test_tag_budget_of_3_per_hour_leaves_the_rest_queued_with_the_next_slot(
    store: Store, clock: FakeClock
) -> None:
    limits = limits_from_config(
        max_concurrent_runs=16,
        jobs={"scrape-a": {"tags": ["scraping"], "max_concurrency": 9},
              "scrape-b": {"tags": ["scraping"], "max_concurrency": 9}},
        tags={"scraping": {"budget_per_hour": 3}},
        default_timezone=PARIS,
    )
    ids = [queue(store, "scrape-a" if k % 2 else "scrape-b") for k in range(5)]
    first = clock.now()  # 08:00 UTC = 09:00 in Paris
    decision = decide(store, limits, clock, free_slots=8)
    assert len(decision.admitted) == 3
    for run_id in ids[:3]:
        clock.advance(20)
        finish(store, run_id)
    clock.advance(timedelta(minutes=30))
    decide(store, limits, clock, free_slots=8)
    rest = [store.get_run(run_id) for run_id in ids[3:]]
    for r in rest:
        assert r is not None and r.state is RunState.QUEUED
        assert r.wait_reason == "budget 3/h for tag scraping used; next slot 10:00"
    clock.set(first + HOUR)
    assert len(decide(store, limits, clock, free_slots=8).admitted) == 2
