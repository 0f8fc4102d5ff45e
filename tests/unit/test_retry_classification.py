"""The SPEC §7 classification table, at each integration's boundary: python exceptions
(executor/errors.py classify), SQL driver errors (steps/sqlutil.translate, on a real SQLite
database) and HTTP statuses (steps/http)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from cadenza import Deferred, Fatal, ResourceFault, Retryable
from cadenza.executor.errors import StepTimeout, classify
from cadenza.steps.builtin.http import HttpStep, retry_after
from cadenza.steps.builtin.lib import sqlutil


@pytest.mark.parametrize(("exc", "expected"), [
    (ValueError("v"), "fatal"),
    (TypeError("t"), "fatal"),
    (KeyError("k"), "fatal"),
    (PermissionError("p"), "fatal"),
    (FileNotFoundError("f"), "fatal"),
    (Fatal("x"), "fatal"),
    (Retryable("x"), "retryable"),
    (StepTimeout("x"), "retryable"),
    (ConnectionResetError("x"), "retryable"),
    (RuntimeError("x"), "retryable"),
    (OSError("x"), "retryable"),
    (Deferred(None), "deferred"),
    (ResourceFault("x"), "resource"),
])
def test_python_exceptions(exc: BaseException, expected: str) -> None:
    assert classify(exc) == expected


def _sqlite_error(sql: str) -> BaseException:
    engine = sa.create_engine("sqlite://")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(sql)
    except sa.exc.DBAPIError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError("expected an error")


@pytest.mark.parametrize("sql", ["SELEC 1", "SELECT * FROM no_such_table"])
def test_sql_syntax_and_missing_table_are_fatal(sql: str) -> None:
    assert classify(sqlutil.translate(_sqlite_error(sql), "query")) == "fatal"


def test_a_busy_database_is_retryable(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (v INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
            conn.commit()
        raise AssertionError("expected 'database is locked'")
    except sa.exc.DBAPIError as exc:
        assert classify(sqlutil.translate(exc, "insert")) == "retryable"
    finally:
        engine.dispose()
        holder.execute("ROLLBACK")
        holder.close()


def test_lost_connections_are_retryable() -> None:
    assert classify(sqlutil.translate(ConnectionResetError("reset by peer"), "q")) == "retryable"


def _status(code: int, headers: dict[str, str] | None = None) -> BaseException:
    request = httpx.Request("GET", "http://127.0.0.1/x")
    response = httpx.Response(code, headers=headers, request=request)
    try:
        HttpStep()._check_status(response, b"", ["2xx"])
    except Exception as exc:
        return exc
    raise AssertionError("expected an error")


@pytest.mark.parametrize(("code", "expected"), [
    (502, "retryable"), (503, "retryable"), (504, "retryable"),
    (429, "deferred"),
    (400, "fatal"), (401, "fatal"), (403, "fatal"), (404, "fatal"), (422, "fatal"),
    (407, "resource"),
])
def test_http_statuses(code: int, expected: str) -> None:
    assert classify(_status(code)) == expected


def test_http_429_honours_retry_after() -> None:
    exc = _status(429, {"Retry-After": "2"})
    assert isinstance(exc, Deferred) and exc.until is not None
    now = datetime(2027, 1, 1, tzinfo=UTC)
    assert (retry_after("2", now) - now).total_seconds() == 2
