"""file_export on SQLite: each format read back, formula injection, paths, overwrite,
failures leaving no file, binds, stale temporaries, and a kill -9 mid-export."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa
from sql_ctx import SqlTestContext, execute, rows, run_step

from cadenza.clock import FakeClock
from cadenza.domain.errors import Fatal, Retryable
from cadenza.steps.builtin.file_export import FileExportConfig, FileExportStep
from cadenza.steps.builtin.lib.writers import neutralise
from cadenza.steps.registry import registry

HERE = Path(__file__).parent
#: cells a spreadsheet would run as formulas (OWASP's list, and full-width forms)
INJECTION = ["=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A2)", "\t=1", "\r=1",
             "=HYPERLINK(\"http://evil\",\"x\")", "＝1+1", "-", "+"]
#: text that is exactly a number, and ordinary text: left as they are
HARMLESS = ["-5", "+1.5e3", "-0.25", "plain", "a=b", " =1 leading space", ""]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "files"
    root.mkdir(parents=True)
    return root


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{(tmp_path / 'data' / 'w.db').as_posix()}"


@pytest.fixture
def ctx(tmp_path: Path, url: str, files: Path) -> Iterator[SqlTestContext]:
    c = SqlTestContext(tmp_path, {"w": url}, step_type="file_export",
                       params={"min": 2, "name": "' OR 1=1 --"})
    yield c
    c.close()


@pytest.fixture
def sales(url: str) -> list[tuple[Any, ...]]:
    data = [(1, "ACME", 10.5, "2026-01-01", None), (2, "Bob, \"Inc\"\nline", -3.25,
            "2026-01-02", "x"), (3, "é 😀 ü", 0.0, "2026-01-03", "y")]
    execute(url, "CREATE TABLE sales (id INTEGER, customer TEXT, amount REAL, day TEXT, "
                 "note TEXT)")
    execute(url, *[f"INSERT INTO sales VALUES ({i}, '{c.replace(chr(39), chr(39) * 2)}', {a}, "
                   f"'{d}', {'NULL' if n is None else repr(n)})" for i, c, a, d, n in data])
    return data


def export(ctx: SqlTestContext, path: str, query: str = "SELECT * FROM sales ORDER BY id",
           **fields: Any) -> Any:
    return run_step(FileExportStep, ctx, connection="w", query=query, path=path, **fields)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".cadenza-part"))


def test_registered_with_the_query_bound_not_rendered() -> None:
    assert registry()["file_export"] is FileExportStep
    assert FileExportStep.raw_fields == {"query"}


def test_format_from_the_extension_or_a_clear_error() -> None:
    base = {"name": "e", "type": "file_export", "connection": "w", "query": "SELECT 1"}
    assert FileExportConfig.model_validate({**base, "path": "x.JSONL"}).format is None
    with pytest.raises(ValueError, match=r"cannot tell the format of 'x\.txt'"):
        FileExportConfig.model_validate({**base, "path": "x.txt"})
    with pytest.raises(ValueError, match="sheet"):
        FileExportConfig.model_validate({**base, "path": "x.xlsx", "sheet": "a/b"})


def test_csv_round_trip(ctx: SqlTestContext, files: Path, sales: list[Any]) -> None:
    result = export(ctx, "out/sales.csv")
    path = files / "out" / "sales.csv"
    with path.open(newline="", encoding="utf-8") as fh:
        got = list(csv.reader(fh))
    assert got[0] == ["id", "customer", "amount", "day", "note"]
    assert got[1:] == [[str(i), c, repr(a), d, n or ""] for i, c, a, d, n in sales]
    assert result.rows == 3
    assert result.output == {"rows": 3, "bytes": path.stat().st_size, "path": str(path),
                             "file": "out/sales.csv", "format": "csv",
                             "columns": ["id", "customer", "amount", "day", "note"]}
    assert leftovers(files / "out") == []


def test_csv_options(ctx: SqlTestContext, files: Path, sales: list[Any]) -> None:
    export(ctx, "s.csv", csv={"delimiter": ";", "quote": "'", "encoding": "latin-1",
                               "header": False, "null": "NULL"},
           query="SELECT id, note FROM sales WHERE id < 3 ORDER BY id")
    assert (files / "s.csv").read_bytes() == b"1;NULL\r\n2;x\r\n"
    with pytest.raises(Fatal, match=r"rows 1-3: the character '😀' cannot be written in "
                                    r"encoding 'latin-1'"):
        export(ctx, "t.csv", csv={"encoding": "latin-1"})
    assert not (files / "t.csv").exists() and leftovers(files) == []


def test_xlsx_round_trip(ctx: SqlTestContext, files: Path, sales: list[Any]) -> None:
    export(ctx, "sales.xlsx", sheet="Sales")
    book = openpyxl.load_workbook(files / "sales.xlsx", read_only=True)
    assert book.sheetnames == ["Sales"]
    # read-only mode leaves out trailing empty cells: pad the rows to the header's width
    got = [tuple(r) + (None,) * (5 - len(r)) for r in book["Sales"].iter_rows(values_only=True)]
    book.close()
    assert got == [("id", "customer", "amount", "day", "note"), *sales]


def test_parquet_round_trip(ctx: SqlTestContext, files: Path, sales: list[Any]) -> None:
    export(ctx, "sales.parquet")
    table = pq.read_table(files / "sales.parquet")
    assert table.column_names == ["id", "customer", "amount", "day", "note"]
    assert [tuple(r.values()) for r in table.to_pylist()] == sales
    assert str(table.schema.field("id").type) == "int64"


def test_jsonl_round_trip(ctx: SqlTestContext, files: Path, sales: list[Any]) -> None:
    export(ctx, "sales.jsonl")
    lines = (files / "sales.jsonl").read_text(encoding="utf-8").splitlines()
    assert [tuple(json.loads(line).values()) for line in lines] == sales


def test_typed_values_in_each_format(ctx: SqlTestContext, files: Path, url: str) -> None:
    execute(url, "CREATE TABLE t (n INTEGER, big INTEGER, f REAL, b BLOB)",
            "INSERT INTO t VALUES (-5, 9007199254740993, 1e300, x'00ff'), "
            "(NULL, NULL, NULL, NULL)")
    query = "SELECT * FROM t ORDER BY n IS NULL"
    export(ctx, "t.csv", query=query)
    assert (files / "t.csv").read_bytes().decode() == (
        "n,big,f,b\r\n-5,9007199254740993,1e+300,00ff\r\n,,,\r\n")
    export(ctx, "t.xlsx", query=query)
    book = openpyxl.load_workbook(files / "t.xlsx")
    sheet = book.active
    assert [c.value for c in sheet[2]] == [-5, "9007199254740993", 1e300, "00ff"]
    assert sheet["A2"].data_type == "n"  # a negative number stays a number
    assert [c.value for c in sheet[3]] == [None, None, None, None]
    export(ctx, "t.parquet", query=query)
    assert pq.read_table(files / "t.parquet").to_pylist() == [
        {"n": -5, "big": 9007199254740993, "f": 1e300, "b": b"\x00\xff"},
        {"n": None, "big": None, "f": None, "b": None}]


@pytest.mark.reliability_case(22)
def test_formula_injection_neutralised_in_csv_and_xlsx(ctx: SqlTestContext, files: Path,
                                                       url: str) -> None:
    corpus = INJECTION + HARMLESS
    execute(url, "CREATE TABLE evil (i INTEGER, v TEXT, n INTEGER)")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO evil VALUES (?, ?, ?)",
                             [(i, v, -(i + 1)) for i, v in enumerate(corpus)])
    engine.dispose()
    query = 'SELECT v AS "=header", n FROM evil ORDER BY i'
    export(ctx, "evil.csv", query=query)
    with (files / "evil.csv").open(newline="", encoding="utf-8") as fh:
        got = list(csv.reader(fh))
    assert got[0] == ["'=header", "n"]
    assert [r[0] for r in got[1:]] == ["'" + v for v in INJECTION] + HARMLESS
    assert [r[1] for r in got[1:]] == [str(-(i + 1)) for i in range(len(corpus))]
    export(ctx, "evil.xlsx", query=query)
    book = openpyxl.load_workbook(files / "evil.xlsx")
    sheet = book.active
    cells = [row[0] for row in sheet.iter_rows(min_row=2)]
    assert all(c.data_type == "s" for c in cells[:len(INJECTION)])  # never a formula
    assert [c.value for c in cells] == ["'" + v for v in INJECTION] + [v or None
                                                                       for v in HARMLESS]
    assert [row[1].value for row in sheet.iter_rows(min_row=2)] == [
        -(i + 1) for i in range(len(corpus))]
    # no cell of either file starts with a formula character
    for value in [c.value for c in cells] + [r[0] for r in got]:
        assert not value or value[0] not in "=+-@\t\r＝" or value in HARMLESS


def test_neutralise_keeps_numbers_and_ordinary_text() -> None:
    assert neutralise("-5") == "-5" and neutralise("-5 apples") == "'-5 apples"
    assert neutralise("@x") == "'@x" and neutralise("x@y") == "x@y"


@pytest.mark.parametrize("path", ["/etc/cadenza-export.csv", "../escape.csv", "a/../../x.csv",
                                  "%2e%2e/x.csv", "out/*.csv", "out/x\x00.csv", "．．/x.csv"])
def test_paths_outside_the_roots_are_refused(ctx: SqlTestContext, files: Path,
                                             sales: list[Any], path: str) -> None:
    with pytest.raises(Fatal, match="refused"):
        run_step(FileExportStep, ctx, connection="w", query="SELECT 1", path="x.csv",
                 rendered={"path": path})
    assert not Path("/etc/cadenza-export.csv").exists()
    assert not (files.parent / "escape.csv").exists()


def test_a_symlinked_directory_out_of_the_root_is_refused(ctx: SqlTestContext, files: Path,
                                                          tmp_path: Path,
                                                          sales: list[Any]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (files / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(Fatal, match="resolves outside its root"):
        export(ctx, "link/x.csv")
    assert list(outside.iterdir()) == []


def test_absolute_path_inside_a_root_and_a_second_root(tmp_path: Path, url: str,
                                                       files: Path, sales: list[Any]) -> None:
    second = tmp_path / "share"
    (second / "reports").mkdir(parents=True)
    c = SqlTestContext(tmp_path, {"w": url}, roots=["data/files", str(second)])
    try:
        out = export(c, "reports/x.csv")  # the first root lacks reports/: the second has it
        assert out.output["path"] == str(second / "reports" / "x.csv")
        out = export(c, str(files / "abs" / "y.csv"))
        assert out.output["file"] == "abs/y.csv" and (files / "abs" / "y.csv").is_file()
    finally:
        c.close()


@pytest.mark.reliability_case(22)
def test_overwrite_false_keeps_an_existing_file(ctx: SqlTestContext, files: Path,
                                                sales: list[Any]) -> None:
    (files / "s.csv").write_text("keep me")
    with pytest.raises(Fatal, match=r"'s\.csv' exists already .*overwrite = true"):
        export(ctx, "s.csv")
    assert (files / "s.csv").read_text() == "keep me"
    export(ctx, "s.csv", overwrite=True)
    assert (files / "s.csv").read_text().startswith("id,customer")
    (files / "d.csv").mkdir()
    with pytest.raises(Fatal, match="not a regular file"):
        export(ctx, "d.csv", overwrite=True)


@pytest.mark.reliability_case(22)
def test_a_query_failing_midway_leaves_no_file(ctx: SqlTestContext, files: Path,
                                               url: str) -> None:
    execute(url, "CREATE TABLE n (i INTEGER)",
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 30000) "
            "INSERT INTO n SELECT i FROM c")
    (files / "old.csv").write_text("the old export")
    for fmt in ("csv", "xlsx", "parquet", "jsonl"):
        target = "old.csv" if fmt == "csv" else f"broken.{fmt}"
        with pytest.raises(Fatal, match="integer overflow"):
            export(ctx, target, overwrite=True, query="SELECT i, CASE WHEN i > 25000 THEN "
                   "abs(-9223372036854775807 - 1) END AS boom FROM n ORDER BY i")
        assert leftovers(files) == []
    assert (files / "old.csv").read_text() == "the old export"
    assert sorted(p.name for p in files.iterdir()) == ["old.csv"]


def test_binds_from_params_never_become_sql(ctx: SqlTestContext, files: Path, url: str,
                                            sales: list[Any]) -> None:
    out = export(ctx, "b.jsonl", query="SELECT id FROM sales WHERE id >= ${params.min} "
                 "OR customer = ${params.name} ORDER BY id")
    assert out.rows == 2
    with pytest.raises(Fatal, match="inside a quoted string"):
        export(ctx, "c.jsonl", query="SELECT id FROM sales WHERE customer = '${params.name}'")
    with pytest.raises(Fatal, match="expected one SQL statement"):
        export(ctx, "c.jsonl", query="SELECT 1; DROP TABLE sales")
    with pytest.raises(Fatal, match="returns no rows"):
        export(ctx, "c.jsonl", query="DELETE FROM sales")
    assert rows(url, "SELECT count(*) FROM sales") == [(3,)]  # the DELETE was rolled back


def test_stale_temporaries_are_removed_fresh_ones_kept(tmp_path: Path, url: str, files: Path,
                                                       sales: list[Any]) -> None:
    stale = files / ".s.csv.deadbeef0000.cadenza-part"
    fresh = files / ".s.csv.cafe00000000.cadenza-part"
    other = files / ".t.csv.deadbeef0000.cadenza-part"
    for p in (stale, fresh, other):
        p.write_text("partial")
    clock = FakeClock()
    now = clock.now().timestamp()
    os.utime(stale, (now - 7200, now - 7200))
    os.utime(other, (now - 7200, now - 7200))
    os.utime(fresh, (now - 60, now - 60))
    c = SqlTestContext(tmp_path, {"w": url}, clock=clock)
    try:
        export(c, "s.csv")
    finally:
        c.close()
    assert sorted(p.name for p in files.iterdir()) == sorted([fresh.name, other.name, "s.csv"])


@pytest.mark.reliability_case(22)
def test_killed_midway_leaves_no_file_at_the_path(tmp_path: Path, url: str,
                                                  files: Path) -> None:
    execute(url, "CREATE TABLE big (i INTEGER, s TEXT)",
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1000000) "
            "INSERT INTO big SELECT i, printf('row %d', i) FROM c")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from pathlib import Path\n"
        "from sql_ctx import SqlTestContext, run_step\n"
        "from cadenza.steps.builtin.file_export import FileExportStep\n"
        "c = SqlTestContext(Path(sys.argv[2]), {'w': sys.argv[3]}, timeout=600)\n"
        "run_step(FileExportStep, c, connection='w', query='SELECT * FROM big', path='big.csv')\n"
        "print('finished')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(HERE), str(tmp_path), url],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while proc.poll() is None:
            parts = [files / n for n in leftovers(files)]
            if parts and parts[0].stat().st_size > 1 << 20:  # well into the rows
                break
            try:
                proc.wait(timeout=0.05)  # polls the child without sleeping blindly
            except subprocess.TimeoutExpired:
                pass
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert not (files / "big.csv").exists()
    assert len(leftovers(files)) == 1  # the killed writer's temporary, never the path
    # the next export writes the whole file (the killed one's temporary is still fresh)
    c = SqlTestContext(tmp_path, {"w": url}, timeout=600)
    try:
        out = export(c, "big.csv", query="SELECT * FROM big")
    finally:
        c.close()
    assert out.rows == 1_000_000
    with (files / "big.csv").open(encoding="utf-8") as fh:
        assert sum(1 for _ in fh) == 1_000_001


def test_xlsx_row_limit_is_a_clear_error(ctx: SqlTestContext, files: Path,
                                         monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    # the real limit is 1,048,576 rows; lowered so that the test is quick
    monkeypatch.setattr("cadenza.steps.builtin.lib.writers.XLSX_MAX_ROWS", 5)
    execute(url, "CREATE TABLE few (i INTEGER)", "INSERT INTO few VALUES (1),(2),(3),(4),(5)")
    with pytest.raises(Fatal, match="an xlsx sheet holds at most 4 rows"):
        export(ctx, "few.xlsx", query="SELECT i FROM few")
    assert list(files.iterdir()) == []


@pytest.mark.reliability_case(47)
def test_a_full_disk_is_retryable_and_leaves_no_file(tmp_path: Path, url: str,
                                                      files: Path) -> None:
    from tests.support.tmpfs import small_tmpfs

    execute(url, "CREATE TABLE wide (i INTEGER, s TEXT)",
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 100000) "
            "INSERT INTO wide SELECT i, printf('%050d', i) FROM c")
    with small_tmpfs(tmp_path / "small", "1m") as small:
        (small / "old.csv").write_text("the old export")
        c = SqlTestContext(tmp_path, {"w": url}, roots=[str(small)])
        try:
            for fmt in ("csv", "jsonl", "parquet", "xlsx"):
                name = "old.csv" if fmt == "csv" else f"full.{fmt}"
                with pytest.raises(Retryable, match=f"cannot write '{name}': No space left"):
                    export(c, name, query="SELECT * FROM wide", overwrite=True)
                assert leftovers(small) == []
        finally:
            c.close()
        assert sorted(p.name for p in small.iterdir()) == ["old.csv"]
        assert (small / "old.csv").read_text() == "the old export"


class CheckpointContext(SqlTestContext):
    """The test context with the executor's checkpoints (kept in memory here)."""

    last_checkpoint: Any = None

    def checkpoint(self, state: Any) -> None:
        self.last_checkpoint = json.loads(json.dumps(state))


def test_an_attempt_after_the_rename_finds_its_file_and_does_not_fail(
        tmp_path: Path, url: str, files: Path, sales: list[Any]) -> None:
    c = CheckpointContext(tmp_path, {"w": url})
    try:
        first = export(c, "s.csv")
        assert c.last_checkpoint["written"]["output"] == dict(first.output)
        # the step's end was not recorded (a crash): the next attempt, overwrite = false
        again = export(c, "s.csv")
        assert again.output == first.output and again.rows == 3
        assert any("written by an earlier attempt" in t for _, t in c.log_record.lines)
        # another file at the path since: not ours, refused
        (files / "other.csv").write_text("someone else's")
        (files / "other.csv").replace(files / "s.csv")
        with pytest.raises(Fatal, match="exists already"):
            export(c, "s.csv")
    finally:
        c.close()
