"""A small, honest stand-in for the executor's StepContext, for the SQL and file steps' tests.

It stands in for the executor's context (built separately, in ``cadenza.executor``) and
implements the protocol of :mod:`cadenza.steps.runtime` the way the executor does for what
``sql_query`` and ``file_load`` use:

* ``sql_engine(name)`` is the engine of the real
  :class:`cadenza.executor.connections.Connections` (one engine per connection, SQLite
  paths under the home); ``connection(name)`` opens a Connection in a transaction that
  :meth:`SqlTestContext.close` commits (``ok=True``) or rolls back;
* ``settings`` is a real :class:`~cadenza.config.schema_settings.Settings` with the given
  ``[files].roots`` and ``[connections]``; ``scope`` a real
  :class:`~cadenza.domain.params.Scope` holding ``params``;
* ``log`` records (level, text) lines, DEBUG included: the executor filters by the run's
  log level and redacts, which is not the steps' business;
* ``clock`` is the system clock unless the test gives one (a
  :class:`~cadenza.clock.FakeClock` decides when the step's time is up); ``remaining()``
  counts down from ``timeout`` on its monotonic time; ``cancelled()`` reads a flag (or a
  callable) a test may set, and is true once the time is up, like the executor's.

The helpers at the bottom make fresh per-test SQL URLs and unique table names.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cadenza.clock import Clock, SystemClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.params import Scope
from cadenza.executor.connections import Connections
from cadenza.steps.runtime import RunInfo, StepInfo, StepLog, StepResult


@dataclass
class RecordingLog:
    """Run-log lines as (level, text)."""

    lines: list[tuple[str, str]] = field(default_factory=list)

    def _add(self, level: str, message: str, args: tuple[object, ...]) -> None:
        self.lines.append((level, message % args if args else message))

    def debug(self, message: str, *args: object) -> None:
        self._add("DEBUG", message, args)

    def info(self, message: str, *args: object) -> None:
        self._add("INFO", message, args)

    def warning(self, message: str, *args: object) -> None:
        self._add("WARNING", message, args)

    def error(self, message: str, *args: object) -> None:
        self._add("ERROR", message, args)

    def text(self, level: str | None = None) -> str:
        return "\n".join(t for lv, t in self.lines if level is None or lv == level)


class SqlTestContext:
    """The ``ctx`` a SQL or file step sees, for one step run."""

    def __init__(self, home: Path, connections: Mapping[str, str], *,
                 roots: list[str] | None = None, params: Mapping[str, Any] | None = None,
                 timeout: float = 60.0, step_type: str = "sql_query",
                 scheduled_for: datetime | None = None, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.home = home
        self.settings = Settings.model_validate({
            "files": {"roots": roots or ["data/files"]},
            "connections": {n: {"type": "sql", "url": u} for n, u in connections.items()},
        })
        self.params: Mapping[str, Any] = dict(params or {})
        self.run = RunInfo(id="run-1", job_id="job", trigger="manual:test",
                           scheduled_for=scheduled_for or self.clock.now(), log_level="DEBUG")
        self.step = StepInfo(name="step", type=step_type, attempt=1, timeout_seconds=timeout)
        self.log_record = RecordingLog()
        self.log: StepLog = self.log_record
        self.scope = Scope(params=self.params, run_id=self.run.id, job_id="job",
                           trigger=self.run.trigger, scheduled_for=self.run.scheduled_for)
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.cancel: bool | Callable[[], bool] = False
        self._deadline = self.clock.monotonic() + timeout
        self._connections = Connections(home, self.settings)
        self._open: list[tuple[sa.Connection, Any]] = []

    @property
    def job(self) -> RunInfo:
        return self.run

    def connection(self, name: str) -> sa.Connection:
        conn = self._connections.sql_engine(name).connect()
        self._open.append((conn, conn.begin()))
        return conn

    def sql_engine(self, name: str) -> sa.Engine:
        return self._connections.sql_engine(name)

    def event(self, event_type: str, message: str, payload: Mapping[str, Any] | None = None,
              level: str = "INFO") -> None:
        self.events.append((event_type, message, dict(payload or {})))

    def cancelled(self) -> bool:
        """The flag, or true once the time is up (as the executor's context does)."""
        flag = self.cancel() if callable(self.cancel) else self.cancel
        return flag or self.remaining() <= 0

    def remaining(self) -> float:
        return max(0.0, self._deadline - self.clock.monotonic())

    def set_remaining(self, seconds: float) -> None:
        self._deadline = self.clock.monotonic() + seconds

    def previous(self, step: str) -> Mapping[str, Any] | None:
        return None

    def close(self, ok: bool = True) -> None:
        """End what ``connection()`` opened (commit when ``ok``), dispose of the engines."""
        for conn, transaction in self._open:
            if ok:
                transaction.commit()
            else:
                transaction.rollback()
            conn.close()
        self._open.clear()
        self._connections.close()


def run_step(step_type: type[Any], ctx: SqlTestContext, *,
             rendered: Mapping[str, Any] | None = None, **fields: Any) -> StepResult:
    """Validate ``fields`` as the step's config (as the executor does) and run it.
    ``rendered`` replaces fields after validation, as the executor's substitution of
    ``${...}`` tokens does (a parameter's value is not seen by the config check)."""
    config = step_type.Config.model_validate({"name": "step", "type": step_type.name, **fields})
    if rendered:
        config = config.model_copy(update=dict(rendered))
    result: StepResult = step_type().run(ctx, config)
    return result


def table_name(prefix: str = "t") -> str:
    """A table name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def scalar(url: str, sql: str, **binds: Any) -> Any:
    """One value from a fresh engine (outside any step's transaction)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql), binds).scalar()
    finally:
        engine.dispose()


def rows(url: str, sql: str, **binds: Any) -> list[tuple[Any, ...]]:
    """Every row of a query from a fresh engine."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(sql), binds)]
    finally:
        engine.dispose()


def execute(url: str, *statements: str) -> None:
    """Run statements, committed, from a fresh engine."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for sql in statements:
                conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


@dataclass
class Db:
    """A database for one test, and the tables it made (dropped afterwards on MariaDB,
    whose ``test`` database is shared; SQLite and PostgreSQL databases are fresh)."""

    kind: str
    url: str
    made: list[str] = field(default_factory=list)

    def table(self, prefix: str = "t") -> str:
        name = table_name(prefix)
        self.made.append(name)
        return name


def database(kind: str, url: str) -> Iterator[Db]:
    """The body of a ``db`` fixture: yields a :class:`Db`, then drops what it made on
    MariaDB (with the ``__new``/``__old`` tables of overwrites and the load records)."""
    made = Db(kind, url)
    yield made
    if kind == "mariadb" and made.made:
        names = [n + s for n in made.made for s in ("", "__new", "__old")]
        statements = [f"DROP TABLE IF EXISTS {n}" for n in names]
        engine = sa.create_engine(url)
        try:
            with engine.begin() as conn:
                for sql in statements:
                    conn.exec_driver_sql(sql)
                if sa.inspect(conn).has_table("cadenza_loaded_files"):
                    conn.execute(sa.text("DELETE FROM cadenza_loaded_files WHERE table_name "
                                         "IN :names").bindparams(
                        sa.bindparam("names", expanding=True)), {"names": made.made})
        finally:
            engine.dispose()
