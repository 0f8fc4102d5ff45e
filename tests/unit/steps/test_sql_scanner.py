"""sql_query's pure parts: the one-statement scanner, binds per paramstyle, JSON values."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.sql_query import SqlQueryStep, _unique, jsonable, parse, to_driver
from cadenza.steps.registry import registry

DIALECTS = ["sqlite", "postgresql", "mysql"]


def binds(sql: str, dialect: str = "postgresql") -> list[str]:
    return [t for k, t in parse(sql, dialect)[0] if k == "bind"]


def test_registered_with_query_as_raw_field() -> None:
    assert registry()["sql_query"] is SqlQueryStep
    assert SqlQueryStep.raw_fields == frozenset({"query"})


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sql", [
    "select 1", "select 1;", "select 1 ;  \n", "select 1; -- done", "select 1; /* x; y */",
    "select ';' as s", "select 'a'';b' as s", "select \"a;b\" from t",
    "select 1 -- ; drop table t", "select 1 /* ; drop table t */",
])
def test_one_statement_accepted(dialect: str, sql: str) -> None:
    parse(sql, dialect)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sql", [
    "select 1; select 2", "select 1;select 2;", "select 1; drop table t", "delete from t;;x",
    "select ';'; drop table t", "select 1 -- c\n; update t set a = 1",
])
@pytest.mark.reliability_case(23)
def test_second_statement_refused(dialect: str, sql: str) -> None:
    with pytest.raises(Fatal, match="expected one SQL statement"):
        parse(sql, dialect)


def test_refusal_names_the_line() -> None:
    with pytest.raises(Fatal, match="starts at line 3 after the ';' of line 2"):
        parse("select 1\nfrom t;\ndrop table t", "sqlite")


@pytest.mark.reliability_case(17)
def test_dialect_quoting_rules() -> None:
    # MySQL: backslash escapes in strings, # comments, backticks
    parse(r"select 'it\'s; fine' from `a;b` # ; x", "mysql")
    with pytest.raises(Fatal, match="another one"):
        parse(r"select 'it\'s'; drop table t", "mysql")
    # PostgreSQL: standard strings keep backslashes; E'' strings escape; $$ quoting; nesting
    with pytest.raises(Fatal, match="another one"):
        parse(r"select 'a\'; drop table t; --'", "postgresql")
    parse(r"select E'a\'; b' as x", "postgresql")
    parse("select $$ ; $$, $tag$ ; $$ ; $tag$ /* a /* nested ; */ ; */", "postgresql")
    # SQLite: [bracketed] identifiers
    parse("select [a;b] from t", "sqlite")


@pytest.mark.parametrize(("sql", "message"), [
    ("select 'open", "quote ' opened here is not closed"),
    ("select 1 /* open", "comment /\\* opened here is not closed"),
    ("select $x$ open", "dollar-quoted string \\$x\\$ is not closed"),
    ("   ;", "the query is empty"), ("-- nothing\n", "the query is empty"),
])
def test_malformed_queries(sql: str, message: str) -> None:
    with pytest.raises(Fatal, match=message):
        parse(sql, "postgresql")


def test_mysql_executable_comments_refused() -> None:
    with pytest.raises(Fatal, match="executable comments"):
        parse("select 1 /*!50000 ; drop table t */", "mysql")


def test_binds_found_outside_quotes_and_comments_only() -> None:
    sql = ("select :a, ':b', \":c\", x::int, :d::date, '12:30', a[1:2], t.x:y -- :e\n"
           "/* :f */ from t where y = :a")
    assert binds(sql) == ["a", "d", "a"]
    assert binds("select $$ :x $$, :y", "postgresql") == ["y"]


def test_string_literals_are_reported() -> None:
    _, literals = parse("select 'a', :b, 'c''d'", "sqlite")
    assert literals == ["'a'", "'c''d'"]


@pytest.mark.parametrize(("style", "sql", "params"), [
    ("named", "select :a, :b, :a, '%'", {"a": 1, "b": "x"}),
    ("pyformat", "select %(a)s, %(b)s, %(a)s, '%%'", {"a": 1, "b": "x"}),
    ("qmark", "select ?, ?, ?, '%'", (1, "x", 1)),
    ("format", "select %s, %s, %s, '%%'", (1, "x", 1)),
    ("numeric", "select :1, :2, :3, '%'", (1, "x", 1)),
])
def test_to_driver_per_paramstyle(style: str, sql: str, params: Any) -> None:
    pieces, _ = parse("select :a, :b, :a, '%'", "postgresql")
    assert to_driver(pieces, style, {"a": 1, "b": "x", "unused": 2})[:2] == (sql, params)


def test_to_driver_objects_as_json_and_missing_param() -> None:
    pieces, _ = parse("select :a", "sqlite")
    assert to_driver(pieces, "named", {"a": {"k": [1, "é"]}})[1] == {"a": '{"k": [1, "é"]}'}
    with pytest.raises(Fatal, match=r"uses :a but params has no 'a' \(params: b\)"):
        to_driver(pieces, "named", {"b": 1, "cz_0": 2})


def test_jsonable_values() -> None:
    u = uuid.uuid4()
    row = [Decimal("12.345678901234567890"), date(2026, 1, 2), time(3, 4),
           datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), timedelta(minutes=1, seconds=30),
           b"\x00\xff", u, float("nan"), 1.5, True, None, {"a": [Decimal("1.0")]}, (1, 2)]
    assert [jsonable(v) for v in row] == [
        "12.345678901234567890", "2026-01-02", "03:04:00", "2026-01-02T03:04:05+00:00", 90.0,
        "AP8=", str(u), "nan", 1.5, True, None, {"a": ["1.0"]}, [1, 2]]


def test_duplicate_column_names_made_unique() -> None:
    assert _unique(["id", "id", "name", "id", "id_2"]) == ["id", "id_2", "name", "id_3", "id_2_2"]
