"""sql_query on SQLite, PostgreSQL and MariaDB: fetch modes, binds, one statement, error
classes, and time limits that really stop the statement on the server."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_ctx import (
    Db,
    SqlTestContext,
    database,
    execute,
    rows,
    run_step,
    scalar,
    table_name,
)

from cadenza.domain.errors import Fatal, Retryable
from cadenza.steps.builtin.sql_query import SqlQueryStep

HOSTILE = "' ; -- $( ) ` {{ }} %s %(x)s :name ? \\ \" \n é 😀 ${params.x} DROP TABLE t"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres),
                        pytest.param("mariadb", marks=pytest.mark.mariadb)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    else:
        url = str(request.getfixturevalue("pg_url" if request.param == "postgresql"
                                          else "mariadb_url"))
    yield from database(request.param, url)


@pytest.fixture
def sales(db: Db) -> str:
    t = db.table("sales")
    execute(db.url, f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, name VARCHAR(200), "
                    "amount NUMERIC(10, 2), day DATE)",
            f"INSERT INTO {t} VALUES (1, 'a', 1.50, '2026-01-01'), (2, 'b', 2, '2026-01-02'), "
            "(3, 'c', NULL, NULL)")
    return t


@pytest.fixture
def ctx(tmp_path: Path, db: Db) -> Iterator[SqlTestContext]:
    c = SqlTestContext(tmp_path, {"w": db.url}, params={"who": "b", "x": "X"})
    yield c
    c.close()


def query(ctx: SqlTestContext, sql: str, **fields: object) -> object:
    return run_step(SqlQueryStep, ctx, connection="w", query=sql, **fields)


def test_fetch_modes_and_json_values(ctx: SqlTestContext, sales: str) -> None:
    q = f"SELECT id, name, amount, day FROM {sales} ORDER BY id"
    assert run_step(SqlQueryStep, ctx, connection="w", query=q).output == {"rows": 3}
    first = run_step(SqlQueryStep, ctx, connection="w", query=q, fetch="first").output
    assert first["columns"] == ["id", "name", "amount", "day"]
    assert first["first"]["id"] == 1 and first["first"]["day"] == "2026-01-01"
    assert first["first"]["amount"] in ("1.50", 1.5)  # Decimal as exact text; SQLite: a REAL
    every = run_step(SqlQueryStep, ctx, connection="w", query=q, fetch="all", max_rows=2).output
    assert every["rows"] == 3 and every["truncated"] is True
    assert [r["name"] for r in every["rows_data"]] == ["a", "b"]


def test_dml_rows_and_commit(ctx: SqlTestContext, db: Db, sales: str) -> None:
    result = run_step(SqlQueryStep, ctx, connection="w",
                      query=f"UPDATE {sales} SET amount = 0 WHERE id >= :low", params={"low": 2})
    assert result.rows == 2
    assert scalar(db.url, f"SELECT count(*) FROM {sales} WHERE amount = 0") == 2


@pytest.mark.reliability_case(16, 19)
def test_hostile_values_bind_verbatim(ctx: SqlTestContext, db: Db, sales: str) -> None:
    ctx.scope = type(ctx.scope)(params={"h": HOSTILE})
    run_step(SqlQueryStep, ctx, connection="w", params={"v": HOSTILE},
             query=f"INSERT INTO {sales} (id, name) VALUES (10, :v)")
    run_step(SqlQueryStep, ctx, connection="w",
             query=f"INSERT INTO {sales} (id, name) VALUES (11, ${{params.h}}) -- 100%")
    got = rows(db.url, f"SELECT name FROM {sales} WHERE id >= 10 ORDER BY id")
    assert got == [(HOSTILE,), (HOSTILE,)]
    found = run_step(SqlQueryStep, ctx, connection="w", fetch="first", params={"v": HOSTILE},
                     query=f"SELECT count(*) AS n, '50%' AS pct FROM {sales} WHERE name = :v")
    assert found.output["first"] == {"n": 2, "pct": "50%"}


@pytest.mark.reliability_case(23)
def test_several_statements_refused(ctx: SqlTestContext, db: Db, sales: str) -> None:
    with pytest.raises(Fatal, match="expected one SQL statement"):
        query(ctx, f"DELETE FROM {sales}; DROP TABLE {sales}")
    assert scalar(db.url, f"SELECT count(*) FROM {sales}") == 3


@pytest.mark.parametrize(("sql", "message"), [
    ("SELEC 1", "syntax"), ("SELECT * FROM no_such_table_here", "no_such_table_here"),
])
def test_errors_are_fatal(ctx: SqlTestContext, sql: str, message: str) -> None:
    with pytest.raises(Fatal, match=message):
        query(ctx, sql)


def test_constraint_violation_is_fatal_and_rolls_back(ctx: SqlTestContext, db: Db,
                                                      sales: str) -> None:
    with pytest.raises(Fatal):
        query(ctx, f"INSERT INTO {sales} (id, name) SELECT id + 3, name FROM {sales} "
                   f"UNION ALL SELECT 1, 'dup'")
    assert scalar(db.url, f"SELECT count(*) FROM {sales}") == 3


@pytest.mark.postgres
@pytest.mark.reliability_case(24)
def test_postgres_timeout_cancels_the_backend(tmp_path: Path, pg_url: str) -> None:
    ctx = SqlTestContext(tmp_path, {"w": pg_url}, timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(Retryable, match="step timeout"):
            query(ctx, "SELECT pg_sleep(10)")
        assert time.monotonic() - started < 2.5
        assert _pg_sleepers(pg_url) == 0
        ctx.set_remaining(30)  # the pooled connection is clean: a new statement works
        assert run_step(SqlQueryStep, ctx, connection="w", query="SELECT 1").rows == 1
    finally:
        ctx.close()


@pytest.mark.postgres
def test_postgres_cancel_stops_the_statement(tmp_path: Path, pg_url: str) -> None:
    ctx = SqlTestContext(tmp_path, {"w": pg_url}, timeout=60)
    flag = threading.Event()
    ctx.cancel = flag.is_set

    def cancel_in_flight() -> None:
        _wait_for_backend(pg_url, "query = :q", q="SELECT pg_sleep(10)")
        flag.set()

    canceler = threading.Thread(target=cancel_in_flight)
    canceler.start()
    started = time.monotonic()
    try:
        with pytest.raises(Fatal, match="step canceled"):
            query(ctx, "SELECT pg_sleep(10)")
        assert time.monotonic() - started < 2.5
        assert _pg_sleepers(pg_url) == 0
    finally:
        canceler.join()
        ctx.close()


def _wait_for_backend(url: str, where: str, timeout: float = 20.0, **binds: str) -> None:
    """Return once another backend of ``url``'s database matches ``where`` in
    ``pg_stat_activity`` (polls the server: the statement is there, not a guess of how long
    the step takes to get there)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        deadline = time.monotonic() + timeout
        with engine.connect() as conn:
            while time.monotonic() < deadline:
                if conn.execute(sa.text(f"SELECT count(*) FROM pg_stat_activity WHERE {where} "
                                        "AND pid <> pg_backend_pid()"
                                        " AND datname = current_database()"), binds).scalar():
                    return
                conn.rollback()
                time.sleep(0.01)  # polling the server's state (I/O), not letting time pass
        raise AssertionError(f"no backend matched {where} {binds}")
    finally:
        engine.dispose()


def _pg_sleepers(url: str) -> int:
    # This test's database only: another test's pg_sleep(10) may run meanwhile (xdist).
    return int(scalar(url, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                           "AND query LIKE '%pg_sleep(10)%' AND pid <> pg_backend_pid()"
                           " AND datname = current_database()"))


@pytest.mark.postgres
def test_postgres_deadlock_is_retryable(tmp_path: Path, pg_url: str) -> None:
    import sqlalchemy as sa

    execute(pg_url, "CREATE TABLE d (id INTEGER PRIMARY KEY, v TEXT)",
            "INSERT INTO d VALUES (1, 'a'), (2, 'b')")
    other = sa.create_engine(pg_url)
    ctx = SqlTestContext(tmp_path, {"w": pg_url}, timeout=30)
    with other.connect() as conn:
        conn.exec_driver_sql("SET deadlock_timeout = '5s'")  # the step detects it first
        conn.exec_driver_sql("UPDATE d SET v = 'x' WHERE id = 2")

        def close_the_cycle() -> None:
            _wait_for_backend(pg_url, "wait_event_type = 'Lock' AND query = :q",
                              q="UPDATE d SET v = 's'")  # it holds row 1, waits for row 2
            conn.exec_driver_sql("UPDATE d SET v = 'x' WHERE id = 1")

        thread = threading.Thread(target=close_the_cycle)
        thread.start()
        try:
            with pytest.raises(Retryable, match="deadlock"):
                query(ctx, "UPDATE d SET v = 's'")  # row 1, then waits for row 2
        finally:
            thread.join()
            conn.rollback()
            ctx.close()
    other.dispose()


@pytest.mark.mariadb
@pytest.mark.reliability_case(24)
def test_mariadb_timeout_stops_the_query(tmp_path: Path, mariadb_url: str) -> None:
    ctx = SqlTestContext(tmp_path, {"w": mariadb_url}, timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(Retryable, match="step timeout"):
            t = table_name()
            execute(mariadb_url, f"CREATE TABLE {t} (x INTEGER)")
            try:
                query(ctx, f"INSERT INTO {t} SELECT SLEEP(10)")
            finally:
                execute(mariadb_url, f"DROP TABLE {t}")
        assert time.monotonic() - started < 2.5
        assert scalar(mariadb_url, "SELECT count(*) FROM information_schema.processlist "
                                   "WHERE info LIKE '%SLEEP(10)%' AND id <> CONNECTION_ID()") == 0
    finally:
        ctx.close()


@pytest.mark.reliability_case(23)
def test_ddl_as_the_one_statement_runs_as_written(ctx: SqlTestContext, db: Db,
                                                  sales: str) -> None:
    """The policy for DDL in a query step is the one docs/steps.md states: allowed, as the
    job's author wrote it (a step may create, change or drop a table), counted as 0 rows;
    it cannot come from input, since a run cannot replace the query and parameters bind as
    values. CREATE, ALTER and DROP each run alone on every dialect; a DDL statement
    followed by a second one is refused and runs nothing."""
    made = db.table("made")
    assert query(ctx, f"CREATE TABLE {made} (id INTEGER)").output == {"rows": 0}
    assert query(ctx, f"ALTER TABLE {made} ADD COLUMN note VARCHAR(20)").output == {"rows": 0}
    run_step(SqlQueryStep, ctx, connection="w", params={"v": "DROP TABLE x"},
             query=f"INSERT INTO {made} (id, note) VALUES (1, :v)")
    assert rows(db.url, f"SELECT id, note FROM {made}") == [(1, "DROP TABLE x")]
    with pytest.raises(Fatal, match="expected one SQL statement"):
        query(ctx, f"DROP TABLE {made}; DROP TABLE {sales}")
    assert scalar(db.url, f"SELECT count(*) FROM {made}") == 1
    assert query(ctx, f"DROP TABLE {made}").output == {"rows": 0}
    with pytest.raises(Fatal, match=made):
        query(ctx, f"SELECT * FROM {made}")
    assert scalar(db.url, f"SELECT count(*) FROM {sales}") == 3
