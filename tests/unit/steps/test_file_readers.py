"""file_load's readers: csv options and errors, xlsx safety, parquet, JSON lines, inference."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from cadenza.domain.errors import Fatal
from cadenza.steps.base import CsvOptions
from cadenza.steps.builtin.lib.readers import arrow_category, infer, open_source


def read(fmt: str, data: bytes, **csv: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    source = open_source(fmt, io.BytesIO(data), "in/x." + fmt, CsvOptions(**csv))
    out: list[tuple[Any, ...]] = []
    for batch in source.batches:
        assert all(len(c) == batch.size for c in batch.columns)
        out += list(zip(*batch.columns, strict=True))
    return source.names, out


def xlsx_bytes(rows: list[list[Any]]) -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    for row in rows:
        sheet.append(row)
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def replace_member(data: bytes, name: str, content: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            body = content if info.filename == name else src.read(info.filename)
            dst.writestr(info.filename, body, compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


# -- csv --------------------------------------------------------------------------------

def test_csv_defaults_quotes_nulls_newlines() -> None:
    names, rows = read("csv", b'id,name,note\n1,"a, b","line1\nline2"\n2,,"say ""hi"""\n\n')
    assert names == ["id", "name", "note"]
    assert rows == [("1", "a, b", "line1\nline2"), ("2", None, 'say "hi"')]


def test_csv_options() -> None:
    data = "id;name\n1;'caf\u00e9; cr\u00e8me'\n2;NA\n".encode("latin-1")
    names, rows = read("csv", data, delimiter=";", quote="'", encoding="latin-1", null="NA")
    assert rows == [("1", "caf\u00e9; cr\u00e8me"), ("2", None)]
    names, rows = read("csv", b"1,a\n2,\n", header=False, null="")
    assert names == ["column_1", "column_2"] and rows == [("1", "a"), ("2", None)]


def test_csv_with_bom_and_crlf() -> None:
    names, rows = read("csv", b"\xef\xbb\xbfid,name\r\n1,x\r\n")
    assert names == ["id", "name"] and rows == [("1", "x")]


def test_csv_empty_and_header_only() -> None:
    assert read("csv", b"") == ([], [])
    assert read("csv", b"a,b\n") == (["a", "b"], [])


def test_csv_many_batches_bounded() -> None:
    data = b"n,text\n" + b"".join(b"%d,%s\n" % (i, b"x" * 50) for i in range(60_000))
    source = open_source("csv", io.BytesIO(data), "big.csv", CsvOptions())
    sizes = [b.size for b in source.batches]
    assert sum(sizes) == 60_000 and len(sizes) > 1 and max(sizes) < 60_000


def test_csv_broken_quote_names_the_file_and_line() -> None:
    data = b'id,name\n1,ok\n2,"broken\n3,x\n4,y\n'
    with pytest.raises(Fatal, match=r"in/x\.csv: line 3: malformed CSV.*quote opened on line 3"):
        read("csv", data)


def test_csv_broken_quote_after_many_batches() -> None:
    good = b"".join(b"%d,ok\n" % i for i in range(50_000))
    with pytest.raises(Fatal, match=r"line 50002: "):
        read("csv", b"id,name\n" + good + b'x,"never closed\n' + good)


def test_csv_wrong_field_count_names_the_line() -> None:
    with pytest.raises(Fatal, match=r"line 4: expected 2 fields, found 3"):
        read("csv", b"a,b\n1,2\n3,4\n5,6,7\n")


@pytest.mark.reliability_case(21)
def test_csv_bad_encoding_names_the_line() -> None:
    with pytest.raises(Fatal, match=r"line 3: not valid utf-8"):
        read("csv", b"a,b\n1,2\n3,\xff\xfe\n")


@pytest.mark.reliability_case(21)
def test_csv_too_many_columns() -> None:
    with pytest.raises(Fatal, match="1601 columns; at most 1600"):
        read("csv", b",".join(b"c%d" % i for i in range(1601)) + b"\n")


# -- xlsx -------------------------------------------------------------------------------

def test_xlsx_first_sheet_typed_values() -> None:
    data = xlsx_bytes([[None], ["id", "name", "day", "at", None],
                       [1, "a", datetime(2026, 1, 2), datetime(2026, 1, 2, 3, 4)],
                       [None, None, None, None], [2.5, None, None, True]])
    names, rows = read("xlsx", data)
    assert names == ["id", "name", "day", "at"]
    assert rows == [(1, "a", date(2026, 1, 2), datetime(2026, 1, 2, 3, 4)),
                    (2.5, None, None, True)]


def test_xlsx_values_beyond_the_header_refused() -> None:
    with pytest.raises(Fatal, match="row 3 has values beyond the header's 1 columns"):
        read("xlsx", xlsx_bytes([["a"], [1], [2, "extra"]]))


def test_xlsx_not_a_zip() -> None:
    with pytest.raises(Fatal, match="not an xlsx file"):
        read("xlsx", b"id,name\n1,2\n")


@pytest.mark.reliability_case(21)
def test_xlsx_zip_bomb_refused() -> None:
    data = replace_member(xlsx_bytes([["a"], [1]]), "xl/worksheets/sheet1.xml",
                         b" " * (20 << 20))
    with pytest.raises(Fatal, match="zip bomb"):
        read("xlsx", data)


@pytest.mark.reliability_case(21)
def test_xlsx_entities_refused() -> None:
    sheet = (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
             b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
             b'<sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>&xxe;</t></is></c></row>'
             b"</sheetData></worksheet>")
    data = replace_member(xlsx_bytes([["a"], [1]]), "xl/worksheets/sheet1.xml", sheet)
    with pytest.raises(Fatal, match=r"EntitiesForbidden|DTDForbidden|entit"):
        read("xlsx", data)


# -- parquet ----------------------------------------------------------------------------

def test_parquet_batches_and_schema_hints(tmp_path: Path) -> None:
    table = pa.table({
        "id": pa.array(range(25_000), pa.int64()),
        "amount": pa.array([Decimal("1.25")] * 25_000, pa.decimal128(10, 2)),
        "day": pa.array([date(2026, 1, 1)] * 25_000),
        "at": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * 25_000, pa.timestamp("us", "UTC")),
        "flag": pa.array([None] * 25_000, pa.bool_()),
    })
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=10_000)
    source = open_source("parquet", io.BytesIO(buf.getvalue()), "p.parquet", CsvOptions())
    assert source.hints == ["int", "decimal", "date", "timestamptz", "bool"]
    batches = list(source.batches)
    assert sum(b.size for b in batches) == 25_000 and max(b.size for b in batches) <= 10_000
    assert batches[0].columns[1][0] == Decimal("1.25") and batches[0].arrow is not None


def test_parquet_garbage_refused() -> None:
    with pytest.raises(Fatal, match="not a readable Parquet file"):
        read("parquet", b"PAR1 not really")


# -- JSON lines -------------------------------------------------------------------------

def test_jsonl_objects_and_missing_keys() -> None:
    data = b'{"id": 1, "tags": ["a"]}\n\n{"id": 2, "name": "\\u00e9"}\n'
    names, rows = read("json", data)
    assert names == ["id", "tags", "name"]
    assert rows == [(1, ["a"], None), (2, None, "\u00e9")]


@pytest.mark.parametrize(("data", "message"), [
    (b'{"a": 1}\n{"a": \n', "line 2: not valid JSON"),
    (b'{"a": 1}\n[1, 2]\n', "line 2: expected a JSON object"),
    (b'{"a": NaN}\n', "line 1: not valid JSON"),
])
def test_jsonl_errors_name_the_line(data: bytes, message: str) -> None:
    with pytest.raises(Fatal, match=message):
        read("json", data)


def test_jsonl_new_key_after_the_first_batch_refused() -> None:
    lines = [json.dumps({"a": i}) for i in range(10_000)] + ['{"a": 1, "b": 2}']
    with pytest.raises(Fatal, match="line 10001: key 'b' is not among the columns"):
        read("json", "\n".join(lines).encode())


# -- inference ------------------------------------------------------------------------

@pytest.mark.parametrize(("values", "category"), [
    (["1", "-2", "0", None], "int"), (["1", "2.5", "1e3", ".5"], "float"),
    (["007"], "text"), (["1", "x"], "text"), (["99999999999999999999"], "decimal"),
    (["2026-01-31", None], "date"), (["2026-02-30"], "text"),
    (["2026-01-31 10:00", "2026-01-31T10:00:00.5", "2026-02-01"], "timestamp"),
    (["2026-01-31T10:00:00+01:00"], "text"), (["nan", "inf"], "text"), ([None, None], "text"),
    ([], "text"), (["true", "false"], "text"),
])
def test_infer_from_text(values: list[str | None], category: str) -> None:
    assert infer(values, typed=False) == category


@pytest.mark.parametrize(("values", "category"), [
    ([1, 2], "int"), ([1, 2.5], "float"), ([True, None], "bool"), ([True, 1], "text"),
    ([Decimal("1.5"), 2], "decimal"), ([date(2026, 1, 1), datetime(2026, 1, 1, 1)], "timestamp"),
    ([datetime(2026, 1, 1, tzinfo=UTC)], "timestamptz"), ([b"x"], "bytes"),
    (["1"], "text"), ([{"a": 1}], "text"), ([time(1, 2)], "text"), ([2**70], "decimal"),
])
def test_infer_from_typed_values(values: list[Any], category: str) -> None:
    assert infer(values, typed=True) == category


def test_arrow_categories() -> None:
    assert [arrow_category(t) for t in (
        pa.int32(), pa.uint64(), pa.float32(), pa.string(), pa.binary(), pa.bool_(),
        pa.date32(), pa.timestamp("ms"), pa.list_(pa.int8()), pa.dictionary(pa.int8(), pa.string()),
    )] == ["int", "decimal", "float", "text", "bytes", "bool", "date", "timestamp", "text", "text"]
