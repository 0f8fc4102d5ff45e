"""sql_copy across real databases: PostgreSQL → PostgreSQL, PostgreSQL → MariaDB,
MariaDB → SQLite and SQLite → PostgreSQL on a table with every common type (the target
equals the source, row by row), a JD Edwards table coerced as docs/sql_copy.md says, and
the modes (append, upsert, create = false)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
sys.path.insert(0, str(Path(__file__).parent))
from sql_copy_dbs import endpoint, pg_url2  # noqa: F401 (a fixture)
from sql_ctx import Db, SqlTestContext, execute, rows, run_step, scalar

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.sql_copy import SqlCopyStep

N = 2_000  # generated rows besides the hand-written ones (batch_size 300: 7 batches)
NUL_TEXT = "nul\x00inside"
UNICODE = "héllo ✓ 漢字 🎉 ω"

#: the source table of every common type, per dialect
SHAPES = {
    "postgresql": "CREATE TABLE {t} (id BIGINT PRIMARY KEY, i INTEGER, n NUMERIC(18,4), "
                  "t TEXT, d DATE, ts TIMESTAMP(6), tz TIMESTAMPTZ, b BOOLEAN)",
    "mariadb": "CREATE TABLE {t} (id BIGINT PRIMARY KEY, i INT, n DECIMAL(18,4), t LONGTEXT, "
               "d DATE, ts DATETIME(6), tz TIMESTAMP(6) NULL, b BOOLEAN) "
               "DEFAULT CHARSET=utf8mb4",
    # NUMERIC affinity would keep 18 digits as a float: decimals are text in SQLite, in a
    # column declared as sql_copy declares them there (docs/sql_copy.md)
    "sqlite": "CREATE TABLE {t} (id INTEGER PRIMARY KEY, i INTEGER, n DECIMAL_TEXT(18,4), "
              "t TEXT, d DATE, ts TIMESTAMP, tz TIMESTAMPTZ, b BOOLEAN)",
}


def source_rows(kind: str) -> list[tuple[Any, ...]]:
    """The rows of the typed table: extremes, unicode, NUL (where the source can hold it:
    PostgreSQL text cannot), a row of NULLs, then N ordinary rows."""
    nul = kind != "postgresql"
    out: list[tuple[Any, ...]] = [
        (1, -2_147_483_648, Decimal("-99999999999999.9999"), UNICODE, date(1970, 1, 2),
         datetime(2026, 3, 29, 1, 30, 0, 123456), datetime(2026, 3, 29, 1, 30, 5, 1, UTC), True),
        (2, 2_147_483_647, Decimal("12345678901234.5678"), NUL_TEXT if nul else "tab\there",
         date(2099, 12, 31), datetime(1999, 12, 31, 23, 59, 59, 999999),
         datetime(2037, 12, 31, 23, 0, 0, tzinfo=UTC), False),
        (3, 0, Decimal("0.0001"), "", date(2000, 2, 29), datetime(2000, 1, 1),
         datetime(1990, 6, 15, 12, 0, tzinfo=UTC), True),
        (4, None, None, None, None, None, None, None),
        (5, 7, Decimal("-0.5000"), "line\nbreak \\ back 'quote' \"dq\"", date(2024, 1, 1),
         datetime(2024, 1, 1, 0, 0, 1), datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC), None),
    ]
    for k in range(N):
        out.append((100 + k, k * 37 - 5_000, Decimal(k) / 16, f"row {k} ✓", date(2020, 1, 1),
                    datetime(2021, 5, 5, 5, 5, k % 60), datetime(2022, 1, 1, tzinfo=UTC),
                    k % 2 == 0))
    return out


def fill(kind: str, url: str, table: str) -> list[tuple[Any, ...]]:
    data = source_rows(kind)
    execute(url, SHAPES[kind].format(t=table))
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            if kind == "mariadb":
                conn.exec_driver_sql("SET time_zone = '+00:00'")
            values = []
            for r in data:
                row = list(r)
                if kind == "sqlite":  # SQLite keeps dates and decimals as text
                    row = [v if v is None or isinstance(v, int | str) else
                           (v.isoformat(sep=" ") if isinstance(v, datetime) else str(v))
                           for v in row]
                elif kind == "mariadb" and row[6] is not None:
                    row[6] = row[6].replace(tzinfo=None)  # UTC, as the session says
                values.append(dict(zip("id i n t d ts tz b".split(), row, strict=True)))
            conn.execute(sa.text(f"INSERT INTO {table} VALUES (:id, :i, :n, :t, :d, :ts, :tz, "
                                 ":b)"), values)
    finally:
        engine.dispose()
    return data


def read_back(kind: str, url: str, table: str) -> list[tuple[Any, ...]]:
    """The target's rows by id, each value in one Python form per column."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            if kind == "mariadb":
                conn.exec_driver_sql("SET time_zone = '+00:00'")
            got = conn.exec_driver_sql(f"SELECT id, i, n, t, d, ts, tz, b FROM {table} "
                                       "ORDER BY id").all()
    finally:
        engine.dispose()
    return [normal(tuple(r)) for r in got]


def normal(row: tuple[Any, ...]) -> tuple[Any, ...]:
    id_, i, n, t, d, ts, tz, b = row
    if isinstance(d, str):
        d = date.fromisoformat(d)
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    if isinstance(tz, str):
        tz = datetime.fromisoformat(tz)
    if isinstance(tz, datetime) and tz.tzinfo is None:
        tz = tz.replace(tzinfo=UTC)  # MariaDB: the UTC wall time
    return (int(id_), None if i is None else int(i), None if n is None else Decimal(str(n)),
            t, d, ts, tz, None if b is None else bool(b))


PAIRS = [
    pytest.param(("postgresql", "postgresql"), marks=pytest.mark.postgres, id="pg-pg"),
    pytest.param(("postgresql", "mariadb"), marks=[pytest.mark.postgres, pytest.mark.mariadb],
                 id="pg-mariadb"),
    pytest.param(("mariadb", "sqlite"), marks=pytest.mark.mariadb, id="mariadb-sqlite"),
    pytest.param(("sqlite", "postgresql"), marks=pytest.mark.postgres, id="sqlite-pg"),
]


@pytest.fixture(params=PAIRS)
def ends(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Db, Db]]:
    src_kind, dst_kind = request.param
    src = endpoint(request, src_kind, tmp_path, "src")
    dst = endpoint(request, dst_kind, tmp_path, "dst")
    yield next(src), next(dst)
    next(dst, None)
    next(src, None)


def ctx_for(tmp_path: Path, src: Db, dst: Db) -> SqlTestContext:
    return SqlTestContext(tmp_path, {"src": src.url, "dst": dst.url}, step_type="sql_copy")


def copy(ctx: SqlTestContext, **fields: Any) -> Any:
    return run_step(SqlCopyStep, ctx, **fields)


def expected(data: list[tuple[Any, ...]], dst_kind: str) -> list[tuple[Any, ...]]:
    """What the target holds: the source, except that PostgreSQL text has no NUL."""
    out = [normal(r) for r in data]
    if dst_kind == "postgresql":
        out = [(*r[:3], r[3].replace("\x00", "") if r[3] else r[3], *r[4:]) for r in out]
    return out


@pytest.mark.reliability_case(25)
def test_every_common_type_arrives_equal(ends: tuple[Db, Db], tmp_path: Path) -> None:
    src, dst = ends
    s, t = src.table("cp"), dst.table("cp")
    data = fill(src.kind, src.url, s)
    ctx = ctx_for(tmp_path, src, dst)
    try:
        result = copy(ctx, source={"connection": "src", "table": s},
                      target={"connection": "dst", "table": t}, batch_size=300)
    finally:
        ctx.close()
    total = len(data)
    assert result.output["source_rows"] == result.output["target_rows"] == total
    assert result.output["batches"] == -(-total // 300)
    assert read_back(dst.kind, dst.url, t) == expected(data, dst.kind)
    batch_lines = [x for x in ctx.log_record.text("INFO").splitlines() if x.startswith("batch ")]
    assert len(batch_lines) == result.output["batches"]
    assert "swapped" in ctx.log_record.text("INFO")


def test_a_query_source_with_a_bound_parameter(ends: tuple[Db, Db], tmp_path: Path) -> None:
    src, dst = ends
    s, t = src.table("cq"), dst.table("cq")
    data = fill(src.kind, src.url, s)
    ctx = SqlTestContext(tmp_path, {"src": src.url, "dst": dst.url}, step_type="sql_copy",
                         params={"low": 100})
    try:
        result = copy(ctx, source={"connection": "src",
                                   "query": f"SELECT * FROM {s} WHERE id >= ${{params.low}} "
                                            "ORDER BY id"},
                      target={"connection": "dst", "table": t}, mode="append", batch_size=500)
    finally:
        ctx.close()
    assert result.output["source_rows"] == N
    assert read_back(dst.kind, dst.url, t) == expected(data, dst.kind)[5:]


@pytest.fixture
def lite_pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Db, Db]]:
    src = endpoint(request, "sqlite", tmp_path, "src")
    dst = endpoint(request, "postgresql", tmp_path, "dst")
    yield next(src), next(dst)


JDE = ("CREATE TABLE {t} (SDDOCO NUMERIC(8,0), SDLNID NUMERIC(6,3), SDTRDJ NUMERIC(6,0), "
       "SDUPMJ NUMERIC(6,0), SDUORG NUMERIC(15,0), SDUPRC NUMERIC(15,4), SDDSC1 NCHAR(30), "
       "SDMCU NCHAR(12))")
JDE_ROWS = [
    (1001, "1.000", 126032, 126335, 40, "12.5000", "WIDGET" + " " * 24, "         M30"),
    (1002, "2.500", 99365, 0, 7, "-3.9999", "BOLT\x00 M8" + " " * 21, "         M30"),
    (1003, "10.000", 100060, 124366, 0, "0.0000", "", "           1"),
]


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["truncate", "preserve"])
def test_a_jde_table_is_coerced(lite_pg: tuple[Db, Db], tmp_path: Path, mode: str) -> None:
    src, dst = lite_pg
    s, t = src.table("F4211"), dst.table("f4211")
    execute(src.url, JDE.format(t=s), *[
        f"INSERT INTO {s} VALUES ({a}, {b}, {c}, {d}, {e}, {f}, '{g}', '{h}')".replace(
            "\x00", "' || char(0) || '") for a, b, c, d, e, f, g, h in JDE_ROWS])
    ctx = ctx_for(tmp_path, src, dst)
    try:
        result = copy(ctx, source={"connection": "src", "table": s},
                      target={"connection": "dst", "table": t}, type_coercion="jde",
                      decimal_mode=mode, trim_strings=True)
    finally:
        ctx.close()
    assert result.output["target_rows"] == 3
    types = dict(rows(dst.url, "SELECT column_name, data_type FROM information_schema.columns "
                               "WHERE table_name = :t", t=t))
    scaled = "bigint" if mode == "truncate" else "numeric"
    assert types == {"sddoco": "bigint", "sdlnid": scaled, "sdtrdj": "date", "sdupmj": "date",
                     "sduorg": "bigint", "sduprc": scaled, "sddsc1": "character varying",
                     "sdmcu": "character varying"}
    got = rows(dst.url, f"SELECT * FROM {t} ORDER BY sddoco")
    if mode == "truncate":
        lnid, uprc = [1, 2, 10], [12, -3, 0]  # the fraction dropped toward zero
    else:
        lnid = [Decimal("1.000"), Decimal("2.500"), Decimal("10.000")]
        uprc = [Decimal("12.5000"), Decimal("-3.9999"), Decimal("0.0000")]
    assert got == [
        (1001, lnid[0], date(2026, 2, 1), date(2026, 12, 1), 40, uprc[0], "WIDGET",
         "         M30"),
        (1002, lnid[1], date(1999, 12, 31), None, 7, uprc[1], "BOLT M8", "         M30"),
        (1003, lnid[2], date(2000, 2, 29), date(2024, 12, 31), 0, uprc[2], "", "           1"),
    ]


@pytest.mark.postgres
def test_a_bad_julian_date_names_its_column(lite_pg: tuple[Db, Db], tmp_path: Path) -> None:
    src, dst = lite_pg
    s, t = src.table("F0911"), dst.table("f0911")
    execute(src.url, f"CREATE TABLE {s} (GLDOC NUMERIC(8,0), GLDGJ NUMERIC(6,0))",
            f"INSERT INTO {s} VALUES (1, 126032), (2, 125400)")
    ctx = ctx_for(tmp_path, src, dst)
    try:
        with pytest.raises(Fatal, match=r"column 'GLDGJ': 125400 is not a JDE Julian date.*"
                                        r"day 400 of 2025"):
            copy(ctx, source={"connection": "src", "table": s},
                 target={"connection": "dst", "table": t}, type_coercion="jde")
    finally:
        ctx.close()
    assert scalar(dst.url, "SELECT count(*) FROM information_schema.tables WHERE "
                           "table_name = :t", t=t) == 0


@pytest.mark.postgres
def test_upsert_and_create_false(lite_pg: tuple[Db, Db], tmp_path: Path) -> None:
    src, dst = lite_pg
    s, t = src.table("up"), dst.table("up")
    execute(src.url, f"CREATE TABLE {s} (k INTEGER PRIMARY KEY, v TEXT)",
            f"INSERT INTO {s} VALUES (1, 'one'), (2, 'two')")
    execute(dst.url, f"CREATE TABLE {t} (k BIGINT PRIMARY KEY, v TEXT)",
            f"INSERT INTO {t} VALUES (2, 'old'), (3, 'three')")
    ctx = ctx_for(tmp_path, src, dst)
    try:
        copy(ctx, source={"connection": "src", "table": s},
             target={"connection": "dst", "table": t}, mode="upsert", key="k")
        with pytest.raises(Fatal, match=r"target table 'missing_t' does not exist "
                                        r"\(create = false\)"):
            copy(ctx, source={"connection": "src", "table": s},
                 target={"connection": "dst", "table": "missing_t"}, mode="append",
                 create=False)
    finally:
        ctx.close()
    assert rows(dst.url, f"SELECT * FROM {t} ORDER BY k") == [(1, "one"), (2, "two"),
                                                               (3, "three")]


@pytest.fixture
def pg_pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Db, Db]]:
    src = endpoint(request, "postgresql", tmp_path, "src")
    dst = endpoint(request, "postgresql", tmp_path, "dst")
    yield next(src), next(dst)


@pytest.mark.postgres
@pytest.mark.reliability_case(25)
def test_a_refused_value_fails_the_copy_with_the_database_message(
        pg_pg: tuple[Db, Db], tmp_path: Path) -> None:
    """PostgreSQL → PostgreSQL passes rows as COPY text (the target parses them): a value
    the target's column refuses, in the third batch, fails the step; nothing stays (one
    transaction) and the writer thread is gone."""
    src, dst = pg_pg
    s, t = src.table("bad"), dst.table("bad")
    execute(src.url, f"CREATE TABLE {s} (id BIGINT, v TEXT)",
            f"INSERT INTO {s} SELECT g, g::text FROM generate_series(1, 5000) g",
            f"UPDATE {s} SET v = 'twelve' WHERE id = 2500")
    execute(dst.url, f"CREATE TABLE {t} (id BIGINT, v INTEGER)")
    ctx = ctx_for(tmp_path, src, dst)
    try:
        with pytest.raises(Fatal, match='invalid input syntax for type integer: "twelve"'):
            copy(ctx, source={"connection": "src", "table": s},
                 target={"connection": "dst", "table": t}, mode="append", batch_size=1_000)
    finally:
        ctx.close()
    assert scalar(dst.url, f"SELECT count(*) FROM {t}") == 0
    assert not [th for th in threading.enumerate() if th.name == "cadenza-copy-writer"]


BLOBS = {
    "postgresql": "CREATE TABLE {t} (id BIGINT PRIMARY KEY, b BYTEA)",
    "mariadb": "CREATE TABLE {t} (id BIGINT PRIMARY KEY, b LONGBLOB)",
    "sqlite": "CREATE TABLE {t} (id INTEGER PRIMARY KEY, b BLOB)",
}
BLOB_ROWS: list[tuple[int, bytes | None]] = [
    (1, bytes(range(256))), (2, b""), (3, None), (4, b"\x00"), (5, "😀 é".encode()),
    (6, b"\\x00\\N\t\n\r,\"'"), (7, bytes(range(256)) * 4096),  # 1 MiB
]


@pytest.mark.reliability_case(25)
def test_blob_columns_arrive_byte_for_byte(ends: tuple[Db, Db], tmp_path: Path) -> None:
    """BLOB columns (PostgreSQL bytea, MariaDB LONGBLOB, SQLite BLOB) copy byte for byte:
    every byte value, an empty value apart from NULL, bytes that look like COPY escapes,
    and a 1 MiB value; a created target gets the dialect's binary type."""
    src, dst = ends
    s, t = src.table("blob"), dst.table("blob")
    execute(src.url, BLOBS[src.kind].format(t=s))
    engine = sa.create_engine(src.url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"INSERT INTO {s} VALUES (:id, :b)"),
                         [{"id": i, "b": b} for i, b in BLOB_ROWS])
    finally:
        engine.dispose()
    ctx = ctx_for(tmp_path, src, dst)
    try:
        copy(ctx, source={"connection": "src", "table": s},
             target={"connection": "dst", "table": t}, batch_size=3)
    finally:
        ctx.close()
    got = [(int(i), None if b is None else bytes(b))
           for i, b in rows(dst.url, f"SELECT id, b FROM {t} ORDER BY id")]
    assert got == BLOB_ROWS


@pytest.mark.postgres
@pytest.mark.mariadb
@pytest.mark.reliability_case(25)
def test_four_byte_utf8_into_a_utf8mb3_column_fails_naming_the_column(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A target column in MariaDB's utf8mb3 (3 bytes a character at most) cannot hold an
    emoji: the copy fails for good with the server's message naming the column, the rows of
    the batch, with a hint to convert the table to utf8mb4, and keeps nothing (the batches
    before it are rolled back with it). A table that sql_copy creates is utf8mb4, so only
    an existing utf8mb3 table meets this."""
    src = next(endpoint(request, "postgresql", tmp_path, "src"))
    made = endpoint(request, "mariadb", tmp_path, "dst")
    dst = next(made)
    s, t = src.table("mb3"), dst.table("mb3")
    execute(src.url, f"CREATE TABLE {s} (id BIGINT, v TEXT)",
            f"INSERT INTO {s} SELECT g, 'row ' || g FROM generate_series(1, 2500) g",
            f"UPDATE {s} SET v = 'party 🎉' WHERE id = 2100")
    execute(dst.url, f"CREATE TABLE {t} (id BIGINT, v VARCHAR(50)) CHARACTER SET utf8mb3")
    ctx = ctx_for(tmp_path, src, dst)
    try:
        with pytest.raises(Fatal) as failed:
            copy(ctx, source={"connection": "src", "table": f"{s}"},
                 target={"connection": "dst", "table": t}, mode="append", batch_size=1_000)
    finally:
        ctx.close()
    message = str(failed.value)
    assert message.startswith(f"writing rows 2001..2500 into {t}: "), message
    assert f"`{t}`.`v`" in message and "Incorrect string value" in message, message
    assert "does not fit a utf8mb3 column" in message and "utf8mb4" in message, message
    assert scalar(dst.url, f"SELECT count(*) FROM {t}") == 0
    next(made, None)


MILLION = 1_000_000


@pytest.mark.postgres
@pytest.mark.reliability_case(25)
@pytest.mark.parametrize("dst_kind", ["postgresql", "sqlite"])
def test_a_million_rows_copy_in_bounded_memory(request: pytest.FixtureRequest, tmp_path: Path,
                                               dst_kind: str) -> None:
    """A million rows (a query that generates them on PostgreSQL: over 300 MB as Python
    rows) copy into PostgreSQL (COPY in, COPY out) and into SQLite (batched INSERTs) while
    the process's resident memory, sampled every 20 ms, grows by less than 80 MB: the rows
    stream batch by batch (a server-side cursor, one batch in flight), never all at once."""
    import psutil

    src = next(endpoint(request, "postgresql", tmp_path, "src"))
    dst = next(endpoint(request, dst_kind, tmp_path, "dst"))
    t = dst.table("big")
    sql = ("SELECT g AS id, md5(g::text) || ' ✓' AS v, (g / 7.0)::numeric(18,4) AS n "
           f"FROM generate_series(1, {MILLION}) g")
    process, peak, done = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], process.memory_info().rss)

    ctx = ctx_for(tmp_path, src, dst)
    baseline = process.memory_info().rss
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = copy(ctx, source={"connection": "src", "query": sql},
                      target={"connection": "dst", "table": t}, batch_size=10_000)
    finally:
        done.set()
        sampler.join()
        ctx.close()
    assert result.output["target_rows"] == MILLION
    assert scalar(dst.url, f"SELECT count(*) FROM {t}") == MILLION
    grown = (peak[0] - baseline) / 2**20
    assert grown < 80, f"resident memory grew by {grown:.0f} MB during the copy"
