"""file_export on PostgreSQL and MariaDB: many rows of every common type to each format,
read back (pyarrow, openpyxl, csv, json) and compared with the query row by row; a
server-side cursor keeps memory bounded; a query error names the export."""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_ctx import Db, SqlTestContext, database, execute, run_step

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.file_export import FileExportStep

MILLION = 1_000_000 if os.environ.get("CADENZA_BIG_TESTS") == "1" else 100_000
"""Rows of the big export: the issue's 1,000,000 with ``CADENZA_BIG_TESTS=1`` (about 25 min
for xlsx on the 2-core machine, docs/file_export.md), 100,000 in ``make test`` (the same
code paths: chunks, row groups, the server-side cursor)."""
PG_BIG = """CREATE TABLE {table} AS SELECT i AS id, (i * 1.2345)::numeric(18,4) AS amount,
  'name ' || i || ' é😀' AS name, DATE '2026-01-01' + mod(i, 365) AS day,
  TIMESTAMPTZ '2026-01-01 00:00:00+00' + i * interval '1 second' AS at,
  (mod(i, 2) = 0) AS flag, CASE WHEN mod(i, 10) = 0 THEN NULL ELSE i END AS maybe
  FROM generate_series(1, {million}) AS i"""
QUERY = "SELECT * FROM {table} ORDER BY id"


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres),
                        pytest.param("mariadb", marks=pytest.mark.mariadb)])
def db(request: pytest.FixtureRequest) -> Iterator[Db]:
    url = str(request.getfixturevalue("pg_url" if request.param == "postgresql"
                                      else "mariadb_url"))
    yield from database(request.param, url)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "files"
    root.mkdir(parents=True)
    return root


def context(tmp_path: Path, url: str) -> SqlTestContext:
    return SqlTestContext(tmp_path, {"w": url}, step_type="file_export", timeout=3600,
                          params={"from": 3})


def query_rows(url: str, query: str) -> Iterator[tuple[Any, ...]]:
    """The query's rows, streamed (the reference the file is compared with)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            result = conn.execution_options(stream_results=True).exec_driver_sql(query)
            while chunk := result.fetchmany(10_000):
                yield from (tuple(r) for r in chunk)
    finally:
        engine.dispose()


def as_csv(v: Any) -> str:
    """What the csv should hold for a value (written out here, not taken from the writer)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, date):
        return v.isoformat()
    return str(v)


def as_xlsx(v: Any) -> Any:
    """What openpyxl reads back: numbers, dates as date-times, aware ones in UTC."""
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, datetime):
        return v.astimezone(UTC).replace(tzinfo=None) if v.tzinfo else v
    if isinstance(v, date):
        return datetime(v.year, v.month, v.day)
    return v


def as_json(v: Any) -> Any:
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, date):
        return v.isoformat()
    return v


def file_rows(fmt: str, path: Path, width: int) -> Iterator[tuple[Any, ...]]:
    """The rows of an exported file, in the form the comparison expects."""
    if fmt == "csv":
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            next(reader)
            yield from (tuple(r) for r in reader)
    elif fmt == "xlsx":
        book = openpyxl.load_workbook(path, read_only=True)
        try:
            for row in book.active.iter_rows(min_row=2, values_only=True):
                yield tuple(row) + (None,) * (width - len(row))
        finally:
            book.close()
    elif fmt == "parquet":
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            yield from (tuple(r.values()) for r in batch.to_pylist())
    else:
        with path.open(encoding="utf-8") as fh:
            yield from (tuple(json.loads(line).values()) for line in fh)


EXPECT = {"csv": as_csv, "xlsx": as_xlsx, "parquet": lambda v: v, "jsonl": as_json}


def make_big(db: Db, table: str) -> None:
    if db.kind == "postgresql":
        execute(db.url, PG_BIG.format(table=table, million=MILLION))
        return
    execute(db.url, "SET SESSION max_recursive_iterations = 2000000",
            f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, amount DECIMAL(18,4), "
            "name TEXT CHARACTER SET utf8mb4, day DATE, at DATETIME(6), flag BOOLEAN, "
            "maybe BIGINT) DEFAULT CHARSET=utf8mb4",
            f"INSERT INTO {table} WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
            f"WHERE i < {MILLION}) SELECT i, i * 1.2345, CONCAT('name ', i, ' é😀'), "
            "DATE '2026-01-01' + INTERVAL MOD(i, 365) DAY, "
            "TIMESTAMP '2026-01-01 00:00:00' + INTERVAL i SECOND, MOD(i, 2) = 0, "
            "IF(MOD(i, 10) = 0, NULL, i) FROM s")


@pytest.mark.slow
@pytest.mark.timeout(3600)  # xlsx: openpyxl writes, then reads back, a million rows
@pytest.mark.parametrize("fmt", ["csv", "xlsx", "parquet", "jsonl"])
def test_a_big_export_reads_back_equal_to_the_query(tmp_path: Path, db: Db, files: Path,
                                                     fmt: str) -> None:
    if db.kind == "mariadb" and fmt == "xlsx":
        pytest.skip("the big xlsx export runs once, on PostgreSQL (minutes under load)")
    table = db.table("exbig")
    make_big(db, table)
    query = QUERY.format(table=table)
    ctx = context(tmp_path, db.url)
    try:
        out = run_step(FileExportStep, ctx, connection="w", query=query, path=f"big.{fmt}")
    finally:
        ctx.close()
    assert out.rows == MILLION
    assert out.output["columns"] == ["id", "amount", "name", "day", "at", "flag", "maybe"]
    expect = EXPECT[fmt]
    count = 0
    for got, want in zip(file_rows(fmt, files / f"big.{fmt}", 7), query_rows(db.url, query),
                         strict=True):
        assert got == tuple(expect(v) for v in want), f"row {count + 1}"
        count += 1
    assert count == MILLION


@pytest.mark.parametrize("fmt", ["csv", "xlsx", "parquet", "jsonl"])
def test_types_and_binds(tmp_path: Path, db: Db, files: Path, fmt: str) -> None:
    table = db.table("ex")
    if db.kind == "postgresql":
        execute(db.url, f"CREATE TABLE {table} (id int, amount numeric(18,4), t text, "
                        "at timestamptz, naive timestamp, ok boolean, raw bytea)",
                f"INSERT INTO {table} VALUES (1, -12.5, 'x=1', '2026-03-01 10:00:00+02', "
                "'2026-03-01 10:00:00', true, '\\x00ff'), (2, NULL, NULL, NULL, NULL, NULL, "
                "NULL), (3, 3.1416, '=1+1', '2026-03-02 00:00:00+00', '2026-03-02', false, "
                "'\\x41')")
    else:
        execute(db.url, f"CREATE TABLE {table} (id int, amount decimal(18,4), t text, "
                        "at datetime(6), naive datetime(6), ok boolean, raw blob) "
                        "DEFAULT CHARSET=utf8mb4",
                f"INSERT INTO {table} VALUES (1, -12.5, 'x=1', '2026-03-01 08:00:00', "
                "'2026-03-01 10:00:00', true, x'00ff'), (2, NULL, NULL, NULL, NULL, NULL, "
                "NULL), (3, 3.1416, '=1+1', '2026-03-02 00:00:00', '2026-03-02', false, x'41')")
    ctx = context(tmp_path, db.url)
    try:
        out = run_step(FileExportStep, ctx, connection="w", path=f"t.{fmt}",
                       query=f"SELECT * FROM {table} WHERE id <> ${{params.from}} ORDER BY id")
    finally:
        ctx.close()
    assert out.rows == 2
    path = files / f"t.{fmt}"
    got = list(file_rows(fmt, path, 7))
    aware = db.kind == "postgresql"
    at = datetime(2026, 3, 1, 8, tzinfo=UTC) if aware else datetime(2026, 3, 1, 8)
    if fmt == "parquet":
        assert got == [(1, Decimal("-12.5000"), "x=1", at, datetime(2026, 3, 1, 10),
                        True, b"\x00\xff"), (2, None, None, None, None, None, None)]
    elif fmt == "xlsx":
        assert got == [(1, -12.5, "x=1", datetime(2026, 3, 1, 8), datetime(2026, 3, 1, 10),
                        True, "00ff"), (2, None, None, None, None, None, None)]
    elif fmt == "csv":
        flag = "true" if aware else "1"  # MariaDB's BOOLEAN is TINYINT(1)
        assert datetime.fromisoformat(str(got[0][3])) == at  # in the session's time zone
        assert got == [("1", "-12.5000", "x=1", got[0][3], "2026-03-01 10:00:00", flag,
                        "00ff"), ("2", "", "", "", "", "", "")]
    else:
        flag_json: Any = True if aware else 1
        assert datetime.fromisoformat(str(got[0][3])) == at
        assert got == [(1, "-12.5000", "x=1", got[0][3], "2026-03-01T10:00:00", flag_json,
                        "AP8="), (2, None, None, None, None, None, None)]


def test_a_missing_table_is_a_fatal_error_naming_the_export(tmp_path: Path, db: Db,
                                                           files: Path) -> None:
    ctx = context(tmp_path, db.url)
    try:
        with pytest.raises(Fatal, match=r"file_export to gone\.csv: .*no_such_table_x"):
            run_step(FileExportStep, ctx, connection="w", path="gone.csv",
                     query="SELECT * FROM no_such_table_x")
    finally:
        ctx.close()
    assert list(files.iterdir()) == []


@pytest.mark.parametrize("fmt", ["csv", "xlsx", "parquet", "jsonl"])
def test_an_error_after_the_first_chunks_leaves_no_file(tmp_path: Path, db: Db, files: Path,
                                                        fmt: str) -> None:
    if db.kind == "postgresql":  # the server-side cursor computes rows as they are fetched
        query = "SELECT i, 1 / (i - 25000) AS boom FROM generate_series(1, 30000) AS i"
        match = "division by zero"
    else:
        query = ("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE "
                 "i < 30000) SELECT i, IF(i > 25000, CAST('x' AS JSON), i) AS boom FROM s")
        match = "file_export to"
    (files / f"keep.{fmt}").write_bytes(b"the old export")
    ctx = context(tmp_path, db.url)
    try:
        with pytest.raises(Fatal, match=match):
            run_step(FileExportStep, ctx, connection="w", path=f"keep.{fmt}", query=query,
                     overwrite=True)
    finally:
        ctx.close()
    assert [p.name for p in files.iterdir()] == [f"keep.{fmt}"]
    assert (files / f"keep.{fmt}").read_bytes() == b"the old export"
