"""file_load on SQLite: formats, modes, skip_if_loaded, on_missing, refusals, failures."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from sql_ctx import SqlTestContext, execute, rows, run_step, scalar

from cadenza.clock import FakeClock
from cadenza.domain.errors import Deferred, Fatal, Retryable
from cadenza.steps.builtin.file_load import FileLoadStep
from cadenza.steps.registry import registry

HOSTILE = "' ; -- $( ) ` {{ }} %s :x ? \\ \" é 😀"
SALES = 'id,customer,amount,day\n1,ACME,10.5,2026-01-01\n2,"Bob, Inc",,2026-01-02\n'


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "files"
    (root / "sales").mkdir(parents=True)
    return root


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{(tmp_path / 'data' / 'w.db').as_posix()}"


@pytest.fixture
def ctx(tmp_path: Path, url: str, files: Path) -> Iterator[SqlTestContext]:
    c = SqlTestContext(tmp_path, {"w": url}, step_type="file_load")
    yield c
    c.close()


def load(ctx: SqlTestContext, path: str, table: str = "sales", **fields: Any) -> Any:
    return run_step(FileLoadStep, ctx, path=path, connection="w", table=table, **fields)


def tables(url: str) -> list[str]:
    return [r[0] for r in rows(url, "SELECT name FROM sqlite_master WHERE type = 'table' "
                                    "ORDER BY name")]


def test_registered() -> None:
    assert registry()["file_load"] is FileLoadStep


def test_csv_creates_the_table_with_inferred_types(ctx: SqlTestContext, files: Path,
                                                   url: str) -> None:
    (files / "sales" / "2026-01.csv").write_text(SALES)
    result = load(ctx, "sales/2026-01.csv")
    assert result.rows == 2
    assert result.output["files"] == ["sales/2026-01.csv"]
    assert len(result.output["checksums"][0]) == 64 and result.output["skipped"] == []
    sql = scalar(url, "SELECT sql FROM sqlite_master WHERE name = 'sales'")
    assert sql == ('CREATE TABLE "sales" ("id" INTEGER, "customer" TEXT, "amount" REAL, '
                   '"day" DATE)')
    assert rows(url, "SELECT id, customer, amount, day, typeof(id) FROM sales ORDER BY id") == [
        (1, "ACME", 10.5, "2026-01-01", "integer"), (2, "Bob, Inc", None, "2026-01-02", "integer")]
    assert "sales/2026-01.csv: 2 rows into sales" in ctx.log_record.text("INFO")
    assert "INSERT INTO" in ctx.log_record.text("DEBUG")


def test_constants_and_renames(ctx: SqlTestContext, files: Path, url: str) -> None:
    (files / "s.csv").write_text(SALES)
    load(ctx, "s.csv", constants={"period": "2026-01", "batch": 7},
         columns={"customer": "client", "amount": "total"})
    assert rows(url, "SELECT client, total, period, batch FROM sales ORDER BY id") == [
        ("ACME", 10.5, "2026-01", 7), ("Bob, Inc", None, "2026-01", 7)]


@pytest.mark.parametrize(("fields", "message"), [
    ({"columns": {"nope": "x"}}, "columns: 'nope' is not a column of the file"),
    ({"constants": {"ID": 1}}, "a constant named 'ID' appears twice"),
    ({"columns": {"amount": "Customer"}}, "'amount'|'Customer'"),
])
def test_bad_column_mappings(ctx: SqlTestContext, files: Path, url: str,
                             fields: dict[str, Any], message: str) -> None:
    (files / "s.csv").write_text(SALES)
    with pytest.raises(Fatal, match=message):
        load(ctx, "s.csv", **fields)
    assert "sales" not in tables(url)


def test_existing_table_columns_matched_without_case(ctx: SqlTestContext, files: Path,
                                                     url: str) -> None:
    execute(url, "CREATE TABLE sales (ID INTEGER, Customer TEXT, Amount NUMERIC, Day TEXT, "
                 "extra TEXT DEFAULT 'd')")
    (files / "s.csv").write_text(SALES)
    load(ctx, "s.csv")
    assert rows(url, "SELECT ID, Customer, extra FROM sales ORDER BY ID") == [
        (1, "ACME", "d"), (2, "Bob, Inc", "d")]
    (files / "t.csv").write_text("id,unknown\n1,x\n")
    with pytest.raises(Fatal, match="column 'unknown' is not in table sales"):
        load(ctx, "t.csv")


def test_append_skips_a_file_already_loaded(ctx: SqlTestContext, files: Path, url: str) -> None:
    (files / "s.csv").write_text(SALES)
    load(ctx, "s.csv")
    again = load(ctx, "s.csv")
    assert again.rows == 0 and again.output["files"] == []
    assert again.output["skipped"][0]["reason"] == "already loaded"
    assert "skipped (already loaded)" in ctx.log_record.text("INFO")
    assert scalar(url, "SELECT count(*) FROM sales") == 2
    assert rows(url, "SELECT table_name, path FROM cadenza_loaded_files") == [("sales", "s.csv")]
    load(ctx, "s.csv", skip_if_loaded=False)
    assert scalar(url, "SELECT count(*) FROM sales") == 4


def test_glob_loads_each_distinct_file_once(ctx: SqlTestContext, files: Path, url: str) -> None:
    (files / "sales" / "a.csv").write_text("id,v\n1,a\n")
    (files / "sales" / "b.csv").write_text("id,v\n2,b\n3,c\n")
    (files / "sales" / "c.csv").write_text("id,v\n1,a\n")  # same content as a.csv
    result = load(ctx, "sales/*.csv")
    assert result.rows == 3 and result.output["files"] == ["sales/a.csv", "sales/b.csv"]
    assert result.output["skipped"][0]["reason"] == "same content as sales/a.csv"
    (files / "sales" / "d.csv").write_text("id,v\n4,d\n")
    assert load(ctx, "sales/*.csv").output["files"] == ["sales/d.csv"]
    assert scalar(url, "SELECT count(*) FROM sales") == 4


def test_overwrite_swaps_and_keeps_indexes_and_views(ctx: SqlTestContext, files: Path,
                                                     url: str) -> None:
    execute(url, "CREATE TABLE sales (id INTEGER NOT NULL, v TEXT, note TEXT DEFAULT 'n')",
            "CREATE UNIQUE INDEX sales_id ON sales (id)",
            "INSERT INTO sales (id, v) VALUES (9, 'old')",
            "CREATE VIEW sales_v AS SELECT id, v FROM sales")
    (files / "a.csv").write_text("id,v\n1,a\n2,b\n")
    assert load(ctx, "a.csv", mode="overwrite").rows == 2
    assert rows(url, "SELECT id, v, note FROM sales_v JOIN sales USING (id, v) ORDER BY id") == [
        (1, "a", "n"), (2, "b", "n")]
    assert scalar(url, "SELECT count(*) FROM sqlite_master WHERE name = 'sales_id'") == 1
    assert tables(url) == ["cadenza_loaded_files", "sales"]
    assert load(ctx, "a.csv", mode="overwrite").output["skipped"][0]["reason"] == "already loaded"
    (files / "b.csv").write_text("id,v\n3,c\n")
    load(ctx, "b.csv", mode="overwrite")
    assert rows(url, "SELECT id FROM sales") == [(3,)]
    # a.csv is no longer what the table holds: loading it again is not skipped
    assert load(ctx, "a.csv", mode="overwrite").rows == 2
    assert rows(url, "SELECT path FROM cadenza_loaded_files") == [("a.csv",)]


def test_overwrite_keeps_the_old_table_when_the_load_fails(ctx: SqlTestContext, files: Path,
                                                           url: str) -> None:
    execute(url, "CREATE TABLE sales (id INTEGER, v TEXT)", "INSERT INTO sales VALUES (9, 'old')")
    good = "".join(f"{i},ok\n" for i in range(30_000))
    (files / "bad.csv").write_text("id,v\n" + good + '1,"broken\n' + good)
    with pytest.raises(Fatal, match=r"bad\.csv: line 30002: malformed CSV"):
        load(ctx, "bad.csv", mode="overwrite")
    assert rows(url, "SELECT * FROM sales") == [(9, "old")]
    assert tables(url) == ["sales"]  # no sales__new left, nothing recorded


def test_readers_see_the_old_rows_during_an_overwrite(ctx: SqlTestContext, files: Path,
                                                      url: str) -> None:
    execute(url, "CREATE TABLE sales (id INTEGER, v TEXT)", "INSERT INTO sales VALUES (9, 'old')")
    (files / "big.csv").write_text("id,v\n" + "".join(f"{i},x\n" for i in range(100_000)))
    seen: list[Any] = []
    ctx.cancel = lambda: bool(seen.append(scalar(url, "SELECT count(*) FROM sales")))
    load(ctx, "big.csv", mode="overwrite")
    assert len(seen) > 2 and set(seen) == {1}
    assert scalar(url, "SELECT count(*) FROM sales") == 100_000


def test_upsert_creates_a_key_and_updates(ctx: SqlTestContext, files: Path, url: str) -> None:
    (files / "a.csv").write_text("id,v\n1,a\n2,b\n")
    (files / "b.csv").write_text("ID,v\n2,B\n3,C\n3,C2\n")
    load(ctx, "a.csv", mode="upsert", key="id")
    load(ctx, "b.csv", mode="upsert", key="id")
    assert rows(url, "SELECT id, v FROM sales ORDER BY id") == [(1, "a"), (2, "B"), (3, "C2")]


def test_upsert_needs_a_unique_key(ctx: SqlTestContext, files: Path, url: str) -> None:
    execute(url, "CREATE TABLE sales (id INTEGER, v TEXT)")
    (files / "a.csv").write_text("id,v\n1,a\n")
    with pytest.raises(Fatal, match=r"needs a primary key or unique index on \['id'\]"):
        load(ctx, "a.csv", mode="upsert", key="id")
    with pytest.raises(Fatal, match="upsert key column 'nope' is not among"):
        load(ctx, "a.csv", mode="upsert", key=["nope"], table="fresh")


def test_xlsx_parquet_and_json_lines(ctx: SqlTestContext, files: Path, url: str) -> None:
    book = openpyxl.Workbook()
    for row in (["id", "name", "day"], [1, "a", datetime(2026, 1, 2)], [2, "b", None]):
        book.active.append(row)
    book.save(files / "x.xlsx")
    pq.write_table(pa.table({"id": [3, 4], "name": ["c", None],
                             "at": pa.array([datetime(2026, 1, 1, 12, tzinfo=UTC)] * 2)}),
                   files / "p.parquet")
    (files / "j.json").write_text('{"id": 5, "tags": ["x"], "ok": true}\n{"id": 6}\n')
    assert load(ctx, "x.xlsx", table="x").rows == 2
    assert load(ctx, "p.parquet", table="p").rows == 2
    assert load(ctx, "j.json", table="j").rows == 2
    assert rows(url, "SELECT id, name, day FROM x ORDER BY id") == [
        (1, "a", "2026-01-02"), (2, "b", None)]
    assert rows(url, "SELECT id, name, at FROM p ORDER BY id")[0] == (
        3, "c", "2026-01-01 12:00:00+00:00")
    assert rows(url, "SELECT id, tags, ok FROM j ORDER BY id") == [(5, '["x"]', 1), (6, None, None)]


@pytest.mark.reliability_case(16)
def test_hostile_values_stored_verbatim(ctx: SqlTestContext, files: Path, url: str) -> None:
    buf = io.StringIO()
    import csv as csv_module

    csv_module.writer(buf).writerows([["id", "v"], [1, HOSTILE], [2, "x\ny"]])
    (files / "h.csv").write_text(buf.getvalue(), encoding="utf-8")
    (files / "h.json").write_text(json.dumps({"id": 3, "v": HOSTILE}) + "\n")
    load(ctx, "h.csv", constants={"c": HOSTILE})
    load(ctx, "h.json", constants={"c": HOSTILE})
    assert rows(url, "SELECT v, c FROM sales ORDER BY id") == [
        (HOSTILE, HOSTILE), ("x\ny", HOSTILE), (HOSTILE, HOSTILE)]


@pytest.mark.parametrize("path", [
    "../x.csv", "/etc/passwd", "%2e%2e/x.csv", "%252e%252e/x.csv", "..\\x.csv", "link.csv",
    "sales/*.csv",
])
@pytest.mark.reliability_case(20)
def test_path_attacks_refused_and_nothing_loaded(ctx: SqlTestContext, files: Path, url: str,
                                                 tmp_path: Path, path: str) -> None:
    (tmp_path / "data" / "x.csv").write_text(SALES)
    (files / "link.csv").symlink_to(tmp_path / "data" / "x.csv")
    (files / "sales" / "ok.csv").write_text(SALES)
    (files / "sales" / "out.csv").symlink_to(tmp_path / "data" / "x.csv")
    with pytest.raises(Fatal, match="refused"):  # a ${params.x} rendered to the attack
        load(ctx, "sales/${params.file}", format="csv", rendered={"path": path})
    assert not (tmp_path / "data" / "w.db").exists() or tables(url) == []


def test_dot_dot_refused_by_the_config_check_too(ctx: SqlTestContext) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"without '\.\.' segments"):
        load(ctx, "../x.csv")


def test_on_missing(ctx: SqlTestContext, url: str) -> None:
    with pytest.raises(Fatal, match=r"no file matches 'sales/2099\.csv'"):
        load(ctx, "sales/2099.csv")
    skipped = load(ctx, "sales/2099.csv", on_missing="skip")
    assert skipped.rows == 0 and skipped.output["skipped"] == [
        {"path": "sales/2099.csv", "reason": "missing"}]
    with pytest.raises(Deferred) as caught:
        load(ctx, "sales/*.csv", on_missing="wait")
    assert caught.value.until is not None and caught.value.until > datetime.now(UTC)


def test_broken_quote_names_the_file_and_line(ctx: SqlTestContext, files: Path,
                                              url: str) -> None:
    (files / "sales" / "b.csv").write_text('id,v\n1,a\n2,"oops\n3,c\n')
    with pytest.raises(Fatal, match=r"sales/b\.csv: line 3: malformed CSV"):
        load(ctx, "sales/b.csv")
    assert "sales" not in tables(url)


def test_cancel_and_timeout_roll_back(tmp_path: Path, files: Path, url: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The test decides when the cancel and the timeout strike: once the first batch was
    written (rows are in the transaction, the rest of the file is not), whatever the
    machine's speed; the step fails and leaves nothing behind (no table, no row)."""
    from cadenza.steps.builtin import file_load

    (files / "big.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(200_000)))
    clock = FakeClock()
    ctx = SqlTestContext(tmp_path, {"w": url}, step_type="file_load", timeout=60, clock=clock)
    written: list[int] = []
    strike: list[Any] = [lambda: None]
    real_write = file_load._Writer.write

    def write(self: Any, batch: Any) -> None:
        real_write(self, batch)
        written.append(batch.size)
        if len(written) == 1:
            strike[0]()

    monkeypatch.setattr(file_load._Writer, "write", write)
    try:
        strike[0] = lambda: setattr(ctx, "cancel", True)
        with pytest.raises(Fatal, match="step canceled"):
            load(ctx, "big.csv")
        assert len(written) == 1 and 0 < sum(written) < 200_000
        assert tables(url) == []

        ctx.cancel = False
        written.clear()
        strike[0] = lambda: clock.advance(61)  # the step's 60 s are up, mid-load
        with pytest.raises(Retryable, match="step timeout"):
            load(ctx, "big.csv")
        assert len(written) == 1 and 0 < sum(written) < 200_000
        assert tables(url) == []

        written.clear()
        strike[0] = lambda: None  # untouched, the same load goes through: the strikes did it
        ctx.set_remaining(60)
        assert load(ctx, "big.csv").rows == 200_000 and len(written) > 1
        assert scalar(url, "SELECT count(*) FROM sales") == 200_000
    finally:
        ctx.close()


def test_empty_file_and_header_only(ctx: SqlTestContext, files: Path, url: str) -> None:
    (files / "h.csv").write_text("id,v\n")
    assert load(ctx, "h.csv").rows == 0
    assert rows(url, "SELECT sql FROM sqlite_master WHERE name = 'sales'") == [
        ('CREATE TABLE "sales" ("id" TEXT, "v" TEXT)',)]
    (files / "e.csv").write_text("")
    with pytest.raises(Fatal, match="no columns"):
        load(ctx, "e.csv", table="other")
