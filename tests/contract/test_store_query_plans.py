"""The admission reads use their indexes (SQLite's query plans), and so does a claim from
the queue on PostgreSQL: a decision's cost must not grow with the queue or with a job's
history (migrations 0005 and 0006)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.store import Store, admission, boundaries, hotsql, outbox, run_states
from cadenza.store.boundary import NewRun
from cadenza.store.hotsql import Dialect
from cadenza.store.pool_stats import pool_stats


def _plans(store: Store, call: Any, *, words: str) -> list[str]:
    """The query plans (EXPLAIN QUERY PLAN, joined) of the statements ``call`` runs whose
    SQL contains ``words``: those through SQLAlchemy and those of the store's hand-written
    reads on the DBAPI cursor (``StoreCore._quick_read``)."""
    plans: list[str] = []

    def plan(statement: str, params: Any) -> None:
        raw = store.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("EXPLAIN QUERY PLAN " + statement, params)
            plans.append(" | ".join(str(row[3]) for row in cursor.fetchall()))
        finally:
            raw.close()

    def explain(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
                executemany: bool) -> None:
        if words in statement and not statement.startswith("EXPLAIN"):
            raw = conn.connection.driver_connection.cursor()
            raw.execute("EXPLAIN QUERY PLAN " + statement, params)
            plans.append(" | ".join(str(row[3]) for row in raw.fetchall()))

    quick_read = store._quick_read

    @contextmanager
    def traced(**options: Any) -> Iterator[Any]:
        with quick_read(**options) as query:
            def read(statement: str, params: Any) -> Any:
                if words in statement:
                    plan(statement, params)
                return query(statement, params)
            yield read

    sa.event.listen(store.engine, "before_cursor_execute", explain)
    store._quick_read = traced  # type: ignore[method-assign]
    try:
        call()
    finally:
        del store._quick_read
        sa.event.remove(store.engine, "before_cursor_execute", explain)
    return plans


def test_the_candidates_of_a_decision_are_read_in_index_order(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    try:
        now = datetime.now(UTC)
        store.create_runs([NewRun(f"j{k % 7}", "manual:t",
                                  not_before=now + timedelta(hours=1) if k % 5 == 0 else None)
                           for k in range(300)])
        # The read runs on the DBAPI cursor (no engine events): its statements, explained.
        stamp = now.replace(tzinfo=None).isoformat(" ", "microseconds")
        with store.read() as conn:
            raw = conn.connection.driver_connection.cursor()
            plans = []
            for read in (admission._READY_READ, admission._HELD_READ):
                sql = read.format(m="?")
                raw.execute("EXPLAIN QUERY PLAN " + sql, (stamp, 20))
                plans.append(" | ".join(str(row[3]) for row in raw.fetchall()))
        ready, held = plans
        # The runs that may start: in index order, no sort of the whole queue.
        assert "ix_runs_claim_order" in ready and "TEMP B-TREE" not in ready, ready
        # Those still held by not_before: found by their not_before range (only they are
        # sorted).
        assert "ix_runs_held" in held and "not_before>?" in held, held
        seen = store.queued_candidates(now, 20)
        assert len(seen) == 40
        assert seen == sorted(seen, key=lambda c: c.order_key)

        # The claim (every path's) walks the same index in the same order.
        d = Dialect("sqlite")
        with store.read() as conn:
            raw = conn.connection.driver_connection.cursor()
            raw.execute("EXPLAIN QUERY PLAN " + run_states.claim_statement(d),
                        (stamp, 3, "node:1:1", stamp, stamp, stamp))
            plan = " | ".join(str(row[3]) for row in raw.fetchall())
        assert "ix_runs_claim_order" in plan and "TEMP B-TREE" not in plan, plan
        assert len(store.claim_runs("node:1:1", now + timedelta(minutes=1), limit=3)) == 3
    finally:
        store.close()


def test_the_budget_starts_are_read_by_job_and_start_time(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    try:
        now = datetime.now(UTC)
        plans = _plans(store, lambda: store.admission_load(now, budget_jobs={"hot", "cold"}),
                       words="started_at >")
        assert len(plans) == 1
        assert "ix_runs_job_started" in plans[0], plans[0]
    finally:
        store.close()


def test_the_running_runs_are_read_from_their_own_index_whatever_the_statistics(
        sqlite_url: str) -> None:
    """The count of running runs by job (every decision), the reaper's read of their leases
    and the running runs of some jobs (the notification rules) read ``ix_runs_running``,
    which holds the running runs only (migration 0023): their cost follows the running
    runs, not the history. With the statistics an ``ANALYZE`` leaves (three states, each a
    third of the runs, as far as SQLite knows), the count walked the whole
    ``(job_id, created_at)`` index instead, 11 ms among 40,000 runs at every decision."""
    store = Store.open(sqlite_url)
    try:
        now = datetime.now(UTC)
        ids = store.create_runs([NewRun(f"j{k % 3}", "manual:t") for k in range(3000)])
        store.claim_runs("node:1:1", now + timedelta(minutes=5), limit=10, run_ids=ids[:10])
        with store.write() as conn:
            conn.exec_driver_sql("UPDATE runs SET state = 'SUCCEEDED' WHERE state = 'QUEUED'"
                                 " AND id > ?", (ids[2000],))

        def plans() -> list[str]:
            with store.read() as conn:
                raw = conn.connection.driver_connection.cursor()
                raw.execute("EXPLAIN QUERY PLAN " + admission._RUNNING_BY_JOB)
                count = " | ".join(str(row[3]) for row in raw.fetchall())
            reaper = _plans(store, lambda: store.reap_expired_run_leases(now=now),
                            words="lease_until <")
            with store.read() as conn:
                of_jobs = _plans(store, lambda: outbox.running_of(conn, ["j1", "j2"]),
                                 words="job_id IN")
            return [count, *reaper, *of_jobs]

        for stage in ("no statistics", "analyzed"):
            found = plans()
            assert len(found) == 3, (stage, found)
            assert all("ix_runs_running" in plan for plan in found), (stage, found)
            with store.write() as conn:
                conn.exec_driver_sql("ANALYZE")
        assert sorted(store.admission_load(now).running_by_job.items()) == [
            ("j0", 4), ("j1", 3), ("j2", 3)]
    finally:
        store.close()


def test_history_pages_are_index_ranges_at_any_depth(sqlite_url: str) -> None:
    """``list_runs`` by state reads (state, created_at, id) in order (no sort of every run
    in that state), and a cursor page is a range on created_at, not a scan down from the
    newest run (W6, migration 0012)."""
    store = Store.open(sqlite_url)
    try:
        ids = store.create_runs([NewRun(f"j{k % 3}", "manual:t") for k in range(30)])
        by_state = _plans(store, lambda: store.list_runs(state="QUEUED", limit=5),
                          words="ORDER BY")
        assert len(by_state) == 1
        assert "ix_runs_state_created" in by_state[0], by_state
        assert "TEMP B-TREE FOR ORDER BY" not in by_state[0], by_state
        several = _plans(store, lambda: store.list_runs(state=["QUEUED", "FAILED"], limit=5),
                         words="ORDER BY")
        assert len(several) == 2 and all("ix_runs_state_created" in p and
                                          "TEMP B-TREE FOR ORDER BY" not in p
                                          for p in several), several
        deep = _plans(store, lambda: store.list_runs(before=ids[3], limit=5),
                      words="ORDER BY")
        assert len(deep) == 1 and "created_at<" in deep[0].replace(" ", ""), deep
        job_deep = _plans(store, lambda: store.list_runs(job="j1", before=ids[3], limit=5),
                          words="ORDER BY")
        assert "job_id=? AND created_at<?" in job_deep[0], job_deep
        # A trigger that matches few runs (migration 0015): its own ordered range.
        by_trigger = _plans(store, lambda: store.list_runs(trigger="manual:nobody", limit=5),
                            words="ORDER BY")
        assert len(by_trigger) == 1 and "ix_runs_trigger_created" in by_trigger[0], by_trigger
        assert "TEMP B-TREE FOR ORDER BY" not in by_trigger[0], by_trigger
    finally:
        store.close()


def test_the_audit_log_by_type_or_actor_is_an_index_range(sqlite_url: str) -> None:
    """The audit page, newest first, filtered by type or by actor (migration 0015)."""
    store = Store.open(sqlite_url)
    try:
        store.create_runs([NewRun("j", "manual:t") for _ in range(5)])
        for filters in ({"event_type": "RUN_QUEUED"}, {"actor": "user:ana"}):
            plans = _plans(store, lambda f=filters: store.list_events(  # type: ignore[misc]
                newest_first=True, before_id=10**9, limit=20, **f), words="ORDER BY")
            name = "ix_event_log_type_event" if "event_type" in filters \
                else "ix_event_log_actor_event"
            assert len(plans) == 1 and name in plans[0], plans
            assert "TEMP B-TREE FOR ORDER BY" not in plans[0], plans
    finally:
        store.close()


def test_a_claim_from_the_queue_walks_the_claim_order_on_postgresql(pg_url: str) -> None:
    """Statistics that say few runs are queued (analyzed over a history of ended runs, then a
    burst queued; or never analyzed, autovacuum off) make PostgreSQL's planner read every
    queued run and sort them for each claim; the claim makes it walk ``ix_runs_claim_order``
    for its transaction, and sets the planner back afterwards."""
    store = Store.open(pg_url)
    try:
        now = datetime.now(UTC)
        store.create_runs([NewRun("old", "manual:t")] * 5000)
        with store.write() as conn:
            conn.exec_driver_sql("UPDATE runs SET state = 'SUCCEEDED'")
            conn.exec_driver_sql("ANALYZE runs")
        ids = store.create_runs([NewRun("burst", "manual:t")] * 10000)
        d = Dialect("postgresql")
        sql = "EXPLAIN " + run_states.claim_statement(d, jobs=1)
        params = [now, "burst", 1, "node:1:1", now + timedelta(minutes=1), now, now]

        def plan(conn: sa.Connection) -> str:
            raw = conn.connection.cursor()
            raw.execute(sql, params)
            return " | ".join(str(row[0]) for row in raw.fetchall())

        with store.write() as conn:
            stale = plan(conn)
            raw = conn.connection.cursor()
            raw.execute(hotsql.ORDERED)
            ordered = plan(conn)
        # The condition is real: left alone, the planner sorts the whole queue.
        assert "Sort" in stale, stale
        assert "ix_runs_claim_order" in ordered and "Sort" not in ordered, ordered
        with store.write() as conn:
            taken = store.claim_runs("node:1:1", now + timedelta(minutes=1),
                                     job_ids=["burst"], conn=conn)
            after = conn.exec_driver_sql("SELECT current_setting('enable_sort')").scalar()
        assert [run.id for run in taken] == sorted(ids)[:1]  # same created_at: by id
        assert after == "on"  # the rest of the transaction plans as before (set back by
        # the claim's RETURNING), and likewise after a claim that took nothing:
        with store.write() as conn:
            assert not store.claim_runs("node:1:1", now + timedelta(minutes=1),
                                        job_ids=["no-such-job"], conn=conn)
            after = conn.exec_driver_sql("SELECT current_setting('enable_sort')").scalar()
        assert after == "on"
    finally:
        store.close()


def test_a_claim_among_given_runs_looks_them_up_by_key_on_sqlite(sqlite_url: str) -> None:
    """The dispatcher claims the runs admission chose, by id: SQLite's planner, given the
    plain ``state = 'QUEUED'``, walked the claim order's index through the whole queue to
    find them (0.86 ms for 16 of 10,000 queued runs, instead of 0.03)."""
    store = Store.open(sqlite_url)
    try:
        now = datetime.now(UTC)
        ids = store.create_runs([NewRun("burst", "manual:t")] * 300)
        stamp = now.replace(tzinfo=None).isoformat(" ", "microseconds")
        chosen = ids[100:104]
        sql = run_states.claim_statement(Dialect("sqlite"), ids=len(chosen))
        with store.read() as conn:
            raw = conn.connection.driver_connection.cursor()
            raw.execute("EXPLAIN QUERY PLAN " + sql,
                        (stamp, *chosen, 4, "node:1:1", stamp, stamp, stamp))
            plan = " | ".join(str(row[3]) for row in raw.fetchall())
        assert "ix_runs_claim_order" not in plan, plan
        assert "sqlite_autoindex_runs_1 (id=?)" in plan, plan
        taken = store.claim_runs("node:1:1", now + timedelta(minutes=1), limit=4,
                                 run_ids=list(reversed(chosen)))
        assert sorted(run.id for run in taken) == chosen
    finally:
        store.close()


def _stale_statistics(store: Store) -> None:
    """Statistics of ``runs`` that say no run is queued or running: a history of ended runs,
    analyzed (the runs queued next are not in them)."""
    store.create_runs([NewRun("old", "manual:t")] * 3000)
    with store.write() as conn:
        conn.exec_driver_sql("UPDATE runs SET state = 'SUCCEEDED'")
        conn.exec_driver_sql("ANALYZE runs")


def _rows_read(conn: sa.Connection, table: str = "runs") -> int:
    """The rows of ``table`` that ``conn``'s transaction has read so far (PostgreSQL)."""
    return int(conn.exec_driver_sql(
        "SELECT coalesce(idx_tup_fetch, 0) + seq_tup_read FROM pg_stat_xact_user_tables"
        " WHERE relname = %s", (table,)).scalar_one())


def test_a_decision_reads_what_it_needs_whatever_the_statistics_on_postgresql(
        pg_url: str) -> None:
    """Statistics that say few runs are queued (analyzed over a history of ended runs, then
    a burst queued) made each of a decision's reads walk the whole queue: the ready runs
    read and sorted, the held runs looked for in another index, the runs chosen found by
    scanning the queue. Counted in the rows the transaction fetched from ``runs``."""
    store = Store.open(pg_url)
    try:
        _stale_statistics(store)
        now = datetime.now(UTC)
        ids = store.create_runs([NewRun("burst", "manual:t")] * 6000)
        store.create_runs([NewRun("burst", "manual:t", not_before=now + timedelta(hours=k))
                           for k in range(1, 4)])

        with store.write() as conn:
            before = _rows_read(conn)
            candidates = store.queued_candidates(now, 50, conn=conn)
            read = _rows_read(conn) - before
            chosen = sorted(ids)[10:26]
            before = _rows_read(conn)
            taken = store.claim_runs("node:1:1", now + timedelta(minutes=1), limit=16,
                                     run_ids=chosen, conn=conn)
            claimed = _rows_read(conn) - before
            after = conn.exec_driver_sql("SELECT current_setting('enable_sort')").scalar()
        assert len(candidates) == 53  # 50 ready and the 3 held, in admission order
        assert candidates == sorted(candidates, key=lambda c: c.order_key)
        assert read < 200, read  # was 6,053: the whole queue
        assert sorted(run.id for run in taken) == chosen
        assert claimed < 100, claimed  # was the whole queue too
        assert after == "on"  # the planner is set back for the rest of the transaction
    finally:
        store.close()


def test_a_batch_of_run_ends_looks_its_runs_up_by_key_on_postgresql(pg_url: str) -> None:
    """A batch of run ends is one UPDATE joined to the batch's rows: with statistics that
    said few runs were running, PostgreSQL's planner joined them to every RUNNING run read
    through the state index (16 ends among 6,000 running runs read all 6,000)."""
    store = Store.open(pg_url)
    try:
        _stale_statistics(store)
        now = datetime.now(UTC)
        ids = store.create_runs([NewRun("burst", "manual:t")] * 6000)
        store.claim_runs("node:1:1", now + timedelta(hours=1), limit=6000, run_ids=ids)
        d = Dialect("postgresql")
        ending = ids[100:116]
        rows = [run_states.end_run_row(run_id, 1, RunState.SUCCEEDED, None, None, None, None,
                                       None, None) for run_id in ending]
        with store.write() as conn:
            before = _rows_read(conn)
            cursor = conn.connection.cursor()
            hotsql.update_rows(cursor, d, run_states.END_RUN, rows, now, "run end")
            read = _rows_read(conn) - before
        assert read < 100, read
        with store.read() as conn:
            states = conn.exec_driver_sql(
                "SELECT state, count(*) FROM runs WHERE job_id = 'burst' GROUP BY state").all()
        assert dict(states) == {"SUCCEEDED": 16, "RUNNING": 5984}
    finally:
        store.close()


def test_a_batch_of_step_ends_looks_its_steps_up_by_key_as_the_table_grows(
        pg_url: str) -> None:
    """A new store's ``step_runs`` is empty. psycopg prepares a statement after a few runs
    and PostgreSQL keeps the plan it then made: for the batch of step ends, a hash join over
    a scan of the whole table, right for a table of a few rows and kept as it grew until
    autovacuum next analyzed it (a 20,000-run drain spent 2.6 s of the server's 7.7 s
    there). The step ends are planned at each batch, against the table as it is."""
    store = Store.open(pg_url)
    try:
        now = datetime.now(UTC)
        run_id = store.create_runs([NewRun("steps", "manual:t")])[0]
        stamp = now.replace(tzinfo=None)

        def steps(n: int) -> list[int]:
            with store.write() as conn:
                return [row[0] for row in conn.exec_driver_sql(
                    "INSERT INTO step_runs (run_id, step, step_type, attempt, state,"
                    " created_at, started_at, updated_at)"
                    " SELECT %(run)s, gen_random_uuid()::text, 'noop', 1,"
                    " 'RUNNING', %(at)s, %(at)s, %(at)s FROM generate_series(1, %(n)s)"
                    " RETURNING id", {"run": run_id, "at": stamp, "n": n}).all()]

        def end(ids: list[int]) -> int:
            rows = [{"id": step_id, "state": "SUCCEEDED", "reason": None, "rows": None,
                     "output": None, "error": None, "error_class": None} for step_id in ids]
            with store.write() as conn:
                before = _rows_read(conn, "step_runs")
                cursor = conn.connection.cursor()
                hotsql.update_rows(cursor, Dialect("postgresql"), boundaries.END_STEP, rows,
                                   now, "step end")
                return _rows_read(conn, "step_runs") - before

        for _ in range(12):  # a new store's first batches: prepared, planned on a few rows
            end(steps(16))
        steps(5000)
        read = end(steps(16))
        assert read < 100, read
    finally:
        store.close()


def test_events_by_type_and_time_walk_from_the_windows_first_event(sqlite_url: str) -> None:
    """The audit log by type (or actor, or none) and a time (migration 0025): no index of
    every event by type and time, which each of a run's events entered; a walk along
    event_id from the window's first event, found on the ``created_at`` index. And what
    it finds is the window exactly, though ids follow the commits and times the clocks."""
    clock = FakeClock("2027-03-01T12:00:00+00:00")
    store = Store.open(sqlite_url, clock=clock)
    try:
        store.append_event("CONFIG_CHANGED", "old", actor="user:ana")
        clock.set("2027-03-01T13:00:00+00:00")
        store.append_event("CONFIG_CHANGED", "in the window", actor="user:ana")
        clock.set("2027-03-01T12:59:00+00:00")  # a clock set back: a later id, an earlier time
        store.append_event("CONFIG_CHANGED", "before the window", actor="user:ana")
        clock.set("2027-03-01T13:05:00+00:00")
        store.append_event("CONFIG_CHANGED", "in it too", actor="user:ana")
        store.append_event("RUN_QUEUED", "another type")
        since = datetime(2027, 3, 1, 13, 0, tzinfo=UTC)
        by_type = "ix_event_log_type_event(event_type=?ANDevent_id>?)"
        by_actor = "ix_event_log_actor_event(actor=?ANDevent_id>?)"
        for filters, walk in (({"event_type": "CONFIG_CHANGED"}, by_type),
                              ({"actor": "user:ana"}, by_actor), ({}, "PRIMARYKEY(rowid>?)")):
            plans = _plans(store, lambda f=filters: store.list_events(  # type: ignore[misc]
                since=since, limit=20, **f), words="ORDER BY")
            assert len(plans) == 1, plans
            assert walk in plans[0].replace(" ", ""), plans
            assert "ix_event_log_created_at" in plans[0], plans  # the window's first event
            assert "TEMP B-TREE" not in plans[0], plans
        assert [e.message for e in store.list_events(event_type="CONFIG_CHANGED",
                                                     since=since)] == [
            "in the window", "in it too"]
        assert [e.message for e in store.list_events(since=since, newest_first=True)] == [
            "another type", "in it too", "in the window"]
        assert [e.message for e in store.list_events(
            event_type="CONFIG_CHANGED", since=datetime(2027, 3, 1, 12, 59, tzinfo=UTC))] == [
            "in the window", "before the window", "in it too"]
        assert store.list_events(since=datetime(2027, 3, 2, tzinfo=UTC)) == []
    finally:
        store.close()


def test_a_pools_history_by_type_and_time_reads_the_resource_events_only(
        sqlite_url: str) -> None:
    """The pool figures, a pool's utilization and the recent health checks read the events
    of a type in a window along ``ix_event_log_resource_type_created``, which holds the
    events that name a resource only (migration 0025)."""
    clock = FakeClock("2027-03-01T12:00:00+00:00")
    store = Store.open(sqlite_url, clock=clock)
    try:
        store.append_event("RESOURCE_LEASED", "u-1 leased", resource_id="u-1")
        store.create_runs([NewRun("j", "manual:t") for _ in range(3)])
        since = datetime(2027, 3, 1, 11, 0, tzinfo=UTC)
        plans = _plans(store, lambda: store.list_events(
            event_type="RESOURCE_LEASED", since=since, limit=100, resources_only=True),
            words="ORDER BY")
        assert len(plans) == 1 and "ix_event_log_resource_type_created" in plans[0], plans
        figures = _plans(store, lambda: pool_stats(store, since, clock.now()),
                         words="event_log")
        assert figures and all("ix_event_log_resource_type_created" in p for p in figures), \
            figures
        assert [e.message for e in store.list_events(
            event_type="RESOURCE_LEASED", since=since, resources_only=True)] == ["u-1 leased"]
        with store.read() as conn:
            made = dict(conn.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'event_log'"
                " AND type = 'index' AND sql IS NOT NULL").all())
        assert "ix_event_log_event_type_created_at" not in made
        assert "resource_id IS NOT NULL" in made["ix_event_log_resource_type_created"]
    finally:
        store.close()
