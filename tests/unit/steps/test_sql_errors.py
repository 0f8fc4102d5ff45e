"""Driver errors → SPEC §7 classes, at sqlutil.translate, for the three drivers."""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg.errors as pg
import pymysql
import pytest
import sqlalchemy as sa

from cadenza.domain.errors import Fatal, Retryable, StepError
from cadenza.steps.builtin.lib import sqlutil


def classify(exc: BaseException, wrap: bool = True) -> StepError:
    if wrap:  # as SQLAlchemy hands it over
        exc = sa.exc.DBAPIError.instance("SELECT 1", {}, exc, type(exc))
    return sqlutil.translate(exc, "doing x")


@pytest.mark.parametrize(("error", "expected"), [
    (pg.DeadlockDetected("deadlock detected"), Retryable),
    (pg.SerializationFailure("could not serialize access"), Retryable),
    (pg.AdminShutdown("terminating connection"), Retryable),
    (pg.LockNotAvailable("lock timeout"), Retryable),
    (pg.DiskFull("no space"), Retryable),
    (psycopg.OperationalError("connection refused"), Retryable),
    (pg.SyntaxError("syntax error at or near"), Fatal),
    (pg.UndefinedTable("relation does not exist"), Fatal),
    (pg.InsufficientPrivilege("permission denied"), Fatal),
    (pg.InvalidPassword("password authentication failed"), Fatal),
    (pg.UniqueViolation("duplicate key"), Fatal),
    (pg.ReadOnlySqlTransaction("read-only transaction"), Fatal),
])
@pytest.mark.reliability_case(27)
def test_postgresql(error: BaseException, expected: type[StepError]) -> None:
    result = classify(error)
    assert type(result) is expected
    assert str(result).startswith("doing x: ")


@pytest.mark.parametrize(("code", "expected"), [
    (1213, Retryable), (1205, Retryable), (2006, Retryable), (2013, Retryable),
    (2003, Retryable), (1040, Retryable), (0, Retryable),
    (1064, Fatal), (1146, Fatal), (1054, Fatal), (1142, Fatal), (1045, Fatal), (1062, Fatal),
    (1366, Fatal), (1290, Fatal),
])
def test_mariadb(code: int, expected: type[StepError]) -> None:
    error = pymysql.err.OperationalError(code, "message")
    error.sqlstate = "HY000"  # PyMySQL sets it from the server's reply
    assert type(classify(error)) is expected


def test_server_timeouts_say_step_timeout() -> None:
    assert "step timeout" in str(classify(pg.QueryCanceled("canceling statement")))
    assert "step timeout" in str(classify(pymysql.err.OperationalError(1969, "max_statement")))
    interrupted = sqlite3.OperationalError("interrupted")
    interrupted.sqlite_errorcode = 9  # type: ignore[attr-defined]
    assert isinstance(classify(interrupted), Retryable)


@pytest.mark.parametrize(("code", "expected"), [
    (5, Retryable), (6, Retryable), (261, Retryable), (10, Retryable), (13, Retryable),
    (1, Fatal), (8, Fatal), (19, Fatal), (2067, Fatal), (14, Fatal),
])
def test_sqlite(code: int, expected: type[StepError]) -> None:
    error = sqlite3.OperationalError("message")
    error.sqlite_errorcode = code  # type: ignore[attr-defined]
    assert type(classify(error)) is expected


def test_real_sqlite_errors() -> None:
    conn = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.Error) as caught:
        conn.execute("SELECT * FROM nope")
    assert type(classify(caught.value)) is Fatal
    with pytest.raises(sqlite3.Error) as caught:
        conn.execute("SELECT 1; SELECT 2")
    assert type(classify(caught.value)) is Fatal


def test_other_errors() -> None:
    assert isinstance(sqlutil.translate(sa.exc.TimeoutError("pool"), "x"), Retryable)
    assert isinstance(sqlutil.translate(ConnectionResetError("reset"), "x"), Retryable)
    assert isinstance(sqlutil.translate(ValueError("bad"), "x"), Fatal)
    already = Fatal("kept")
    assert sqlutil.translate(already, "x") is already
