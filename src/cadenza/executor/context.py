"""The ``ctx`` a step runs with: :class:`ExecutionContext`, the executor's implementation of
:class:`cadenza.steps.runtime.StepContext` (SPEC §4).

The same class serves both isolations: in the worker (``isolation = "thread"``, and every
built-in type) its log lines go to the run's buffered :class:`~cadenza.executor.runlog.RunLog`;
in a child process (``isolation = "process"``) they travel to the parent through a pipe,
and ``ctx.connection(name)`` opens the child's own engine.

Connections. ``ctx.connection(name)`` on a ``sql`` connection is a SQLAlchemy ``Connection``
inside a transaction, the same one for every call in the step; :meth:`finish` commits it when
the step succeeded and rolls it back otherwise. On an ``http`` connection it is an httpx
``Client`` (closed by :meth:`finish`). When the run's log level is DEBUG, every statement
executed on such a SQL connection is logged with its bind parameters (redacted when stored).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cadenza.config.schema_settings import HttpConnection, Settings, SqlConnection
from cadenza.domain.errors import Fatal
from cadenza.steps.runtime import RunInfo, StepInfo, StepResult
from cadenza.store.boundary import EventSpec

if TYPE_CHECKING:
    import httpx
    import sqlalchemy as sa

    from cadenza.domain.params import Scope
    from cadenza.executor.runlog import StepLogger

MAX_SQL_LOGGED = 4000
"""The SQL text and binds of one DEBUG line are cut past this many characters each."""


class ConnectionSource(Protocol):
    """Where connections come from: :class:`~cadenza.executor.connections.Connections`, or
    a child process's lazily created one."""

    def definition(self, name: str) -> Any:
        """The connection's settings (:class:`~cadenza.domain.errors.Fatal` if unknown)."""
        ...

    def sql_engine(self, name: str) -> sa.Engine:
        """The shared engine of a ``sql`` connection."""
        ...

    def http_client(self, name: str, **kwargs: Any) -> httpx.Client:
        """A new client for an ``http`` connection."""
        ...


class ExecutionContext:
    """``ctx`` for one attempt of one step (see the module docstring)."""

    def __init__(
        self,
        *,
        params: Mapping[str, Any],
        run: RunInfo,
        step: StepInfo,
        log: StepLogger,
        home: Path,
        settings: Settings,
        scope: Scope,
        connections: ConnectionSource,
        events: Callable[[EventSpec], None],
        outputs: Mapping[str, Mapping[str, Any]] | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        self.params: Mapping[str, Any] = _ReadOnly(params)
        self.run = run
        self.step = step
        self.log = log
        self.home = home
        self.settings = settings
        self.scope = scope
        self._connections = connections
        self._events = events
        self._outputs = dict(outputs or {})
        budget = step.timeout_seconds if timeout_seconds is None else timeout_seconds
        self._deadline = time.monotonic() + budget
        self._cancel = threading.Event()
        self._sql: dict[str, sa.Connection] = {}
        self._http: dict[str, httpx.Client] = {}
        self._lock = threading.Lock()

    @property
    def job(self) -> RunInfo:
        """The job's facts: ``ctx.job.job_id`` (the same object as ``ctx.run``)."""
        return self.run

    def connection(self, name: str) -> Any:
        """The step's connection ``name`` (see the module docstring); the same object for
        every call within one step."""
        with self._lock:
            if name in self._sql:
                return self._sql[name]
            if name in self._http:
                return self._http[name]
            definition = self._connections.definition(name)
            if isinstance(definition, SqlConnection):
                conn = self._connections.sql_engine(name).connect()
                if self.log.isEnabledFor("DEBUG"):
                    from sqlalchemy import event

                    event.listen(conn, "before_cursor_execute", self._log_sql)
                conn.begin()
                self._sql[name] = conn
                return conn
            if isinstance(definition, HttpConnection):
                client = self._connections.http_client(name)
                self._http[name] = client
                return client
            raise Fatal(f"connection {name!r} is of type {definition.type!r}: "
                        "ctx.connection opens sql and http connections only")

    def sql_engine(self, name: str) -> sa.Engine:
        """The shared engine of the ``sql`` connection ``name`` (the step manages its own
        transactions)."""
        return self._connections.sql_engine(name)

    def event(self, event_type: str, message: str, payload: Mapping[str, Any] | None = None,
              level: str = "INFO") -> None:
        """An audit event about this run, written (redacted) with the step's end."""
        from datetime import UTC, datetime

        self._events(EventSpec(str(event_type), message, str(level).upper(),
                               dict(payload) if payload is not None else None,
                               datetime.now(UTC)))

    def cancelled(self) -> bool:
        """True once the step's time is up or the run is being stopped."""
        return self._cancel.is_set() or time.monotonic() >= self._deadline

    def remaining(self) -> float:
        """Seconds left before the step's timeout (never negative)."""
        return max(0.0, self._deadline - time.monotonic())

    def previous(self, step: str) -> Mapping[str, Any] | None:
        """An earlier step's record: ``{"state", "rows", "output"}``, or None."""
        return self._outputs.get(step)

    def cancel(self) -> None:
        """Make :meth:`cancelled` true (the executor gave up on the step)."""
        self._cancel.set()

    def finish(self, success: bool) -> None:
        """Commit (``success``) or roll back every SQL connection, close every client.

        Every connection is closed even if one commit fails; the first error is raised."""
        with self._lock:
            sql, self._sql = list(self._sql.values()), {}
            http, self._http = list(self._http.values()), {}
        first: BaseException | None = None
        for conn in sql:
            try:
                if conn.in_transaction():
                    if success and first is None:
                        conn.commit()
                    else:
                        conn.rollback()
            except BaseException as exc:  # the step fails; the rest are still closed
                first = first or exc
            finally:
                conn.close()
        for client in http:
            try:
                client.close()
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first

    def _log_sql(self, conn: sa.Connection, cursor: Any, statement: str, parameters: Any,
                 context: Any, executemany: bool) -> None:
        binds = repr(parameters)
        if len(binds) > MAX_SQL_LOGGED:
            binds = binds[:MAX_SQL_LOGGED] + "..."
        text = statement if len(statement) <= MAX_SQL_LOGGED else \
            statement[:MAX_SQL_LOGGED] + "..."
        many = " (executemany)" if executemany else ""
        self.log.debug("SQL%s: %s | binds: %s", many, text.strip(), binds)


def check_result(value: object, step: str) -> StepResult:
    """``value`` as a :class:`StepResult` whose ``output`` is a JSON-able dict; :class:`Fatal`
    otherwise (a step type returning something else is a bug that retrying cannot fix)."""
    if not isinstance(value, StepResult):
        raise Fatal(f"step {step!r} returned {type(value).__name__}, expected a StepResult")
    rows = value.rows
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)):
        raise Fatal(f"step {step!r}: rows must be an integer or None, got {rows!r}")
    if not isinstance(value.output, Mapping):
        raise Fatal(f"step {step!r}: output must be a dict, got {type(value.output).__name__}")
    try:
        json.dumps(dict(value.output), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Fatal(f"step {step!r}: its output is not JSON-able ({exc})") from None
    return value


class _ReadOnly(Mapping[str, Any]):
    """A read-only view of the merged parameters (``ctx.params``)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Any:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"params({self._data!r})"

    def __reduce__(self) -> Any:
        return (_ReadOnly, (self._data,))
