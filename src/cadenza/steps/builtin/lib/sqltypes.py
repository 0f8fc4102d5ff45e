"""Column types across SQLite, PostgreSQL and MariaDB, for ``sql_copy``.

A source column is described once as a :class:`Col` (name, kind, precision, scale,
length), read from the table's reflection (a ``table`` source) or from the cursor (a
``query`` source: PostgreSQL type OIDs, MariaDB field types, SQLite values of the first
rows). Values are read into one Python form per kind (:func:`reader`), optionally coerced
the JD Edwards way (:func:`jde_columns`), and written with the target's own spelling
(:func:`ddl` for ``CREATE TABLE``, :func:`writer` for the values). The table of types is
in docs/sql_copy.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from decimal import Decimal, InvalidOperation
from typing import Any

import sqlalchemy as sa

from cadenza.compat import mysql_columns
from cadenza.domain.errors import Fatal

#: the kinds of values a column may hold (one Python form each)
KINDS = ("int", "decimal", "float", "bool", "date", "timestamp", "timestamptz", "time",
         "bytes", "text")
MYSQL_MAX_PRECISION, MYSQL_MAX_SCALE = 65, 30


@dataclass(frozen=True)
class Col:
    """One column: its name, kind, and for decimals precision/scale (None: unbounded),
    for text its length (None: unbounded)."""

    name: str
    kind: str
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    julian: bool = False  # a JD Edwards CYYDDD date held as a number (read as a date)


# -- describing a source -----------------------------------------------------------------------

def of_sqlalchemy(name: str, sql_type: Any) -> Col:
    """The :class:`Col` of a reflected SQLAlchemy column type."""
    type_name = type(sql_type).__name__.upper()
    if isinstance(sql_type, sa.Boolean) or (
            type_name == "TINYINT" and getattr(sql_type, "display_width", None) == 1):
        return Col(name, "bool")
    if isinstance(sql_type, sa.Integer):
        return Col(name, "int")
    if isinstance(sql_type, sa.Float) or type_name in ("REAL", "DOUBLE", "DOUBLE_PRECISION"):
        return Col(name, "float")
    if isinstance(sql_type, sa.Numeric):
        return Col(name, "decimal", sql_type.precision, sql_type.scale)
    if isinstance(sql_type, sa.DateTime):
        # MariaDB TIMESTAMP is stored in UTC and read in the session's zone (set to UTC)
        zoned = bool(getattr(sql_type, "timezone", False)) or (type_name == "TIMESTAMP" and (
            type(sql_type).__module__.startswith("sqlalchemy.dialects.mysql")))
        return Col(name, "timestamptz" if zoned else "timestamp")
    if isinstance(sql_type, sa.Date):
        return Col(name, "date")
    if isinstance(sql_type, sa.Time):
        return Col(name, "time")
    if isinstance(sql_type, sa.LargeBinary | sa.types._Binary):
        return Col(name, "bytes")
    if isinstance(sql_type, sa.String) and not isinstance(sql_type, sa.Enum):
        return Col(name, "text", length=sql_type.length)
    return Col(name, "text")


_SQLITE_DECL = [
    (re.compile(r"BOOL", re.I), "bool"),
    (re.compile(r"TIMESTAMPTZ|WITH\s+TIME\s+ZONE", re.I), "timestamptz"),
    (re.compile(r"TIMESTAMP|DATETIME", re.I), "timestamp"),
    (re.compile(r"DATE", re.I), "date"),
    (re.compile(r"TIME", re.I), "time"),
    (re.compile(r"INT", re.I), "int"),
    (re.compile(r"DEC|NUM", re.I), "decimal"),  # DECIMAL_TEXT too: what sql_copy makes
    (re.compile(r"CHAR|CLOB|TEXT", re.I), "text"),
    (re.compile(r"BLOB|BINARY", re.I), "bytes"),
    (re.compile(r"REAL|FLOA|DOUB", re.I), "float"),
]
_PRECISION = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def of_sqlite_declared(name: str, declared: str) -> Col:
    """The :class:`Col` of a SQLite column from its declared type (SQLite's affinity rules,
    refined: dates, times and booleans are told apart by name)."""
    for pattern, kind in _SQLITE_DECL:
        if pattern.search(declared):
            sizes = _PRECISION.search(declared)
            if kind == "decimal":
                if sizes:
                    return Col(name, kind, int(sizes[1]), int(sizes[2] or 0))
                return Col(name, kind)
            if kind == "text" and sizes:
                return Col(name, kind, length=int(sizes[1]))
            return Col(name, kind)
    return Col(name, "text")  # SQLite: no declared type, or one it reads as text


def table_columns(conn: sa.Connection, table: str, dialect: str) -> list[Col]:
    """The columns of an existing table, in order."""
    schema, _, name = table.rpartition(".")
    if dialect == "sqlite":
        pragma = f'PRAGMA "{schema}".table_info("{name}")' if schema else (
            f'PRAGMA table_info("{name}")')
        return [of_sqlite_declared(str(r[1]), str(r[2] or ""))
                for r in conn.exec_driver_sql(pragma)]
    cols = sa.inspect(conn).get_columns(name, schema=schema or None)
    return [of_sqlalchemy(str(c["name"]), c["type"]) for c in cols]


_PG_KINDS = {"int2": "int", "int4": "int", "int8": "int", "oid": "int", "numeric": "decimal",
             "float4": "float", "float8": "float", "bool": "bool", "date": "date",
             "timestamp": "timestamp", "timestamptz": "timestamptz", "time": "time",
             "bytea": "bytes"}
#: MySQL field types (pymysql.constants.FIELD_TYPE)
_MY_KINDS = {0: "decimal", 246: "decimal", 1: "int", 2: "int", 3: "int", 8: "int", 9: "int",
             13: "int", 4: "float", 5: "float", 10: "date", 14: "date", 12: "timestamp",
             7: "timestamptz", 11: "time", 249: "bytes", 250: "bytes", 251: "bytes",
             252: "bytes"}
_MY_BINARY_CHARSET = 63


def query_columns(cursor: Any, dialect: str, first: list[tuple[Any, ...]]) -> list[Col]:
    """The columns of a query being read by ``cursor`` (PostgreSQL: type OIDs; MariaDB:
    field types; SQLite: the first rows' values, text when all are NULL)."""
    described = cursor.description or []
    mysql = mysql_columns(cursor) if dialect == "mysql" else []
    cols = []
    for i, d in enumerate(described):
        name = str(d[0])
        if dialect == "postgresql":
            info = cursor.connection.adapters.types.get(d[1])
            kind = _PG_KINDS.get(info.name if info else "", "text")
            if kind == "decimal":
                cols.append(Col(name, kind, d.precision, d.scale))
            else:
                cols.append(Col(name, kind, length=d.internal_size if kind == "text" and
                                d.internal_size and d.internal_size > 0 else None))
        elif dialect == "mysql":
            field = mysql[i]
            kind = _MY_KINDS.get(d[1], "text")
            unsigned = bool(field.flags & 32)
            if d[1] == 1 and field.length == 1:
                kind = "bool"
            if kind == "bytes" and field.charsetnr != _MY_BINARY_CHARSET:
                kind = "text"
            if d[1] in (253, 254) and field.charsetnr == _MY_BINARY_CHARSET:
                kind = "bytes"
            if kind == "decimal":
                scale = int(d[5] or 0)
                precision = int(d[4] or 0) - (0 if unsigned else 1) - (1 if scale else 0)
                cols.append(Col(name, kind, max(precision, 1), scale))
            else:
                cols.append(Col(name, kind, length=d[3] if kind == "text" and d[3] and
                                d[3] <= 255 else None))
        else:
            cols.append(Col(name, _infer([row[i] for row in first])))
    return cols


def _infer(values: list[Any]) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "text"
    if all(isinstance(v, int) for v in present):
        return "int"
    if all(isinstance(v, int | float) for v in present):
        return "float"
    if all(isinstance(v, bytes) for v in present):
        return "bytes"
    return "text"


# -- JD Edwards ---------------------------------------------------------------------------------

#: a JDE data item that holds a Julian date ends with J (TRDJ, DGJ, UPMJ, DRQJ ...): the column
#: is its two-letter table prefix plus the item
_JDE_DATE = re.compile(r"^[a-z0-9]{2}[a-z0-9]*j$")


def jde_columns(cols: list[Col], decimal_mode: str) -> list[Col]:
    """The target columns of ``type_coercion = "jde"``: names lowercased; Decimal(p,0) →
    bigint, or a Julian date when its name ends with J (JDE date items); Decimal(p,s>0) →
    bigint (``truncate``) or numeric(p,s) (``preserve``)."""
    out = []
    for col in cols:
        name = col.name.strip().lower()
        if col.kind in ("decimal", "int") and not col.scale and _JDE_DATE.match(name) and (
                len(name) >= 4):
            out.append(Col(name, "date", julian=True))
        elif col.kind == "decimal" and not col.scale:
            out.append(Col(name, "int"))
        elif col.kind == "decimal" and decimal_mode == "truncate":
            out.append(Col(name, "int"))
        else:
            out.append(replace(col, name=name))
    return out


def julian(value: Any, column: str) -> date | None:
    """A JDE Julian date CYYDDD (C: centuries after 1900, YY year, DDD day of the year) as a
    date; 0 (JDE's blank date) as NULL. :class:`Fatal`, naming the column, when not one."""
    if value is None:
        return None
    try:
        number = int(Decimal(str(value)).to_integral_exact())
    except (InvalidOperation, ValueError):
        raise Fatal(f"column {column!r}: {value!r} is not a JDE Julian date (CYYDDD)") from None
    if number == 0:
        return None
    year, day = 1900 + number // 1000, number % 1000
    start = date(year, 1, 1)
    if number < 0 or not 1 <= day <= (date(year + 1, 1, 1) - start).days:
        raise Fatal(f"column {column!r}: {value} is not a JDE Julian date (CYYDDD: "
                    f"day {day:03d} of {year} does not exist)")
    return start + timedelta(days=day - 1)


# -- reading values ----------------------------------------------------------------------------

Convert = Callable[[Any], Any]


def reader(dialect: str, src: Col, dst: Col, trim: bool, jde: bool) -> Convert | None:
    """How a value of ``src`` read from ``dialect`` becomes the Python form of ``dst``'s
    kind (None: as it is)."""
    steps: list[Convert] = []
    base = _from_source(dialect, src.kind)
    if base is not None:
        steps.append(base)
    if dst.julian:
        column = src.name
        steps.append(lambda v: julian(v, column))
    elif dst.kind == "int" and src.kind == "decimal":
        steps.append(lambda v: None if v is None else int(v))  # int() truncates toward zero
    if dst.kind == "text" and (trim or jde):
        strip_nul = jde

        def text(v: Any) -> Any:
            if isinstance(v, str):
                if strip_nul:
                    v = v.replace("\x00", "")
                if trim:
                    v = v.rstrip(" ")
            return v

        steps.append(text)
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]

    def chain(v: Any) -> Any:
        for fn in steps:
            v = fn(v)
        return v

    return chain


def _from_source(dialect: str, kind: str) -> Convert | None:
    if dialect == "postgresql":
        if kind == "text":
            return _pg_text
        return None
    if dialect == "mysql":
        return {"bool": _to_bool, "timestamptz": _mysql_utc, "time": _to_time,
                "text": _any_text}.get(kind)
    return {"bool": _to_bool, "int": _to_int, "float": _to_float, "decimal": _to_decimal,
            "date": _to_date, "timestamp": _to_datetime, "timestamptz": _to_aware,
            "time": _to_time, "text": _any_text, "bytes": _to_bytes}.get(kind)


def _pg_text(v: Any) -> Any:
    return v if v is None or isinstance(v, str) else _text(v)


def _any_text(v: Any) -> Any:
    return v if v is None or isinstance(v, str) else _text(v)


def _text(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, ensure_ascii=False, default=str)
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, date | clock_time):
        return v.isoformat()
    return str(v)


def _to_bool(v: Any) -> Any:
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str):
        return v.strip().lower() in ("1", "t", "true", "y", "yes", "on")
    return bool(v)


def _to_int(v: Any) -> Any:
    return v if v is None or isinstance(v, int) else int(Decimal(str(v)))


def _to_float(v: Any) -> Any:
    return v if v is None or isinstance(v, float) else float(v)


def _to_decimal(v: Any) -> Any:
    return v if v is None or isinstance(v, Decimal) else Decimal(str(v))


def _to_date(v: Any) -> Any:
    if v is None or type(v) is date:
        return v
    return date.fromisoformat(str(v)[:10])


def _to_datetime(v: Any) -> Any:
    if v is None or isinstance(v, datetime):
        return v
    return datetime.fromisoformat(str(v))


def _to_aware(v: Any) -> Any:
    v = _to_datetime(v)
    return v if v is None or v.tzinfo is not None else v.replace(tzinfo=UTC)


def _mysql_utc(v: Any) -> Any:
    # the source session's time_zone is UTC: a TIMESTAMP is read as UTC wall time
    return v.replace(tzinfo=UTC) if isinstance(v, datetime) else v


def _to_time(v: Any) -> Any:
    if v is None or isinstance(v, clock_time):
        return v
    if isinstance(v, timedelta):  # PyMySQL reads TIME as a duration
        return (datetime.min + v).time()
    return clock_time.fromisoformat(str(v))


def _to_bytes(v: Any) -> Any:
    return v if v is None or isinstance(v, bytes) else str(v).encode()


# -- writing values -----------------------------------------------------------------------------

def writer(dialect: str, col: Col) -> Convert | None:
    """How a value of ``col``'s Python form is passed to the target's driver (None: as it
    is): PostgreSQL text without NUL (its text type cannot hold it); MariaDB aware
    date-times in UTC (DATETIME has no zone); SQLite dates, times and decimals as ISO text."""
    if dialect == "postgresql":
        return _no_nul if col.kind == "text" else None
    if dialect == "mysql":
        if col.kind == "timestamptz":
            return lambda v: v.astimezone(UTC).replace(tzinfo=None) if isinstance(
                v, datetime) and v.tzinfo else v
        return None
    if col.kind in ("date", "time", "decimal", "timestamp", "timestamptz"):
        return lambda v: None if v is None else _text(v)
    return None


def _no_nul(v: Any) -> Any:
    return v.replace("\x00", "") if isinstance(v, str) and "\x00" in v else v


def ddl(dialect: str, col: Col, key: bool = False) -> str:
    """The column type of ``col`` on ``dialect`` (see the type table in docs/sql_copy.md)."""
    kind = col.kind
    if kind == "decimal":
        p, s = col.precision, col.scale
        if dialect == "mysql":
            if not p or p > MYSQL_MAX_PRECISION or (s or 0) > MYSQL_MAX_SCALE:
                return f"DECIMAL({MYSQL_MAX_PRECISION},{MYSQL_MAX_SCALE})"
            return f"DECIMAL({p},{s or 0})"
        if dialect == "sqlite":
            # TEXT affinity (the name holds "TEXT"): NUMERIC affinity would store
            # 18-digit decimals as 8-byte floats, losing digits
            return f"DECIMAL_TEXT({p},{s or 0})" if p else "DECIMAL_TEXT"
        return f"NUMERIC({p},{s or 0})" if p else "NUMERIC"
    if kind == "text":
        n = col.length
        if dialect == "mysql":
            if key:
                return f"VARCHAR({min(n or 255, 255)})"
            return f"VARCHAR({n})" if n and n <= 255 else "LONGTEXT"
        if dialect == "postgresql":
            return f"VARCHAR({n})" if n else "TEXT"
        return "TEXT"
    return _DDL[dialect][kind]


_DDL = {
    "postgresql": {"int": "BIGINT", "float": "DOUBLE PRECISION", "bool": "BOOLEAN",
                   "date": "DATE", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ",
                   "time": "TIME", "bytes": "BYTEA"},
    "mysql": {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "date": "DATE",
              "timestamp": "DATETIME(6)", "timestamptz": "DATETIME(6)", "time": "TIME(6)",
              "bytes": "LONGBLOB"},
    "sqlite": {"int": "INTEGER", "float": "REAL", "bool": "BOOLEAN", "date": "DATE",
               "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ", "time": "TIME",
               "bytes": "BLOB"},
}
