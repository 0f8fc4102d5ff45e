"""The schema: migrations equal the tables, newer schemas are refused, the audit log is
append-only, and timestamps come back aware and in UTC on every dialect."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.schema import CreateIndex

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreError
from cadenza.store import Store
from cadenza.store import migrate as migrations
from cadenza.store.tables import event_log, metadata, runs


def test_the_migrations_create_exactly_the_tables(store: Store) -> None:
    sqlite = store.dialect == "sqlite"

    def compared(obj: object, name: str | None, type_: str, reflected: bool,
                 compare_to: object) -> bool:
        # SQLAlchemy does not reflect SQLite's expression indexes (it warns and skips
        # them): that one is compared by its DDL below.
        return not (sqlite and type_ == "index" and name == "ix_runs_claim_order")

    with store.read() as conn, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Skipped unsupported reflection of expression-based"
                                " index ix_runs_claim_order")
        warnings.filterwarnings("ignore", "autogenerate skipping metadata-specified "
                                "expression-based index 'ix_runs_claim_order'")
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_object": compared})
        differences = compare_metadata(context, metadata)
        assert differences == []
        if sqlite:
            (made,) = conn.execute(sa.text(
                "SELECT sql FROM sqlite_master WHERE name = 'ix_runs_claim_order'")).one()
            (index,) = [i for i in runs.indexes if i.name == "ix_runs_claim_order"]
            wanted = str(CreateIndex(index).compile(dialect=conn.dialect))
            assert " ".join(made.split()) == " ".join(wanted.split())
        assert migrations.current_revisions(conn) == (migrations.head_revision(),)
        names = set(sa.inspect(conn).get_table_names())
    assert {t.name for t in metadata.sorted_tables} <= names


def test_opening_again_is_a_no_op(store_url: str, clock: FakeClock) -> None:
    first = Store.open(store_url, clock=clock)
    run_id = first.create_run("j", "manual")
    first.close()
    again = Store.open(store_url, clock=clock)
    try:
        assert again.get_run(run_id or "") is not None
    finally:
        again.close()


def test_a_newer_schema_is_refused(store: Store, store_url: str) -> None:
    with store.write() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    store.close()
    for migrate in (True, False):
        with pytest.raises(StoreError, match="9999_from_the_future is newer than this Cadenza"):
            Store.open(store_url, migrate=migrate)


def test_without_migrate_an_empty_database_is_refused(store_url: str) -> None:
    with pytest.raises(StoreError, match="needs schema"):
        Store.open(store_url, migrate=False)


def test_an_unreachable_database_is_a_store_error() -> None:
    url = "postgresql+psycopg://nobody:pw@127.0.0.1:1/nothing"
    with pytest.raises(StoreError, match="cannot open the store") as info:
        Store.open(url)
    assert ":pw@" not in str(info.value)


def test_unsupported_urls_and_settings_are_refused() -> None:
    with pytest.raises(StoreError, match="unsupported store URL"):
        Store.open("mysql+pymysql://root@127.0.0.1/x")
    with pytest.raises(StoreError, match="sqlite_synchronous"):
        Store.open("sqlite:///x.db", sqlite_synchronous="OFF")


def test_a_lease_changes_no_indexed_column_of_resources(store: Store) -> None:
    """Leases, starts and releases change a member's state, owner, lease and epoch in place:
    none of those is indexed, so that on PostgreSQL every such change is a HOT update and
    the table keeps its live size without VACUUM (migration 0014); there the table also
    keeps half of each page free for the next version."""
    changed = {"state", "lease_owner", "lease_until", "lease_epoch", "lease_step",
               "updated_at", "last_error"}
    with store.read() as conn:
        indexes = sa.inspect(conn).get_indexes("resources")
        indexed = {c for index in indexes for c in index["column_names"] if c}
        assert indexed and not indexed & changed, indexes
        if store.dialect == "postgresql":
            options = conn.exec_driver_sql(
                "SELECT reloptions FROM pg_class WHERE relname = 'resources'").scalar()
            assert options == ["fillfactor=50"]


def test_the_event_log_refuses_updates(store: Store) -> None:
    event_id = store.append_event("CONFIG_CHANGED", "before")
    with pytest.raises(sa.exc.DBAPIError, match="append-only"), store.write() as conn:
        conn.execute(sa.update(event_log).values(message="after"))
    assert [e.message for e in store.list_events()] == ["before"]
    with store.write() as conn:  # retention may still delete
        conn.execute(sa.delete(event_log).where(event_log.c.event_id == event_id))
    assert store.list_events() == []
    assert store.append_event("CONFIG_CHANGED", "next") > event_id  # ids are never reused


def test_timestamps_are_utc_and_aware(store: Store, clock: FakeClock) -> None:
    paris = ZoneInfo("Europe/Paris")
    clock.set(datetime(2027, 7, 1, 2, 30, tzinfo=paris))  # summer time, UTC+2
    at = datetime(2027, 7, 1, 2, 0, tzinfo=paris)
    run_id = store.create_run("tz", "scheduled", schedule="main", scheduled_for=at, not_before=at)
    assert run_id
    run = store.get_run(run_id)
    assert run is not None
    for value in (run.scheduled_for, run.created_at, run.not_before, run.updated_at):
        assert value is not None and value.tzinfo is UTC
    assert run.scheduled_for == at and run.scheduled_for.hour == 0
    assert run.created_at == datetime(2027, 7, 1, 0, 30, tzinfo=UTC)
    with store.read() as conn:
        stored = conn.execute(sa.select(runs.c.scheduled_for).where(runs.c.id == run_id)).scalar()
    assert stored == at
    with pytest.raises(ValueError, match="timezone-aware"):
        store.create_run("tz", "manual", not_before=datetime(2027, 1, 1))


def _index_definitions(conn: sa.Connection, table: str) -> dict[str, str]:
    """{name: CREATE INDEX text} of ``table``'s indexes (SQLite's own, unnamed in SQL,
    left out)."""
    if conn.dialect.name == "sqlite":
        return dict(conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE tbl_name = ? AND type = 'index'"
            " AND sql IS NOT NULL", (table,)).all())
    return dict(conn.exec_driver_sql(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", (table,)).all())


def test_the_event_logs_person_and_resource_indexes_are_partial(store: Store) -> None:
    """A run's events, written by the system and naming no resource, enter neither the
    actor index nor the resource index (migration 0016); the audit log by actor and a
    resource's history still read along them, and find every event."""
    store.append_event("CONFIG_CHANGED", "by the system")
    store.append_event("CONFIG_CHANGED", "by ana", actor="user:ana")
    store.append_event("RESOURCE_STATE_CHANGED", "u-1 disabled", resource_id="u-1",
                       actor="user:ana")
    store.append_event("RESOURCE_STATE_CHANGED", "u-1 enabled", resource_id="u-1")
    with store.read() as conn:
        made = _index_definitions(conn, "event_log")
        assert "WHERE" in made["ix_event_log_actor_event"]
        assert "'system'" in made["ix_event_log_actor_event"]
        assert "WHERE" in made["ix_event_log_resource_id_event_id"]
        assert "IS NOT NULL" in made["ix_event_log_resource_id_event_id"]
        assert "WHERE" not in made["ix_event_log_type_event"]
        if store.dialect == "sqlite":  # a resource's history uses it (the audit log by
            # actor: test_store_query_plans); no statistics here: the plan is fixed
            plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT * FROM event_log WHERE resource_id = ?"
                " ORDER BY event_id DESC LIMIT 50", ("u-1",)).all())
            assert "ix_event_log_resource_id_event_id" in plan, plan
    assert [e.message for e in store.list_events(actor="user:ana")] == [
        "by ana", "u-1 disabled"]
    assert [e.message for e in store.list_events(actor="system", newest_first=True)] == [
        "u-1 enabled", "by the system"]
    assert [e.message for e in store.list_events(resource_id="u-1")] == [
        "u-1 disabled", "u-1 enabled"]


def test_a_run_enters_the_state_indexes_of_runs_only_while_in_their_state(store: Store) -> None:
    """The running runs' index, the held runs' index and the call_job children's index of
    ``runs`` are partial (migration 0023): a top-level run that ran and ended is in none of
    them, so its claim and its end enter fewer indexes. No index of ``runs`` holds
    ``lease_until``: a lease renewal changes no indexed column. The children's key stays
    unique."""
    with store.read() as conn:
        made = _index_definitions(conn, "runs")
        with warnings.catch_warnings():  # SQLite: the claim order's expression index
            warnings.simplefilter("ignore", sa.exc.SAWarning)
            indexed = {c for index in sa.inspect(conn).get_indexes("runs")
                       for c in index["column_names"] if c}
    assert "ix_runs_state_lease_until" not in made
    assert "ix_runs_state_not_before_priority" not in made
    assert "'RUNNING'" in made["ix_runs_running"].split("WHERE")[1]
    assert "'QUEUED'" in made["ix_runs_held"].split("WHERE")[1]
    assert "not_before IS NOT NULL" in made["ix_runs_held"].split("WHERE")[1]
    assert "IS NOT NULL" in made["ix_runs_parent"].split("WHERE")[1]
    assert "UNIQUE" in made["ix_runs_parent"]
    assert "lease_until" not in indexed, made


_MIGRATE_AND_HOLD = """
import sys, time
from sqlalchemy import event
from sqlalchemy.engine import Engine

made = [0]


@event.listens_for(Engine, "before_cursor_execute")
def hold(conn, cursor, statement, params, context, executemany):
    if statement.lstrip().upper().startswith(("CREATE", "ALTER", "DROP")):
        made[0] += 1
        if made[0] == int(sys.argv[2]):  # in the middle of the migrations: wait to be killed
            print("holding", flush=True)
            time.sleep(120)


from cadenza.store import Store

Store.open(sys.argv[1]).close()
print("finished", made[0], flush=True)
"""


@pytest.mark.reliability_case(56)
def test_a_migration_killed_midway_leaves_the_old_schema_and_resumes(store_url: str) -> None:
    """A real process migrating a fresh store is killed (kill -9, TerminateProcess on
    Windows) in the middle of its migrations, after some tables are made and before the
    rest: every migration runs in one transaction, so the database is left as it was
    (no table, no revision), not half-migrated; opening it without migrations says
    plainly what to do, and the next open migrates it to the head revision."""
    import subprocess
    import sys

    def run(hold_at: int) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", _MIGRATE_AND_HOLD, store_url,
                                 str(hold_at)], stdout=subprocess.PIPE, text=True)

    engine = sa.create_engine(store_url)
    try:
        migrating = run(30)
        assert migrating.stdout is not None
        line = migrating.stdout.readline()
        assert line == "holding\n", f"the migrations made fewer than 30 objects: {line!r}"
        with engine.connect() as conn:  # the other sessions see nothing of it yet
            assert sa.inspect(conn).get_table_names() == []
        migrating.kill()
        migrating.wait(30)
        migrating.stdout.close()
        with engine.connect() as conn:
            assert sa.inspect(conn).get_table_names() == []
            assert migrations.current_revisions(conn) == ()
    finally:
        engine.dispose()
    with pytest.raises(StoreError, match=r"no schema.*open it with migrations enabled"):
        Store.open(store_url, migrate=False)
    with Store.open(store_url) as store, store.read() as conn:
        assert migrations.current_revisions(conn) == (migrations.head_revision(),)
