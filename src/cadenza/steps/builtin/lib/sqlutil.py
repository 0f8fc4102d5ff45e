"""SQL helpers shared by the SQL steps: one transaction with the step's time limit, driver
errors translated into the error classes (at this one place; docs/retries.md), identifier quoting,
column types per dialect, table creation, copy of a table's shape, and the atomic swap.

Dialects are named by :func:`kind`: ``"sqlite"``, ``"postgresql"`` or ``"mysql"`` (MariaDB
and MySQL through PyMySQL). Bulk inserts live in :mod:`cadenza.steps.builtin.file_load`, with
the values adapted here (:func:`adapter`).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from datetime import time as clock_time
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from cadenza.clock import Clock, SystemClock
from cadenza.domain.errors import Fatal, Retryable, StepError
from cadenza.steps.runtime import StepContext, clock_of

#: SQLSTATE classes / codes (PostgreSQL) that a later attempt may get past
_PG_RETRY_CLASSES = ("08", "40", "53", "57")
_PG_RETRY_CODES = {"55P03", "55006", "XX000"}
#: MySQL/MariaDB error numbers that a later attempt may get past
_MY_RETRY = {0, 1205, 1213, 1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055, 1317}
_MY_TIMEOUT = {1969, 3024}
#: SQLite primary result codes that a later attempt may get past
_LITE_RETRY = {5, 6, 10, 13, 15}  # BUSY, LOCKED, IOERR, FULL, PROTOCOL
_LITE_INTERRUPT = 9
#: refused credentials or a database that is not there: no later attempt gets past them
_PG_ACCESS = {"28000", "28P01", "3D000"}  # authorization, password, no such database
_MY_ACCESS = {1044, 1045, 1049, 1698, 1251}  # db access, user access, no db, socket, protocol
_LITE_ACCESS = {3, 14, 23}  # PERM, CANTOPEN, AUTH
#: libpq's messages for a refused connection (a failed connect carries no SQLSTATE)
_PG_ACCESS_TEXT = re.compile(
    r'FATAL:\s+(role "[^"]*" does not exist|password authentication failed|'
    r'no pg_hba\.conf entry|pg_hba\.conf rejects|role "[^"]*" is not permitted to log in|'
    r'database "[^"]*" does not exist|[A-Za-z]+ authentication failed)|'
    r'fe_sendauth: no password supplied|'
    r'server requested [A-Za-z0-9-]+ authentication|SCRAM authentication requires')
_ACCESS_HINT = " (access refused: check the connection's user, password and database)"
_FILE_HINT = " (access refused: check the connection's path and the file's permissions)"
_READ_ONLY_HINT = (" (the database accepts reads only: a standby, a server started read-only, "
                   "or default_transaction_read_only set on the role or the database; point "
                   "the connection at the primary)")
#: MariaDB/MySQL: "running with the --read-only option" (1290 names the option that
#: prevents the statement), a write in a read-only transaction (1792)
_MY_OPTION_PREVENTS, _MY_READ_ONLY_TRANSACTION = 1290, 1792
#: MariaDB/MySQL 1366 on a 4-byte UTF-8 sequence (lead byte F0-F4): a utf8mb3 column
_MY_4BYTE = re.compile(r"Incorrect string value: '\\x(F[0-4])", re.IGNORECASE)
_MB3_HINT = (" (a character of 4 bytes in UTF-8, such as an emoji, does not fit a utf8mb3 "
             "column: convert the table with ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4)")

#: column types by value category, per dialect (see docs/steps.md)
CATEGORIES = ("int", "float", "decimal", "bool", "date", "timestamp", "timestamptz", "bytes",
              "text")
TYPES = {dialect: dict(zip(CATEGORIES, names.split(";"), strict=True)) for dialect, names in {
    "sqlite": "INTEGER;REAL;NUMERIC;BOOLEAN;DATE;TIMESTAMP;TIMESTAMP;BLOB;TEXT",
    "postgresql": "BIGINT;DOUBLE PRECISION;NUMERIC;BOOLEAN;DATE;TIMESTAMP;TIMESTAMPTZ;BYTEA;TEXT",
    "mysql": "BIGINT;DOUBLE;DECIMAL(65,30);BOOLEAN;DATE;DATETIME(6);DATETIME(6);LONGBLOB;"
             "MEDIUMTEXT"}.items()}
_MYSQL_KEY_TEXT = "VARCHAR(255)"  # MySQL indexes no unbounded TEXT
_SQLITE_CREATE = re.compile(
    r'^\s*CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?'
    r'("(?:[^"]|"")+"|\[[^\]]+\]|`(?:[^`]|``)+`|\'(?:[^\']|\'\')+\'|[^\s(]+)', re.I)


def kind(conn: sa.Connection | sa.Engine) -> str:
    """``"sqlite"``, ``"postgresql"`` or ``"mysql"``; :class:`Fatal` for other databases."""
    name = conn.dialect.name
    if name in ("mysql", "mariadb"):
        return "mysql"
    if name not in ("sqlite", "postgresql"):
        raise Fatal(f"unsupported database {name!r}: expected SQLite, PostgreSQL or MariaDB")
    return name


def raw_connection(conn: sa.Connection) -> Any:
    """The driver's connection under ``conn`` (sqlite3, psycopg or PyMySQL)."""
    return conn.connection.dbapi_connection


# -- errors ---------------------------------------------------------------------------

def translate(exc: BaseException, what: str) -> StepError:
    """The error class (docs/retries.md) of a driver or SQLAlchemy error: refused credentials or a
    missing database (PostgreSQL 28000/28P01/3D000, also from a failed connect that carries no
    SQLSTATE; MariaDB 1044/1045/1049; SQLite "unable to open"), syntax, missing objects,
    permissions, bad data and constraint violations are :class:`Fatal`; deadlocks, serialization
    failures, lost connections, busy databases and server timeouts are :class:`Retryable`. ``what``
    says what was being done; the driver's message follows."""
    if isinstance(exc, StepError):
        return exc
    orig: BaseException = (exc.orig or exc) if isinstance(exc, sa.exc.DBAPIError) else exc
    message = f"{what}: {_first_line(orig)}"
    module = type(orig).__module__
    sqlstate = getattr(orig, "sqlstate", None)
    if module.startswith("psycopg") and isinstance(sqlstate, str):
        if sqlstate == "57014":
            return Retryable(f"step timeout: {message}")
        if sqlstate in _PG_ACCESS:
            return Fatal(message + _ACCESS_HINT)
        if sqlstate == "25006":  # read_only_sql_transaction
            return Fatal(message + _READ_ONLY_HINT)
        retry = sqlstate[:2] in _PG_RETRY_CLASSES or sqlstate in _PG_RETRY_CODES
        return Retryable(message) if retry else Fatal(message)
    if module.startswith("psycopg") and _PG_ACCESS_TEXT.search(str(orig)):
        return Fatal(message + _ACCESS_HINT)
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        if code & 0xFF == _LITE_INTERRUPT:
            return Retryable(f"step timeout: {message}")
        if code & 0xFF in _LITE_ACCESS:
            return Fatal(message + _FILE_HINT)
        return Retryable(message) if code & 0xFF in _LITE_RETRY else Fatal(message)
    args = getattr(orig, "args", ())
    if module.startswith("pymysql") and args and isinstance(args[0], int):
        if args[0] in _MY_TIMEOUT:
            return Retryable(f"step timeout: {message}")
        if args[0] in _MY_ACCESS:
            return Fatal(message + _ACCESS_HINT)
        if args[0] == _MY_READ_ONLY_TRANSACTION or (
                args[0] == _MY_OPTION_PREVENTS and "read-only" in str(args[-1]).lower()):
            return Fatal(message + _READ_ONLY_HINT)
        if args[0] == 1366 and _MY_4BYTE.search(str(args[-1])):
            return Fatal(message + _MB3_HINT)
        return Retryable(message) if args[0] in _MY_RETRY else Fatal(message)
    if isinstance(orig, sa.exc.TimeoutError | ConnectionError | TimeoutError):
        return Retryable(message)
    name = type(orig).__name__
    if name in ("OperationalError", "InterfaceError"):  # no code: connection trouble
        return Retryable(message)
    return Fatal(message)


def _first_line(exc: BaseException) -> str:
    # Not cut here: the store cuts a step's error after redaction (a cut before it could
    # keep the first characters of a secret that the redactor would no longer recognise).
    return (str(exc).strip() or type(exc).__name__).splitlines()[0]


# -- one guarded transaction ------------------------------------------------------------

@dataclass
class Guard:
    """The limits of one transaction: its deadline on ``clock``'s monotonic time (the
    step's clock), and why it was stopped, if it was."""

    deadline: float
    limit: float
    clock: Clock = field(default_factory=SystemClock)
    stopped: str | None = None

    def left(self) -> float:
        """Seconds left before the deadline (negative past it)."""
        return self.deadline - self.clock.monotonic()

    def poll(self, ctx: StepContext, grace: float | None = 0.0) -> bool:
        """Whether to stop: canceled (``ctx.cancelled()`` with time left: it is also true
        once the time is up, a timeout) or past the deadline plus ``grace`` (None: unchecked)."""
        if self.stopped is None and ctx.cancelled():
            self.stopped = "timeout" if ctx.remaining() <= 0 else "canceled"
        elif self.stopped is None and grace is not None and self.left() <= -grace:
            self.stopped = "timeout"
        return self.stopped is not None

    def check(self, ctx: StepContext) -> None:
        """Between batches: :class:`Fatal` once canceled, :class:`Retryable` past the time."""
        if self.poll(ctx):
            raise self.error()

    def error(self) -> StepError:
        """The error that stops the step: Fatal when canceled, Retryable on timeout."""
        if self.stopped == "canceled":
            return Fatal("step canceled")
        return Retryable(f"step timeout: the step's {self.limit:.0f} s ran out")


@contextmanager
def transaction(engine: sa.Engine, ctx: StepContext, what: str) -> Iterator[
        tuple[sa.Connection, Guard]]:
    """A connection in one transaction, committed when the block ends and rolled back on
    error, with the step's remaining time as a statement timeout where the dialect allows:
    PostgreSQL ``SET LOCAL statement_timeout``, SQLite a progress handler (the transaction
    starts with ``BEGIN IMMEDIATE``), MariaDB per statement (``SET STATEMENT``, by the step).
    A watcher thread cancels the running statement on the server when the run is canceled
    (and, past the deadline, on MariaDB/MySQL). Errors come out translated; a cancel or
    timeout noticed before the commit rolls back."""
    remaining = ctx.remaining()
    if remaining <= 0:
        raise Retryable("step timeout: no time left for the step")
    clock = clock_of(ctx)
    guard = Guard(clock.monotonic() + remaining, remaining, clock)
    try:
        conn = engine.connect()
    except Exception as exc:
        raise translate(exc, f"{what}: cannot connect") from exc
    dialect, raw = kind(conn), raw_connection(conn)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(engine, conn, ctx, guard, stop),
                               name="cadenza-sql-watch", daemon=True)
    old_isolation = raw.isolation_level if dialect == "sqlite" else None
    committed = False
    try:
        if dialect == "sqlite":
            raw.isolation_level = None  # we issue BEGIN IMMEDIATE ourselves
            raw.set_progress_handler(lambda: int(guard.poll(ctx)), 20_000)
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            if dialect == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(remaining * 1000) + 1}")
            watcher.start()
        yield conn, guard
        if guard.stopped:
            raise guard.error()
        lease_passed = getattr(ctx, "lease_passed", None)  # the executor's ctx knows the lease
        if lease_passed is not None and lease_passed():
            raise Retryable(f"{what}: the run's lease ran out before the work could be "
                            "committed; it was rolled back")
        conn.commit()
        committed = True
    except BaseException as exc:
        quietly(conn.rollback)
        if not isinstance(exc, Exception):
            raise
        raise (guard.error() if guard.stopped else translate(exc, what)) from exc
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
        if dialect == "sqlite":
            raw.set_progress_handler(None, 0)
            raw.isolation_level = old_isolation
        if not committed and (guard.stopped or ctx.cancelled()):
            # Canceled, timed out or abandoned: the worker may already have ended the run
            # and disposed of the engine, so this connection is closed, never pooled (a
            # connection handed back to a disposed pool stays open until collected).
            quietly(conn.invalidate)
        conn.close()


def _watch(engine: sa.Engine, conn: sa.Connection, ctx: StepContext, guard: Guard,
           stop: threading.Event) -> None:
    """Cancel the statement on the server when the run is canceled, or (MySQL, where no
    session-wide limit is set) one second past the deadline."""
    grace = 1.0 if kind(conn) == "mysql" else None
    while not stop.wait(0.2):
        if guard.poll(ctx, grace):
            break
    else:
        return
    raw = raw_connection(conn)
    if kind(conn) == "postgresql":
        quietly(getattr(raw, "cancel_safe", raw.cancel))  # psycopg < 3.2: cancel()
    else:
        def kill() -> None:
            with engine.connect() as other:
                other.exec_driver_sql(f"KILL QUERY {int(raw.thread_id())}")
        quietly(kill)


def quietly(fn: Any) -> None:
    """Call ``fn``, ignoring its errors (cleanup on a path that is already failing)."""
    try:
        fn()
    except Exception:  # best effort: cleanup must never hide the error being raised
        return


# -- names and tables -------------------------------------------------------------------

def split_table(table: str) -> tuple[str | None, str]:
    """``"schema.table"`` → ``("schema", "table")``; ``"table"`` → ``(None, "table")``."""
    schema, _, name = table.rpartition(".")
    return schema or None, name


def quote(conn: sa.Connection, name: str) -> str:
    """One identifier, always quoted by the dialect's preparer (so any text is safe). The
    preparer itself doubles ``%`` for drivers whose placeholders are ``%s`` (psycopg,
    PyMySQL), which read ``%%`` back as ``%``; doubling it again here made a column
    ``100%`` come out as ``100%%``."""
    return str(conn.dialect.identifier_preparer.quote_identifier(name))


def qualified(conn: sa.Connection, table: str) -> str:
    """``schema.table`` quoted part by part."""
    schema, name = split_table(table)
    return f"{quote(conn, schema)}.{quote(conn, name)}" if schema else quote(conn, name)


def sibling(table: str, suffix: str) -> str:
    """``table__new`` / ``table__old``, shortened with a hash when past 63 characters."""
    schema, name = split_table(table)
    if len(name) + len(suffix) > 63:
        name = f"{name[:48]}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return f"{schema}.{name}{suffix}" if schema else f"{name}{suffix}"


def exists(conn: sa.Connection, table: str) -> bool:
    """Whether ``table`` (maybe ``schema.table``) exists."""
    schema, name = split_table(table)
    return bool(sa.inspect(conn).has_table(name, schema=schema))


def category_of(sql_type: Any) -> str:
    """The value category of a reflected column type (how values are adapted for it)."""
    if isinstance(sql_type, sa.DateTime):
        return "timestamptz" if getattr(sql_type, "timezone", False) else "timestamp"
    for cls, category in ((sa.Boolean, "bool"), (sa.Integer, "int"), (sa.Float, "float"),
                          (sa.Numeric, "decimal"), (sa.Date, "date"), (sa.LargeBinary, "bytes")):
        if isinstance(sql_type, cls):
            return category
    return "text"


def columns_of(conn: sa.Connection, table: str) -> dict[str, str]:
    """An existing table's columns, in order, with their value categories."""
    schema, name = split_table(table)
    cols = sa.inspect(conn).get_columns(name, schema=schema)
    return {str(c["name"]): category_of(c["type"]) for c in cols}


def unique_keys(conn: sa.Connection, table: str) -> list[set[str]]:
    """The column sets of the table's primary key and unique constraints/indexes."""
    schema, name = split_table(table)
    insp = sa.inspect(conn)
    found = [set(insp.get_pk_constraint(name, schema=schema).get("constrained_columns") or [])]
    found += [set(u["column_names"]) for u in insp.get_unique_constraints(name, schema=schema)]
    found += [set(str(c) for c in i["column_names"] if c)
              for i in insp.get_indexes(name, schema=schema) if i.get("unique")]
    return [s for s in found if s]


def create_table(conn: sa.Connection, table: str, columns: dict[str, str],
                 key: list[str] | None) -> str:
    """CREATE TABLE with one column per (name, category) and the key as primary key;
    utf8mb4 on MariaDB. Returns the statement (for the debug log)."""
    dialect = kind(conn)
    parts = []
    for name, category in columns.items():
        sql_type = TYPES[dialect][category]
        if dialect == "mysql" and key and name in key and category == "text":
            sql_type = _MYSQL_KEY_TEXT
        parts.append(f"{quote(conn, name)} {sql_type}")
    if key:
        parts.append(f"PRIMARY KEY ({', '.join(quote(conn, k) for k in key)})")
    suffix = " DEFAULT CHARSET=utf8mb4" if dialect == "mysql" else ""
    sql = f"CREATE TABLE {qualified(conn, table)} ({', '.join(parts)}){suffix}"
    conn.exec_driver_sql(sql)
    return sql


def drop_table(conn: sa.Connection, table: str) -> None:
    """DROP TABLE IF EXISTS."""
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {qualified(conn, table)}")


def copy_shape(conn: sa.Connection, live: str, new: str) -> list[str]:
    """Create ``new`` with the columns, defaults, keys and indexes of ``live``. Returns the
    statements to run after the swap (SQLite: the live table's indexes and triggers)."""
    dialect = kind(conn)
    if dialect == "postgresql":
        conn.exec_driver_sql(f"CREATE TABLE {qualified(conn, new)} "
                             f"(LIKE {qualified(conn, live)} INCLUDING ALL)")
        return []
    if dialect == "mysql":
        conn.exec_driver_sql(f"CREATE TABLE {qualified(conn, new)} LIKE {qualified(conn, live)}")
        return []
    schema, name = split_table(live)
    master = f"{quote(conn, schema)}.sqlite_master" if schema else "sqlite_master"
    rows = conn.exec_driver_sql(
        f"SELECT type, sql FROM {master} WHERE tbl_name = ? AND sql IS NOT NULL", (name,)
    ).all()
    create = [str(sql) for typ, sql in rows if typ == "table"]
    if not create or not _SQLITE_CREATE.match(create[0]):
        raise Fatal(f"cannot read the definition of table {live!r}")
    header = f"CREATE TABLE {qualified(conn, new)}"
    conn.exec_driver_sql(_SQLITE_CREATE.sub(lambda _: header, create[0], count=1))
    return [str(sql) for typ, sql in rows if typ in ("index", "trigger")]


def swap(conn: sa.Connection, live: str, new: str, replaces: bool, after: list[str]) -> None:
    """Put ``new`` in the place of ``live`` (dropping the old one when ``replaces``).
    PostgreSQL and SQLite: inside the caller's transaction, so readers see the old table
    or the new one, never an empty one. MariaDB: one atomic ``RENAME TABLE``."""
    dialect = kind(conn)
    _, live_name = split_table(live)
    if dialect == "mysql":
        if replaces:
            old = sibling(live, "__old")
            drop_table(conn, old)
            conn.exec_driver_sql(f"RENAME TABLE {qualified(conn, live)} TO {qualified(conn, old)}, "
                                 f"{qualified(conn, new)} TO {qualified(conn, live)}")
            drop_table(conn, old)
        else:
            conn.exec_driver_sql(f"RENAME TABLE {qualified(conn, new)} TO {qualified(conn, live)}")
        return
    if dialect == "sqlite":
        conn.exec_driver_sql("PRAGMA legacy_alter_table = ON")  # views keep naming the table
    try:
        if replaces:
            conn.exec_driver_sql(f"DROP TABLE {qualified(conn, live)}")
        conn.exec_driver_sql(f"ALTER TABLE {qualified(conn, new)} RENAME TO "
                             f"{quote(conn, live_name)}")
    finally:
        if dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA legacy_alter_table = OFF")
    for sql in after:
        conn.exec_driver_sql(sql)


# -- values ---------------------------------------------------------------------------

def adapter(dialect: str, category: str) -> Callable[[Any], Any]:
    """How a typed value is passed for a column of ``category`` on ``dialect``: as text for
    text columns, objects as JSON, dates and decimals as text on SQLite, aware date-times
    in UTC on MariaDB (DATETIME has no zone); else as it is, for the driver."""
    textual = (dict, list) + ((date, clock_time, Decimal) if dialect == "sqlite" else ())

    def adapt(value: Any) -> Any:
        if value is None:
            return None
        if category == "text" or isinstance(value, textual):
            return as_text(value)
        if dialect == "mysql" and isinstance(value, datetime) and value.tzinfo is not None:
            return value.astimezone(UTC).replace(tzinfo=None)
        return value

    return adapt


def as_text(value: Any) -> str:
    """A typed value as text (for a text column): JSON for objects, ISO for dates."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date | clock_time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


# -- commits inside a guarded transaction ----------------------------------------------------

def recommit(conn: sa.Connection, guard: Guard, ctx: StepContext) -> None:
    """Commit the work so far of a :func:`transaction` and open the next one the same way
    (SQLite ``BEGIN IMMEDIATE``, PostgreSQL the remaining time as ``statement_timeout``).
    Raises the guard's error, without committing, once the step is canceled or out of time."""
    guard.check(ctx)
    conn.commit()
    dialect = kind(conn)
    if dialect == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif dialect == "postgresql":
        left = max(guard.left(), 0.001)
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(left * 1000) + 1}")
    else:
        conn.exec_driver_sql("SELECT 1")  # begins SQLAlchemy's transaction for raw writes


def sqlite_extras(conn: sa.Connection, live: str) -> list[str]:
    """The statements that re-create a SQLite table's indexes and triggers (what
    :func:`copy_shape` returns), for a ``__new`` table made by an earlier attempt."""
    if kind(conn) != "sqlite":
        return []
    schema, name = split_table(live)
    master = f"{quote(conn, schema)}.sqlite_master" if schema else "sqlite_master"
    rows = conn.exec_driver_sql(
        f"SELECT type, sql FROM {master} WHERE tbl_name = ? AND sql IS NOT NULL", (name,)
    ).all()
    return [str(sql) for typ, sql in rows if typ in ("index", "trigger")]


def insert_ignore(conn: sa.Connection, table: sa.Table, values: dict[str, Any]) -> bool:
    """INSERT a row unless its primary key exists (``ON CONFLICT DO NOTHING`` / MariaDB
    ``INSERT IGNORE``); True when it went in. On PostgreSQL and MariaDB an uncommitted
    conflicting row makes this wait for its transaction's end."""
    dialect = kind(conn)
    stmt: Any
    if dialect == "mysql":
        stmt = table.insert().prefix_with("IGNORE")
    else:
        from sqlalchemy.dialects import postgresql, sqlite

        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        stmt = insert(table).on_conflict_do_nothing()
    result = conn.execute(stmt.values(**values).execution_options(preserve_rowcount=True))
    return bool(result.rowcount == 1)


# -- operation keys in a target database (ctx.once(..., connection=NAME)) --------------------

#: keys of ``ctx.once(key, fn, connection=NAME)``, kept in that connection's database
OPERATION_KEYS = sa.Table(
    "cadenza_operation_keys", sa.MetaData(),
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("op_key", sa.String(512), primary_key=True),
    sa.Column("result_json", sa.Text, nullable=True),
    sa.Column("run_id", sa.String(64), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    mysql_charset="utf8mb4",
)


def ensure_operation_keys(engine: sa.Engine, what: str) -> None:
    """Create ``cadenza_operation_keys`` if missing (its own transaction: MariaDB's DDL
    commits anyway; ``IF NOT EXISTS`` for concurrent first uses)."""
    try:
        with engine.begin() as conn:
            conn.execute(sa.schema.CreateTable(OPERATION_KEYS, if_not_exists=True))
    except Exception as exc:
        # PostgreSQL: two first uses at once can both pass IF NOT EXISTS; one of them fails
        # on the catalog's unique index, and the table is there
        try:
            with engine.connect() as conn:
                there = sa.inspect(conn).has_table(OPERATION_KEYS.name)
        except Exception:
            there = False
        if not there:
            raise translate(exc, what) from exc


def find_operation_key(engine: sa.Engine, job_id: str, key: str) -> tuple[Any, str | None] | None:
    """(result, run id) of a key recorded for ``job_id``, or None."""
    t = OPERATION_KEYS
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.select(t.c.result_json, t.c.run_id).where(
                t.c.job_id == job_id, t.c.op_key == key)).first()
    except Exception as exc:
        raise translate(exc, f"reading operation key {key!r}") from exc
    if row is None:
        return None
    return (None if row[0] is None else json.loads(row[0])), row[1]


def insert_operation_key(conn: sa.Connection, job_id: str, key: str, result_json: str,
                         run_id: str, now: datetime | None = None) -> bool:
    """Record ``key`` in the caller's transaction, created at ``now`` (the step's clock;
    default: the system clock's); False when another run recorded it."""
    return insert_ignore(conn, OPERATION_KEYS, {
        "job_id": job_id, "op_key": key, "result_json": result_json, "run_id": run_id,
        "created_at": now if now is not None else SystemClock().now()})
