"""sql_query on SQLite: fetch modes, binds, one statement, errors, transactions, time limits."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sql_ctx import SqlTestContext, execute, rows, run_step, scalar

from cadenza.clock import FakeClock
from cadenza.domain.errors import Fatal, Retryable
from cadenza.steps.builtin.sql_query import SqlQueryStep

HOSTILE = "' ; -- $( ) ` {{ }} %s %(x)s :name ? \\ \" \n ${params.x} é 😀 \x01"
#: a query that keeps SQLite busy for a long time (the progress handler stops it)
SLOW = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
        "SELECT count(*) FROM c WHERE x < 10000000000")


@pytest.fixture
def url(tmp_path: Path) -> str:
    u = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    execute(u, "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, amount NUMERIC, day DATE)",
            "INSERT INTO t VALUES (1, 'a', 1.5, '2026-01-01'), (2, 'b', 2, '2026-01-02'), "
            "(3, 'c', NULL, NULL)")
    return u


@pytest.fixture
def ctx(tmp_path: Path, url: str) -> Iterator[SqlTestContext]:
    c = SqlTestContext(tmp_path, {"w": url}, params={"who": "b", "x": "X"})
    yield c
    c.close()


def test_fetch_count_first_all(ctx: SqlTestContext) -> None:
    q = "SELECT id, name, amount FROM t ORDER BY id"
    count = run_step(SqlQueryStep, ctx, connection="w", query=q)
    assert (count.rows, dict(count.output)) == (3, {"rows": 3})
    first = run_step(SqlQueryStep, ctx, connection="w", query=q, fetch="first")
    assert first.output == {"rows": 3, "columns": ["id", "name", "amount"],
                            "first": {"id": 1, "name": "a", "amount": 1.5}}
    every = run_step(SqlQueryStep, ctx, connection="w", query=q, fetch="all")
    assert every.output["rows_data"][2] == {"id": 3, "name": "c", "amount": None}
    assert every.output["truncated"] is False and every.rows == 3


def test_fetch_all_truncates_at_max_rows(ctx: SqlTestContext) -> None:
    result = run_step(SqlQueryStep, ctx, connection="w", fetch="all", max_rows=2,
                      query="SELECT id FROM t ORDER BY id")
    assert result.rows == 3
    assert result.output["rows_data"] == [{"id": 1}, {"id": 2}]
    assert result.output["truncated"] is True


def test_first_of_nothing_is_null(ctx: SqlTestContext) -> None:
    result = run_step(SqlQueryStep, ctx, connection="w", fetch="first",
                      query="SELECT id FROM t WHERE id > 99")
    assert result.output == {"rows": 0, "columns": ["id"], "first": None}


def test_dml_counts_affected_rows_and_commits(ctx: SqlTestContext, url: str) -> None:
    result = run_step(SqlQueryStep, ctx, connection="w",
                      query="UPDATE t SET amount = 0 WHERE id >= 2;")
    assert result.rows == 2
    assert scalar(url, "SELECT count(*) FROM t WHERE amount = 0") == 2


def test_tokens_and_params_are_binds(ctx: SqlTestContext, url: str) -> None:
    result = run_step(SqlQueryStep, ctx, connection="w", fetch="first",
                      query="SELECT id FROM t WHERE name = ${params.who} AND id < :limit",
                      params={"limit": 9})
    assert result.output["first"] == {"id": 2}
    debug = ctx.log_record.text("DEBUG")
    assert "name = :cz_0 AND id < :limit" in debug and "'cz_0': 'b'" in debug


@pytest.mark.reliability_case(16)
def test_hostile_values_stored_verbatim(ctx: SqlTestContext, url: str) -> None:
    run_step(SqlQueryStep, ctx, connection="w", params={"v": HOSTILE},
             query="INSERT INTO t (id, name) VALUES (10, :v)")
    ctx.params = {"h": HOSTILE}
    ctx.scope = type(ctx.scope)(params={"h": HOSTILE})
    run_step(SqlQueryStep, ctx, connection="w",
             query="INSERT INTO t (id, name) VALUES (11, ${params.h}) -- ${params.h}")
    assert rows(url, "SELECT name FROM t WHERE id >= 10 ORDER BY id") == [(HOSTILE,), (HOSTILE,)]
    assert scalar(url, "SELECT count(*) FROM t") == 5  # nothing else ran


@pytest.mark.reliability_case(17)
def test_token_inside_quotes_refused(ctx: SqlTestContext) -> None:
    with pytest.raises(Fatal, match="inside a quoted string"):
        run_step(SqlQueryStep, ctx, connection="w",
                 query="SELECT id FROM t WHERE name = '${params.who}'")


def test_unknown_token_is_fatal(ctx: SqlTestContext) -> None:
    with pytest.raises(Fatal, match=r"\$\{params.nope\}"):
        run_step(SqlQueryStep, ctx, connection="w", query="SELECT ${params.nope}")


@pytest.mark.reliability_case(23)
def test_multiple_statements_refused_and_nothing_runs(ctx: SqlTestContext, url: str) -> None:
    with pytest.raises(Fatal, match="expected one SQL statement"):
        run_step(SqlQueryStep, ctx, connection="w", query="DELETE FROM t; DROP TABLE t")
    assert scalar(url, "SELECT count(*) FROM t") == 3


@pytest.mark.parametrize(("query", "message"), [
    ("SELEC 1", "syntax error"), ("SELECT * FROM missing_table", "no such table"),
    ("SELECT nope FROM t", "no such column"),
    ("INSERT INTO t (id) VALUES (1)", "UNIQUE constraint failed"),
])
def test_errors_are_fatal_with_the_driver_message(ctx: SqlTestContext, query: str,
                                                  message: str) -> None:
    with pytest.raises(Fatal, match=message):
        run_step(SqlQueryStep, ctx, connection="w", query=query)


def test_failed_statement_rolls_back(ctx: SqlTestContext, url: str) -> None:
    execute(url, "CREATE TABLE u (v INTEGER CHECK (v < 3))")
    with pytest.raises(Fatal, match="CHECK constraint failed"):
        run_step(SqlQueryStep, ctx, connection="w",
                 query="INSERT INTO u SELECT id FROM t")  # 1, 2 then 3 fails
    assert scalar(url, "SELECT count(*) FROM u") == 0


def test_locked_database_is_retryable(ctx: SqlTestContext, url: str, tmp_path: Path) -> None:
    import sqlite3

    holder = sqlite3.connect(tmp_path / "w.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        ctx.set_remaining(60)
        engine = ctx.sql_engine("w")
        with engine.connect() as c:  # shorten the busy timeout for this test
            c.connection.dbapi_connection.execute("PRAGMA busy_timeout = 100")  # type: ignore[union-attr]
        with pytest.raises(Retryable, match="locked"):
            run_step(SqlQueryStep, ctx, connection="w", query="SELECT count(*) FROM t")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def strike_during_the_statement(ctx: SqlTestContext,
                                strike: Callable[[], object] | None = None) -> list[int]:
    """At the step's second look at ``ctx.cancelled()`` (from SQLite's progress handler: the
    statement is running), whatever the machine's speed, call ``strike()``, or (None)
    cancel the run; returns the looks."""
    looks: list[int] = []
    canceled = threading.Event()

    def look() -> bool:
        looks.append(1)
        if len(looks) == 2:
            (strike or canceled.set)()
        return canceled.is_set()

    ctx.cancel = look
    return looks


def test_timeout_stops_the_statement(tmp_path: Path, url: str) -> None:
    clock = FakeClock()
    ctx = SqlTestContext(tmp_path, {"w": url}, timeout=60, clock=clock)
    try:
        looks = strike_during_the_statement(ctx, lambda: clock.advance(61))
        started = time.monotonic()
        with pytest.raises(Retryable, match="step timeout"):
            run_step(SqlQueryStep, ctx, connection="w", query=SLOW)
        assert time.monotonic() - started < 2  # stopped, not run to its end
        assert len(looks) == 2  # stopped at the first look after the strike
    finally:
        ctx.close()


def test_no_time_left_is_retryable(ctx: SqlTestContext) -> None:
    ctx.set_remaining(0)
    with pytest.raises(Retryable, match="step timeout"):
        run_step(SqlQueryStep, ctx, connection="w", query="SELECT 1")


def test_cancel_stops_the_statement(ctx: SqlTestContext) -> None:
    looks = strike_during_the_statement(ctx)
    started = time.monotonic()
    with pytest.raises(Fatal, match="step canceled"):
        run_step(SqlQueryStep, ctx, connection="w", query=SLOW)
    assert time.monotonic() - started < 2  # stopped, not run to its end
    assert len(looks) == 2


@pytest.mark.reliability_case(24)
def test_connection_is_clean_after_a_timeout(tmp_path: Path, url: str) -> None:
    clock = FakeClock()
    ctx = SqlTestContext(tmp_path, {"w": url}, timeout=60, clock=clock)
    try:
        strike_during_the_statement(ctx, lambda: clock.advance(61))
        with pytest.raises(Retryable, match="step timeout"):
            run_step(SqlQueryStep, ctx, connection="w", query=SLOW)
        ctx.cancel = False
        ctx.set_remaining(30)
        run_step(SqlQueryStep, ctx, connection="w", query="INSERT INTO t (id) VALUES (50)")
        assert scalar(url, "SELECT count(*) FROM t") == 4  # committed: no transaction left
    finally:
        ctx.close()


def test_query_from_file(ctx: SqlTestContext, tmp_path: Path) -> None:
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "q.sql").write_text("-- count\nSELECT count(*) AS n FROM t "
                                           "WHERE name <> ${params.who};\n", encoding="utf-8")
    result = run_step(SqlQueryStep, ctx, connection="w", file="sql/q.sql", fetch="first")
    assert result.output["first"] == {"n": 2}


def test_query_file_outside_home_refused(ctx: SqlTestContext, tmp_path: Path) -> None:
    (tmp_path / "link.sql").symlink_to("/etc/hostname")
    with pytest.raises(Fatal, match="outside the home"):
        run_step(SqlQueryStep, ctx, connection="w", file="link.sql")
    with pytest.raises(Fatal, match="cannot read the query file"):
        run_step(SqlQueryStep, ctx, connection="w", file="missing.sql")


def test_values_are_json(ctx: SqlTestContext) -> None:
    result = run_step(SqlQueryStep, ctx, connection="w", fetch="first",
                      query="SELECT x'00ff' AS b, 1e999 AS inf, 'x' AS id, 2 AS id")
    assert result.output["first"] == {"b": "AP8=", "inf": "inf", "id": "x", "id_2": 2}


def test_a_stopped_transaction_closes_its_connection_rather_than_pool_it(
        ctx: SqlTestContext) -> None:
    """A canceled step's thread may finish after its worker ended the run and disposed of
    the engine: its connection must be closed, not handed back to a pool nobody holds
    (where it stays open until the garbage collector finds it)."""
    from cadenza.steps.builtin.lib.sqlutil import transaction

    engine = ctx.sql_engine("w")
    with pytest.raises(Fatal, match="canceled"):
        with transaction(engine, ctx, "q") as (conn, _guard):
            raw = conn.connection.dbapi_connection
            conn.exec_driver_sql("SELECT 1")
            ctx.cancel = True
            engine.dispose()  # the worker gave up on the step and closed its engines
            conn.exec_driver_sql(SLOW)
    assert raw is not None
    with pytest.raises(Exception, match="closed"):
        raw.execute("SELECT 1")


@settings(max_examples=100, deadline=None)
@given(value=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
                     max_size=40) | st.sampled_from(["'; DROP TABLE t; --", "x' OR '1'='1",
                                                    "${params.h}", ":v", "?", "%s", "1); --"]))
@pytest.mark.reliability_case(16)
def test_a_parameter_never_becomes_sql_text(value: str) -> None:
    """Whatever a parameter holds, ``${params.h}`` is a bind: the row holds it verbatim and
    nothing else ran (the table is whole, no other row)."""
    with tempfile.TemporaryDirectory() as tmp:
        u = f"sqlite:///{(Path(tmp) / 'w.db').as_posix()}"
        execute(u, "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)",
                "INSERT INTO t VALUES (1, 'a')")
        c = SqlTestContext(Path(tmp), {"w": u}, params={"h": value})
        try:
            run_step(SqlQueryStep, c, connection="w",
                     query="INSERT INTO t (id, name) VALUES (2, ${params.h})")
            found = run_step(SqlQueryStep, c, connection="w", fetch="all",
                             query="SELECT id FROM t WHERE name = ${params.h} ORDER BY id")
        finally:
            c.close()
        assert rows(u, "SELECT id, name FROM t ORDER BY id") == [(1, "a"), (2, value)]
        assert [r["id"] for r in found.output["rows_data"]] == ([1, 2] if value == "a" else [2])
