"""Readers of ``file_load``: csv, xlsx, parquet and JSON lines, each yielding bounded batches.

A reader turns an open binary file into a :class:`Source`: column names and a stream of
:class:`Batch` (column-major Python values, at most about :data:`BATCH_ROWS` rows or one
512 KiB CSV block each), so memory stays bounded whatever the file's size.

- **csv**: parsed by pyarrow's streaming reader (every column read as text; empty or
  ``csv.null`` fields become NULL). On a parse error the file is read again with Python's
  ``csv`` module (strict) to name the line, e.g. a quote that is never closed.
- **xlsx**: the first sheet, with openpyxl in read-only mode, after a zip-bomb check of the
  archive's declared sizes; openpyxl parses the XML with defusedxml (refused otherwise).
  The first non-empty row is the header; a date-time at exactly midnight reads as a date.
- **parquet**: pyarrow ``iter_batches`` (one row group in memory at a time).
- **json** (JSON lines): one object per line; the keys of the first batch are the columns.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from itertools import islice
from typing import Any, BinaryIO

import openpyxl  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.csv as pacsv  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from defusedxml import DefusedXmlException  # type: ignore[import-untyped]

from cadenza.domain.errors import Fatal
from cadenza.steps.base import CsvOptions
from cadenza.steps.builtin.lib import files

BATCH_ROWS = 10_000
CSV_BLOCK = 1 << 19
MAX_COLUMNS = 1_600
MAX_JSON_LINE = 16 << 20

_INT = r"-?(0|[1-9][0-9]{0,37})"
_FLOAT = r"-?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]{1,3})?"
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_TIMESTAMP = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
_WIDER = {frozenset({"int", "float"}): "float", frozenset({"int", "decimal"}): "decimal",
          frozenset({"float", "decimal"}): "float", frozenset({"date", "timestamp"}): "timestamp",
          frozenset({"date", "timestamptz"}): "timestamptz"}
_INT64 = 2**63


class Batch:
    """Rows of one file: ``arrow`` (a RecordBatch, when the reader has one) and/or the
    same values as Python lists, column by column (:attr:`columns`, made from ``arrow``
    on first use); ``typed`` is False when every value is ``str`` or None."""

    __slots__ = ("_columns", "arrow", "size", "typed")

    def __init__(self, size: int, columns: list[list[Any]] | None = None, arrow: Any = None,
                 typed: bool = True) -> None:
        self.size, self._columns, self.arrow, self.typed = size, columns, arrow, typed

    @property
    def columns(self) -> list[list[Any]]:
        if self._columns is None:
            self._columns = [c.to_pylist() for c in self.arrow.columns]
        return self._columns


@dataclass
class Source:
    """A file opened for reading: its column names, the categories its own schema gives
    (parquet; None elsewhere), and its batches."""

    names: list[str]
    batches: Iterator[Batch]
    hints: list[str | None] = field(default_factory=list)


def open_source(fmt: str, fh: BinaryIO, display: str, options: CsvOptions) -> Source:
    """The reader for ``fmt`` ("csv", "xlsx", "parquet" or "json") over ``fh``."""
    source = _csv(fh, display, options) if fmt == "csv" else {
        "xlsx": _xlsx, "parquet": _parquet, "json": _jsonl}[fmt](fh, display)
    if len(source.names) > MAX_COLUMNS:
        raise Fatal(f"{display}: {len(source.names)} columns; at most {MAX_COLUMNS} are loaded")
    return source


# -- type inference ---------------------------------------------------------------------

def infer(values: list[Any], typed: bool = True) -> str:
    """The category of a column from its values (None ignored). Text (``typed`` False) is
    int, float, date or timestamp when every value has that form (:func:`infer_text`);
    typed values go by their Python type. Mixed kinds widen (int+float → float,
    date+timestamp → timestamp) or fall back to text."""
    if not typed:
        return infer_text(pa.array(values, pa.string()))
    kinds = {_kind_of_value(v) for v in values if v is not None}
    if "text" in kinds:
        return "text"
    while len(kinds) > 1:
        first, second = sorted(kinds)[:2]
        wider = _WIDER.get(frozenset({first, second}))
        if wider is None:
            return "text"
        kinds = (kinds - {first, second}) | {wider}
    return kinds.pop() if kinds else "text"


def infer_batch(batch: Batch, index: int) -> str:
    """:func:`infer` for one column of a batch (text read as Arrow stays in Arrow)."""
    if batch.typed or batch.arrow is None:
        return infer(batch.columns[index], batch.typed)
    return infer_text(batch.arrow.column(index))


def infer_text(column: Any) -> str:
    """The category of an Arrow text column, checked vectorised: every value must match
    the pattern (no leading zeros, no NaN) and convert (no 30 February)."""
    values = pc.drop_null(column)
    if len(values) == 0:
        return "text"

    def every(pattern: str) -> bool:
        return bool(pc.all(pc.match_substring_regex(values, f"^(?:{pattern})$")).as_py())

    def converts(arrow_type: Any) -> bool:
        try:
            pc.cast(values, arrow_type)
        except pa.ArrowException:
            return False
        return True

    if every(_INT):
        return "int" if converts(pa.int64()) else "decimal"
    if every(_FLOAT):  # ints are floats too
        return "float"
    if every(_DATE):
        return "date" if converts(pa.date32()) else "text"
    if every(f"{_DATE}|{_TIMESTAMP}"):
        return "timestamp" if converts(pa.timestamp("us")) else "text"
    return "text"


def _kind_of_value(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if -_INT64 <= value < _INT64 else "decimal"
    if isinstance(value, float):
        return "float"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, datetime):
        return "timestamptz" if value.tzinfo is not None else "timestamp"
    if isinstance(value, date):
        return "date"
    if isinstance(value, bytes | bytearray | memoryview):
        return "bytes"
    return "text"


def arrow_category(arrow_type: Any) -> str:
    """The category of an Arrow type (parquet columns)."""
    t = pa.types
    if t.is_dictionary(arrow_type):
        return arrow_category(arrow_type.value_type)
    if t.is_timestamp(arrow_type):
        return "timestamptz" if arrow_type.tz else "timestamp"
    checks = [(t.is_boolean, "bool"), (t.is_uint64, "decimal"), (t.is_integer, "int"),
              (t.is_floating, "float"), (t.is_decimal, "decimal"), (t.is_date, "date"),
              (t.is_binary, "bytes"), (t.is_large_binary, "bytes")]
    return next((category for check, category in checks if check(arrow_type)), "text")


# -- csv --------------------------------------------------------------------------------

def _csv(fh: BinaryIO, display: str, opts: CsvOptions) -> Source:
    utf8 = codecs.lookup(opts.encoding).name == "utf-8"
    encoding = "utf-8-sig" if utf8 else opts.encoding
    first = _first_record(fh, encoding, opts, display)
    if first is None:
        return Source([], iter(()))
    names = first if opts.header else [f"column_{i}" for i in range(1, len(first) + 1)]
    if files.count_char(fh, opts.quote, opts.encoding) % 2:
        # a quote left open (or a stray one): pyarrow's parser would read on leniently,
        # so the strict reader finds the line (and lets a legal stray quote through)
        problem = _locate(fh, encoding, opts, display, len(names))
        if problem is not None:
            raise problem
    fh.seek(0)
    generated = [f"c{i}" for i in range(len(names))]

    def batches() -> Iterator[Batch]:
        try:
            reader = pacsv.open_csv(
                fh,
                read_options=pacsv.ReadOptions(
                    column_names=generated, skip_rows_after_names=1 if opts.header else 0,
                    block_size=CSV_BLOCK, encoding="utf8" if utf8 else opts.encoding),
                parse_options=pacsv.ParseOptions(
                    delimiter=opts.delimiter, quote_char=opts.quote, double_quote=True,
                    newlines_in_values=True, ignore_empty_lines=True),
                convert_options=pacsv.ConvertOptions(
                    column_types={g: pa.string() for g in generated}, null_values=[opts.null],
                    strings_can_be_null=True, quoted_strings_can_be_null=True))
            for rb in reader:
                yield Batch(rb.num_rows, arrow=rb, typed=False)
        except (pa.ArrowException, UnicodeError) as exc:
            problem = _locate(fh, encoding, opts, display, len(names))
            if problem is None and "straddl" in str(exc):  # a row over two blocks
                problem = Fatal(f"{display}: a row is longer than about {_ROW_LIMIT}, the "
                                "longest a CSV row may be")
            raise problem or Fatal(f"{display}: cannot read the CSV file: "
                                   f"{str(exc).splitlines()[0]}") from None

    return Source(names, batches(), [None] * len(names))


def _reader(text: io.TextIOWrapper, opts: CsvOptions) -> Any:
    return csv.reader(text, delimiter=opts.delimiter, quotechar=opts.quote,
                      doublequote=True, strict=True)


def _first_record(fh: BinaryIO, encoding: str, opts: CsvOptions,
                  display: str) -> list[str] | None:
    text = io.TextIOWrapper(fh, encoding=encoding, newline="")
    try:
        return next((record for record in _reader(text, opts) if record), None)
    except UnicodeError:
        line = files.undecodable_line(fh, encoding)
        raise Fatal(f"{display}: line {line}: not valid {opts.encoding} text") from None
    except csv.Error as exc:
        too_long = _too_long(fh, display, opts, 1) if _FIELD_LIMIT in str(exc) else None
        if too_long is not None:
            raise too_long from None
        raise Fatal(f"{display}: line 1: cannot read the first row ({exc})") from None
    finally:
        text.detach()


_FIELD_LIMIT = "field larger than field limit"
"""The start of the message of Python's ``csv`` module for a field past
``csv.field_size_limit()``."""


def _too_long(fh: BinaryIO, display: str, opts: CsvOptions, line: int) -> Fatal | None:
    """The error for a field longer than the strict reader takes, starting on ``line``
    (pyarrow reads such a field in a row of up to about two blocks; the strict reader reads
    the first row, and every row when pyarrow could not). None when the file's quotes do
    not pair up: a quote left open makes the rest of the file one field, and the caller's
    message asks about that quote."""
    if files.count_char(fh, opts.quote, opts.encoding) % 2:
        return None
    limit = csv.field_size_limit()
    return Fatal(f"{display}: line {line}: over-long field: more than {limit:,} characters "
                 f"(a row is read up to about {_ROW_LIMIT}, the fields of the first row up "
                 f"to {limit:,} characters)")


_ROW_LIMIT = f"{2 * CSV_BLOCK >> 20} MiB"
"""The longest row pyarrow's reader takes: a row may straddle one block boundary."""


def _locate(fh: BinaryIO, encoding: str, opts: CsvOptions, display: str,
            width: int) -> Fatal | None:
    """Read the file with Python's strict csv module to say which line is wrong (None when
    it finds nothing wrong)."""
    fh.seek(0)
    text = io.TextIOWrapper(fh, encoding=encoding, newline="")
    reader = _reader(text, opts)
    start = 1
    try:
        while True:
            try:
                record = next(reader)
            except StopIteration:
                return None
            except csv.Error as exc:
                too_long = (_too_long(fh, display, opts, start) if _FIELD_LIMIT in str(exc)
                            else None)
                if too_long is not None:
                    return too_long
                return Fatal(f"{display}: line {start}: malformed CSV ({exc}); is a quote "
                             f"opened on line {start} never closed?")
            if record and len(record) != width:
                return Fatal(f"{display}: line {start}: expected {width} fields, found "
                             f"{len(record)} (an unbalanced quote or a stray delimiter?)")
            start = reader.line_num + 1
    except UnicodeError:
        pass
    finally:
        text.detach()
    line = files.undecodable_line(fh, encoding)
    return Fatal(f"{display}: line {line}: not valid {opts.encoding} text")


# -- xlsx -------------------------------------------------------------------------------

def _xlsx(fh: BinaryIO, display: str) -> Source:
    files.check_zip(fh, display)
    if not openpyxl.DEFUSEDXML:
        raise Fatal("xlsx files are read only with defusedxml (OPENPYXL_DEFUSEDXML is off)")
    try:
        book = openpyxl.load_workbook(fh, read_only=True, data_only=True, keep_links=False)
        sheet = book.worksheets[0]
        sheet.reset_dimensions()
        rows = sheet.iter_rows(values_only=True)
        header_row, header = 0, None
        for header_row, values in enumerate(rows, 1):  # noqa: B007 (used after the loop)
            if any(v is not None for v in values):
                header = list(values)
                break
    except Exception as exc:  # openpyxl and defusedxml raise many types for bad files
        raise Fatal(f"{display}: not a readable xlsx file ({_why(exc)})") from None
    if header is None:
        book.close()
        return Source([], iter(()))
    while header and header[-1] is None:
        header.pop()
    names = [f"column_{i}" if v is None else str(v).strip() for i, v in enumerate(header, 1)]
    width = len(names)

    def batches() -> Iterator[Batch]:
        chunk: list[list[Any]] = []
        row_no = header_row
        try:
            for row_no, values in enumerate(rows, header_row + 1):
                if all(v is None for v in values):
                    continue
                if any(v is not None for v in values[width:]):
                    raise Fatal(f"{display}: row {row_no} has values beyond the header's "
                                f"{width} columns")
                chunk.append([_cell(v) for v in values[:width]] + [None] * (width - len(values)))
                if len(chunk) == BATCH_ROWS:
                    yield Batch(len(chunk), [list(c) for c in zip(*chunk, strict=True)])
                    chunk = []
            if chunk:
                yield Batch(len(chunk), [list(c) for c in zip(*chunk, strict=True)])
        except Exception as exc:
            if isinstance(exc, Fatal):
                raise
            raise Fatal(f"{display}: row {row_no}: cannot read the sheet ({_why(exc)})") from None
        finally:
            book.close()

    return Source(names, batches(), [None] * width)


def _why(exc: BaseException) -> str:
    """The reason of an xlsx failure, naming refused XML entities or DTDs (XXE, bombs)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DefusedXmlException):
            return f"refused: it declares XML entities or a DTD ({seen!r})"
        seen = seen.__cause__ or seen.__context__
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _cell(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None and value.time() == time(0):
        return value.date()
    return value


# -- parquet ----------------------------------------------------------------------------

def _parquet(fh: BinaryIO, display: str) -> Source:
    try:
        parquet = pq.ParquetFile(fh)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise Fatal(f"{display}: not a readable Parquet file ({exc})") from None

    def batches() -> Iterator[Batch]:
        line = 1
        try:
            for rb in parquet.iter_batches(batch_size=BATCH_ROWS):
                yield Batch(rb.num_rows, arrow=rb)
                line += rb.num_rows
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise Fatal(f"{display}: rows from {line}: cannot read ({exc})") from None

    hints: list[str | None] = [arrow_category(f.type) for f in parquet.schema_arrow]
    return Source([str(n) for n in parquet.schema_arrow.names], batches(), hints)


# -- JSON lines -------------------------------------------------------------------------

def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")

def _json_lines(fh: BinaryIO, display: str) -> Iterator[tuple[int, dict[str, Any]]]:
    number = 0
    while raw := fh.readline(MAX_JSON_LINE + 1):
        number += 1
        if len(raw) > MAX_JSON_LINE:
            raise Fatal(f"{display}: line {number} is longer than {MAX_JSON_LINE} bytes")
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw, parse_constant=_not_a_number)
        except ValueError as exc:
            raise Fatal(f"{display}: line {number}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise Fatal(f"{display}: line {number}: expected a JSON object, got "
                        f"{type(obj).__name__}")
        yield number, obj


def _jsonl(fh: BinaryIO, display: str) -> Source:
    lines = _json_lines(fh, display)
    first = list(islice(lines, BATCH_ROWS))
    names: dict[str, None] = {}
    for _, obj in first:
        names.update(dict.fromkeys(obj))
    known = set(names)

    def batches() -> Iterator[Batch]:
        chunk = first
        while chunk:
            for number, obj in chunk:
                extra = obj.keys() - known
                if extra:
                    raise Fatal(f"{display}: line {number}: key {sorted(extra)[0]!r} is not "
                                f"among the columns of the first lines ({', '.join(names)})")
            yield Batch(len(chunk), [[obj.get(k) for _, obj in chunk] for k in names])
            chunk = list(islice(lines, BATCH_ROWS))

    return Source(list(names), batches(), [None] * len(names))
