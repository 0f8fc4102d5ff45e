"""Writers of ``file_export``: csv, xlsx, parquet and JSON lines, fed rows in chunks so that
memory stays bounded whatever the number of rows.

Every writer gets the column names once (:meth:`Writer.start`), then chunks of rows as
tuples (:meth:`Writer.write`), then :meth:`Writer.finish`; it writes to an open binary
file (the temporary file of :class:`cadenza.steps.builtin.lib.outfiles.AtomicFile`).

Values (docs/steps.md has the table):

- **csv**: NULL is ``csv.null`` (empty by default); text as it is; booleans ``true`` /
  ``false``; numbers as written by Python (Decimal in plain notation, exact); dates and
  times ISO 8601 (``2026-01-31 12:00:00+00:00``); bytes in hex; JSON values as JSON.
- **xlsx** (openpyxl, write-only mode: rows stream to the file): numbers stay numbers,
  dates and date-times are Excel dates (aware ones converted to UTC: Excel has no time
  zones), integers beyond ±(2^53 − 1) are written as text (Excel keeps 15 digits); text
  loses the control characters XML cannot hold (each becomes U+FFFD) and may not be longer
  than Excel's 32,767 characters; a sheet holds at most 1,048,575 rows under its header.
- **parquet** (pyarrow ``ParquetWriter``, a row group per :data:`ROW_GROUP` rows): the
  column types come from the first non-NULL values (int64, float64, decimal128(38, s),
  bool, string, binary, date32, timestamp[us] (UTC when aware), time64[us], duration[us]);
  a column that is NULL in the whole first row group is a string column.
- **jsonl**: one JSON object per line, values as ``sql_query`` records them (Decimal as a
  string, dates ISO 8601, bytes base64).

Formula injection (csv and xlsx): a text value whose first character is ``=``, ``+``,
``-``, ``@``, a tab or a carriage return (or their full-width forms ``＝ ＋ － ＠``) is
written with a leading ``'``, so that a spreadsheet shows it as text instead of running
it. Numbers are never changed (``-5`` stays the number -5), and neither is a text value
that is exactly a number (``"-5"``, ``"+1.5e3"``): a spreadsheet reads it as that number,
which runs nothing.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
import uuid
import zipfile
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, BinaryIO, Protocol

import openpyxl  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from openpyxl.cell.cell import (  # type: ignore[import-untyped]
    ILLEGAL_CHARACTERS_RE,
    WriteOnlyCell,
)
from openpyxl.styles import Font  # type: ignore[import-untyped]

from cadenza.domain.errors import Fatal
from cadenza.steps.base import CsvOptions
from cadenza.steps.builtin.lib.sqlutil import as_text
from cadenza.steps.builtin.sql_query import jsonable

ROW_GROUP = 65_536
XLSX_MAX_ROWS = 1_048_576
XLSX_MAX_TEXT = 32_767
XLSX_MAX_EXACT_INT = 2**53 - 1
FORMULA_STARTS = frozenset("=+-@\t\r＝＋－＠")
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def neutralise(text: str) -> str:
    """``text`` made safe to open in a spreadsheet (see the module docstring)."""
    if text and text[0] in FORMULA_STARTS and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


class Writer(Protocol):
    """Writes rows to a file in one format."""

    def start(self, columns: list[str]) -> None:
        """Begin the file with these column names."""
        ...

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        """Append a chunk of rows (tuples in column order)."""
        ...

    def finish(self) -> None:
        """Complete the file (footer, index...); the caller fsyncs and renames it."""
        ...

    def abort(self) -> None:
        """Release what the writer holds after a failure (the caller removes the file)."""
        ...


def writer_for(fmt: str, fh: BinaryIO, csv_options: CsvOptions, sheet: str = "Sheet1"
               ) -> Writer:
    """The writer of ``fmt`` (csv, xlsx, parquet, json/jsonl) on ``fh``."""
    if fmt == "csv":
        return CsvWriter(fh, csv_options)
    if fmt == "xlsx":
        return XlsxWriter(fh, sheet)
    if fmt == "parquet":
        return ParquetWriter(fh)
    if fmt in ("json", "jsonl"):
        return JsonLinesWriter(fh)
    raise Fatal(f"unknown export format {fmt!r}: expected csv, xlsx, parquet or jsonl")


# -- csv --------------------------------------------------------------------------------

class CsvWriter:
    """CSV in the dialect of ``csv`` options (delimiter, quote, encoding, header, null)."""

    def __init__(self, fh: BinaryIO, options: CsvOptions) -> None:
        self.options = options
        self.text = io.TextIOWrapper(fh, encoding=options.encoding, newline="",
                                     write_through=False)
        self.out = csv.writer(self.text, delimiter=options.delimiter,
                              quotechar=options.quote, lineterminator="\r\n",
                              quoting=csv.QUOTE_MINIMAL)
        self.rows = 0
        self.columns: list[str] = []

    def start(self, columns: list[str]) -> None:
        self.columns = columns
        if self.options.header:
            self._put([[neutralise(c) for c in columns]], header=True)

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        null, by_type, other = self.options.null, _CSV_CELL.get, _csv_cell
        self._put([[null if v is None else by_type(type(v), other)(v) for v in row]
                   for row in rows])

    def _put(self, rows: list[list[str]], header: bool = False) -> None:
        try:
            self.out.writerows(rows)
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start:exc.end] if isinstance(exc.object, str) else "?"
            where = "the header" if header else f"rows {self.rows + 1}-{self.rows + len(rows)}"
            raise Fatal(f"{where}: the character {bad!r} cannot be written in encoding "
                        f"{self.options.encoding!r} (choose csv.encoding = 'utf-8')") from None
        if not header:
            self.rows += len(rows)

    def finish(self) -> None:
        self.text.flush()
        self.text.detach()

    def abort(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.text.detach()  # leaves the file to its owner


def _csv_cell(value: Any) -> str:
    if isinstance(value, str):
        return neutralise(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, timedelta):
        return str(value.total_seconds())
    return neutralise(as_text(value))


def _float_text(value: float) -> str:
    return repr(value)


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _decimal_text(value: Decimal) -> str:
    return format(value, "f") if value.is_finite() else str(value)


def _datetime_text(value: datetime) -> str:
    return value.isoformat(sep=" ")


#: the common types' converters, found by exact type (the hot path of a big export); the
#: same text as :func:`_csv_cell` gives
_CSV_CELL: dict[type, Callable[[Any], str]] = {
    str: neutralise, int: str, float: _float_text, bool: _bool_text, Decimal: _decimal_text,
    datetime: _datetime_text, date: date.isoformat, uuid.UUID: str,
}


# -- xlsx -------------------------------------------------------------------------------

class XlsxWriter:
    """One sheet written by openpyxl in write-only mode (rows go to a temporary XML file as
    they come; the archive is assembled at :meth:`finish`)."""

    def __init__(self, fh: BinaryIO, sheet: str) -> None:
        self.fh = fh
        self.book = openpyxl.Workbook(write_only=True)
        self.sheet = self.book.create_sheet(sheet)
        self.rows = 0
        self.columns: list[str] = []

    def start(self, columns: list[str]) -> None:
        self.columns = columns
        bold = Font(bold=True)
        header = []
        for name in columns:
            cell = WriteOnlyCell(self.sheet, value=_xlsx_text(name, "the header", name))
            cell.font = bold
            header.append(cell)
        self.sheet.append(header)

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        if self.rows + len(rows) >= XLSX_MAX_ROWS:
            raise Fatal(f"an xlsx sheet holds at most {XLSX_MAX_ROWS - 1} rows under its "
                        "header and the query returns more: export to csv or parquet, or "
                        "narrow the query")
        append, cell, columns = self.sheet.append, _xlsx_cell, self.columns
        for offset, row in enumerate(rows, self.rows + 1):
            append([cell(v, offset, columns[i]) for i, v in enumerate(row)])
        self.rows += len(rows)

    def finish(self) -> None:
        save_workbook(self.book, self.fh)

    def abort(self) -> None:
        # end openpyxl's row stream and remove the temporary XML it writes the rows to
        writer = getattr(self.sheet, "_writer", None)
        with contextlib.suppress(Exception):
            self.sheet.close()
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.cleanup()


def save_workbook(book: Any, fh: BinaryIO) -> None:
    """``book.save(fh)``, but closing the archive when writing fails (a full disk), so that
    nothing writes to ``fh`` later (openpyxl leaves the archive to the garbage collector)."""
    from openpyxl.writer.excel import ExcelWriter  # type: ignore[import-untyped]

    archive = zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED, allowZip64=True)
    try:
        ExcelWriter(book, archive).save()
    except BaseException:
        with contextlib.suppress(Exception):
            archive.close()
        raise


def _xlsx_text(text: str, row: int | str, column: str) -> str:
    text = ILLEGAL_CHARACTERS_RE.sub("\ufffd", neutralise(text))
    if len(text) > XLSX_MAX_TEXT:
        where = row if isinstance(row, str) else f"row {row}"
        raise Fatal(f"{where}, column {column!r}: {len(text)} characters, more than the "
                    f"{XLSX_MAX_TEXT} an xlsx cell holds (export to csv, or cut it in the query)")
    return text


def _xlsx_cell(value: Any, row: int, column: str) -> Any:
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, str):
        return _xlsx_text(value, row, column)
    if isinstance(value, int):
        return value if -XLSX_MAX_EXACT_INT <= value <= XLSX_MAX_EXACT_INT else str(value)
    if isinstance(value, Decimal):
        return value if value.is_finite() else str(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, time):
        return value.replace(tzinfo=None)
    if isinstance(value, date | timedelta):
        return value
    return _xlsx_text(as_text(value), row, column)


# -- parquet ----------------------------------------------------------------------------

class ParquetWriter:
    """Parquet through pyarrow's ``ParquetWriter``: one row group per :data:`ROW_GROUP`
    rows; the schema is fixed by the first row group (see the module docstring)."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.columns: list[str] = []
        self.pending: list[tuple[Any, ...]] = []
        self.schema: Any = None
        self.out: Any = None
        self.rows = 0

    def start(self, columns: list[str]) -> None:
        self.columns = columns

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        self.pending.extend(rows)
        while len(self.pending) >= ROW_GROUP:
            group, self.pending = self.pending[:ROW_GROUP], self.pending[ROW_GROUP:]
            self._group(group)

    def finish(self) -> None:
        if self.pending or self.out is None:
            self._group(self.pending)
            self.pending = []
        self.out.close()

    def abort(self) -> None:
        if self.out is not None:
            with contextlib.suppress(Exception):
                self.out.close()

    def _group(self, rows: list[tuple[Any, ...]]) -> None:
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in self.columns]
        if self.schema is None:
            self.schema = pa.schema([pa.field(name, _arrow_type(values)) for name, values
                                     in zip(self.columns, columns, strict=True)])
            self.out = pq.ParquetWriter(self.fh, self.schema)
        arrays = []
        for field, values in zip(self.schema, columns, strict=True):
            try:
                arrays.append(pa.array(_arrow_values(values, field.type), type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
                raise Fatal(f"rows {self.rows + 1}-{self.rows + len(rows)}, column "
                            f"{field.name!r}: cannot write as {field.type} (the type its "
                            f"first values gave): {exc}; cast it in the query") from None
        self.out.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        self.rows += len(rows)


def _arrow_type(values: tuple[Any, ...]) -> Any:
    sample = next((v for v in values if v is not None), None)
    if sample is None:
        return pa.string()
    if isinstance(sample, bool):
        return pa.bool_()
    if isinstance(sample, int):
        return pa.int64()
    if isinstance(sample, float):
        return pa.float64()
    if isinstance(sample, Decimal):
        scale = max((-int(v.as_tuple().exponent) for v in values
                     if isinstance(v, Decimal) and v.is_finite()), default=0)
        return pa.decimal128(38, max(0, min(scale, 38)))
    if isinstance(sample, datetime):
        return pa.timestamp("us", tz="UTC" if sample.tzinfo else None)
    if isinstance(sample, date):
        return pa.date32()
    if isinstance(sample, time):
        return pa.time64("us")
    if isinstance(sample, timedelta):
        return pa.duration("us")
    if isinstance(sample, bytes | bytearray | memoryview):
        return pa.binary()
    return pa.string()


def _arrow_values(values: tuple[Any, ...], arrow_type: Any) -> list[Any] | tuple[Any, ...]:
    if pa.types.is_string(arrow_type):
        return [None if v is None else v if isinstance(v, str) else as_text(v)
                for v in values]
    if pa.types.is_binary(arrow_type):
        return [None if v is None else bytes(v) for v in values]
    if pa.types.is_time(arrow_type):
        return [v.replace(tzinfo=None) if isinstance(v, time) else v for v in values]
    return values


# -- JSON lines -------------------------------------------------------------------------

class JsonLinesWriter:
    """One JSON object per line (UTF-8), keys in column order."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.columns: list[str] = []

    def start(self, columns: list[str]) -> None:
        self.columns = columns

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        columns, dumps, by_type = self.columns, json.dumps, _JSON_VALUE.get
        lines = [dumps(dict(zip(columns, [by_type(type(v), _json)(v) for v in row],
                                strict=True)), ensure_ascii=False, allow_nan=False)
                 for row in rows]
        if lines:
            self.fh.write(("\n".join(lines) + "\n").encode("utf-8"))

    def finish(self) -> None:
        self.fh.flush()

    def abort(self) -> None:
        return None  # nothing held beyond the file


def _json(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return jsonable(value)


def _same(value: Any) -> Any:
    return value


#: the common types' JSON values, found by exact type (the same as :func:`_json` gives)
_JSON_VALUE: dict[type, Callable[[Any], Any]] = {
    type(None): _same, str: _same, int: _same, bool: _same, Decimal: str,
    datetime: datetime.isoformat, date: date.isoformat,
}
