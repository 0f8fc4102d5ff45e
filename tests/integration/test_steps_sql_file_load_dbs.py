"""file_load on SQLite, PostgreSQL and MariaDB: inferred tables, the three modes, atomic
overwrite, upsert, constants and renames, skip_if_loaded, every format, hostile values."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_ctx import Db, SqlTestContext, database, execute, rows, run_step, scalar

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.file_load import FileLoadStep
from cadenza.steps.builtin.lib.sqlutil import category_of

HOSTILE = "' ; -- $( ) ` {{ }} %s %(x)s \\N \\ \t \" \r\n é 😀 DROP TABLE x"
SALES = 'id,customer,amount,day\n1,ACME,10.5,2026-01-01\n2,"Bob, Inc",,2026-01-02\n'


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
def files(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "files"
    root.mkdir(parents=True)
    return root


@pytest.fixture
def ctx(tmp_path: Path, db: Db, files: Path) -> Iterator[SqlTestContext]:
    c = SqlTestContext(tmp_path, {"w": db.url}, step_type="file_load")
    yield c
    c.close()


def load(ctx: SqlTestContext, path: str, table: str, **fields: Any) -> Any:
    return run_step(FileLoadStep, ctx, path=path, connection="w", table=table, **fields)


def categories(url: str, table: str) -> dict[str, str]:
    engine = sa.create_engine(url)
    try:
        return {c["name"]: category_of(c["type"])
                for c in sa.inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def table_names(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_csv_creates_a_typed_table(ctx: SqlTestContext, db: Db, files: Path) -> None:
    t = db.table()
    (files / "s.csv").write_text(SALES)
    result = load(ctx, "s.csv", t, constants={"period": "2026-01"}, columns={"customer": "client"})
    assert result.rows == 2 and result.output["files"] == ["s.csv"]
    assert categories(db.url, t) == {"id": "int", "client": "text", "amount": "float",
                                     "day": "date", "period": "text"}
    got = rows(db.url, f"SELECT id, client, amount, day, period FROM {t} ORDER BY id")
    day = (lambda v: v) if db.kind == "sqlite" else date.fromisoformat
    assert got == [(1, "ACME", 10.5, day("2026-01-01"), "2026-01"),
                   (2, "Bob, Inc", None, day("2026-01-02"), "2026-01")]


def test_skip_if_loaded_records_in_the_target(ctx: SqlTestContext, db: Db, files: Path) -> None:
    t = db.table()
    (files / "s.csv").write_text(SALES)
    load(ctx, "s.csv", t)
    again = load(ctx, "s.csv", t)
    assert again.rows == 0 and again.output["skipped"][0]["reason"] == "already loaded"
    assert scalar(db.url, f"SELECT count(*) FROM {t}") == 2
    assert rows(db.url, "SELECT path FROM cadenza_loaded_files WHERE table_name = :t",
                t=t) == [("s.csv",)]


def test_overwrite_swaps_atomically(ctx: SqlTestContext, db: Db, files: Path) -> None:
    t = db.table()
    execute(db.url, f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, v VARCHAR(20) DEFAULT 'd', "
                    "w VARCHAR(20) DEFAULT 'keep')", f"INSERT INTO {t} (id, v) VALUES (9, 'old')")
    (files / "big.csv").write_text("id,v\n" + "".join(f"{i},x{i}\n" for i in range(60_000)))
    seen: list[int] = []
    ctx.cancel = lambda: bool(seen.append(scalar(db.url, f"SELECT count(*) FROM {t}")))
    assert load(ctx, "big.csv", t, mode="overwrite").rows == 60_000
    # Readers saw the old table or the whole new one, never an empty or half-loaded one
    # (sampled each time the load checks for a cancel: often on SQLite, every 0.2 s on the
    # servers; a sample may fall after the swap, MariaDB's RENAME TABLE commits by itself).
    assert seen and seen[0] == 1 and set(seen) <= {1, 60_000}
    assert scalar(db.url, f"SELECT count(*) FROM {t} WHERE w = 'keep'") == 60_000
    assert not {f"{t}__new", f"{t}__old"} & table_names(db.url)
    with pytest.raises(sa.exc.IntegrityError):  # the primary key came with the table's shape
        execute(db.url, f"INSERT INTO {t} (id) VALUES (5)")


def test_overwrite_keeps_the_old_table_when_the_load_fails(ctx: SqlTestContext, db: Db,
                                                           files: Path) -> None:
    t = db.table()
    execute(db.url, f"CREATE TABLE {t} (id INTEGER, v VARCHAR(20))",
            f"INSERT INTO {t} VALUES (9, 'old')")
    good = "".join(f"{i},ok\n" for i in range(30_000))
    (files / "bad.csv").write_text("id,v\n" + good + '1,"broken\n' + good)
    with pytest.raises(Fatal, match=r"bad\.csv: line 30002"):
        load(ctx, "bad.csv", t, mode="overwrite")
    assert rows(db.url, f"SELECT * FROM {t}") == [(9, "old")]
    assert f"{t}__new" not in table_names(db.url)


def test_upsert(ctx: SqlTestContext, db: Db, files: Path) -> None:
    t = db.table()
    (files / "a.csv").write_text("id,v\n1,a\n2,b\n")
    (files / "b.csv").write_text("id,v\n2,B\n3,C\n")
    load(ctx, "a.csv", t, mode="upsert", key="id")
    load(ctx, "b.csv", t, mode="upsert", key="id")
    assert rows(db.url, f"SELECT id, v FROM {t} ORDER BY id") == [(1, "a"), (2, "B"), (3, "C")]
    u = db.table()
    execute(db.url, f"CREATE TABLE {u} (id INTEGER, v VARCHAR(20))")
    with pytest.raises(Fatal, match="needs a primary key or unique index"):
        load(ctx, "a.csv", u, mode="upsert", key="id")


def test_text_keys_and_upsert_on_text(ctx: SqlTestContext, db: Db, files: Path) -> None:
    t = db.table()
    (files / "a.csv").write_text("code,v\nA-1,1\nB-2,2\n")
    (files / "b.csv").write_text("code,v\nA-1,10\n")
    load(ctx, "a.csv", t, mode="upsert", key=["code"])
    load(ctx, "b.csv", t, mode="upsert", key=["code"])
    assert rows(db.url, f"SELECT code, v FROM {t} ORDER BY code") == [("A-1", 10), ("B-2", 2)]


def test_hostile_values_verbatim(ctx: SqlTestContext, db: Db, files: Path) -> None:
    t = db.table()
    buf = io.StringIO()
    csv.writer(buf).writerows([["id", "v"], [1, HOSTILE], [2, ""], [3, '"']])
    (files / "h.csv").write_bytes(buf.getvalue().encode())
    load(ctx, "h.csv", t, constants={"c": HOSTILE})
    assert rows(db.url, f"SELECT id, v, c FROM {t} ORDER BY id") == [
        (1, HOSTILE, HOSTILE), (2, None, HOSTILE), (3, '"', HOSTILE)]


def test_typed_formats(ctx: SqlTestContext, db: Db, files: Path) -> None:
    hostile = HOSTILE.replace("\r", "")  # XML turns CR LF into LF: xlsx cannot hold a CR
    book = openpyxl.Workbook()
    for row in (["id", "name", "day", "ok"], [1, "a", datetime(2026, 1, 2), True],
                [2, hostile, None, False]):
        book.active.append(row)
    book.save(files / "x.xlsx")
    pq.write_table(pa.table({
        "id": [3, 4], "amount": pa.array([Decimal("1.25"), None], pa.decimal128(10, 2)),
        "at": pa.array([datetime(2026, 1, 1, 12, tzinfo=UTC), None], pa.timestamp("us", "UTC")),
        "tags": [["a"], []],
    }), files / "p.parquet")
    (files / "j.json").write_text('{"id": 5, "obj": {"k": [1]}, "n": 1.5}\n{"id": 6, "n": 2}\n')
    x, p, j = db.table("x"), db.table("p"), db.table("j")
    assert [load(ctx, f, name).rows for f, name in
            (("x.xlsx", x), ("p.parquet", p), ("j.json", j))] == [2, 2, 2]
    got = rows(db.url, f"SELECT id, name, day, ok FROM {x} ORDER BY id")
    assert [g[1] for g in got] == ["a", hostile]
    assert str(got[0][2]).startswith("2026-01-02") and bool(got[0][3]) is True
    amount, at, tags = rows(db.url, f"SELECT amount, at, tags FROM {p} ORDER BY id")[0]
    assert Decimal(str(amount)) == Decimal("1.25") and tags == '["a"]'
    assert str(at).startswith("2026-01-01 12:00:00")
    assert rows(db.url, f"SELECT id, obj, n FROM {j} ORDER BY id") == [
        (5, '{"k": [1]}', 1.5), (6, None, 2.0)]


def test_symlink_out_of_the_root_loads_nothing(ctx: SqlTestContext, db: Db, files: Path,
                                               tmp_path: Path) -> None:
    t = db.table()
    (tmp_path / "outside.csv").write_text(SALES)
    (files / "in.csv").symlink_to(tmp_path / "outside.csv")
    with pytest.raises(Fatal, match="resolves outside its root"):
        load(ctx, "in.csv", t)
    assert t not in table_names(db.url)


@pytest.mark.postgres
def test_postgres_overwrite_keeps_indexes_and_defaults(tmp_path: Path, pg_url: str,
                                                       files: Path) -> None:
    execute(pg_url, "CREATE TABLE s (id BIGINT GENERATED ALWAYS AS IDENTITY, v TEXT, "
                    "at TIMESTAMPTZ DEFAULT now())", "CREATE INDEX s_v ON s (v)",
            "INSERT INTO s (v) VALUES ('old')")
    (files / "a.csv").write_text("v\nx\ny\n")
    ctx = SqlTestContext(tmp_path, {"w": pg_url})
    try:
        load(ctx, "a.csv", "s", mode="overwrite")
    finally:
        ctx.close()
    assert rows(pg_url, "SELECT id, v FROM s ORDER BY id") == [(1, "x"), (2, "y")]
    assert scalar(pg_url, "SELECT count(*) FROM s WHERE at IS NOT NULL") == 2
    assert scalar(pg_url, "SELECT count(*) FROM pg_indexes WHERE tablename = 's'") == 1


def test_a_later_value_that_does_not_fit(ctx: SqlTestContext, db: Db, files: Path) -> None:
    t = db.table()
    (files / "late.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(200_000)) + "abc\n")
    if db.kind == "sqlite":  # stored as it is (SQLite's type affinity)
        assert load(ctx, "late.csv", t).rows == 200_001
        assert scalar(db.url, f"SELECT count(*) FROM {t} WHERE n = 'abc'") == 1
        return
    with pytest.raises(Fatal, match=r"late\.csv: loading rows after \d+: .*abc"):
        load(ctx, "late.csv", t)
    assert t not in table_names(db.url) or scalar(db.url, f"SELECT count(*) FROM {t}") == 0


@pytest.mark.reliability_case(17)
def test_hostile_column_names_are_quoted_by_each_dialect(ctx: SqlTestContext, db: Db,
                                                         files: Path) -> None:
    """The only SQL names Cadenza makes from data are a file's column headers (and the
    ``columns`` renames): each is quoted by the dialect's own rules (double quotes doubled
    on PostgreSQL and SQLite, backticks doubled on MariaDB, ``%`` doubled for ``%s``
    drivers), so a header carrying quotes, a statement or a placeholder becomes a column
    of exactly that name and runs nothing."""
    victim = db.table()
    execute(db.url, f"CREATE TABLE {victim} (id INTEGER)")
    names = ["id", f'x"; DROP TABLE {victim}; --', "a`b", "it's", "100% (%s)", "[c]"]
    buf = io.StringIO()
    csv.writer(buf).writerows([names, [1, "q", "b", "s", "p", "c"]])
    (files / "n.csv").write_bytes(buf.getvalue().encode())
    t = db.table()
    load(ctx, "n.csv", t, columns={"[c]": "renamed `x` \"y\""})
    engine = sa.create_engine(db.url)
    try:
        with engine.connect() as conn:
            result = conn.exec_driver_sql(f"SELECT * FROM {t}")
            # the names the server reports (SQLAlchemy's MariaDB reflection shows a`b as a``b)
            assert list(result.keys()) == [*names[:-1], 'renamed `x` "y"']
            assert [tuple(r) for r in result] == [(1, "q", "b", "s", "p", "c")]
    finally:
        engine.dispose()
    assert victim in table_names(db.url)
