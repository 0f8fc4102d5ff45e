"""The ``ctx`` a step runs with: :class:`ExecutionContext`, the executor's implementation of
:class:`cadenza.steps.runtime.StepContext` (docs/steps.md).

The same class serves both isolations: in the worker (``isolation = "thread"``, and every
built-in type) its log lines go to the run's buffered :class:`~cadenza.executor.runlog.RunLog`;
in a child process (``isolation = "process"``) they travel to the parent through a pipe,
and ``ctx.connection(name)`` opens the child's own engine.

The lease (thread isolation). A context built by the executor for a thread step knows the
run's lease (:meth:`~cadenza.executor.control.RunControl.lease_left`): once the lease this
worker surely holds is about to end without a renewal, :meth:`ExecutionContext.cancelled`
is true (a running SQL statement is canceled on the server, an HTTP exchange aborted) and
:meth:`ExecutionContext.finish` commits nothing.

Time. ``ctx.clock`` is the clock the executor was given (the node's; the system clock by
default, and always in a child process, which builds its own). The step's deadline,
``ctx.remaining()`` and ``ctx.cancelled()`` count on its monotonic time and ``ctx.event``
stamps with its wall time, so a :class:`~cadenza.clock.FakeClock` decides when a step's
time is up.

Connections. ``ctx.connection(name)`` on a ``sql`` connection is a SQLAlchemy ``Connection``
inside a transaction, the same one for every call in the step; :meth:`finish` commits it when
the step succeeded and rolls it back otherwise. On an ``http`` connection it is an httpx
``Client`` (closed by :meth:`finish`). When the run's log level is DEBUG, every statement
executed on such a SQL connection is logged with its bind parameters (redacted when stored).

Checkpoints and operation keys (docs/exactly-once.md). ``ctx.checkpoint(state)``,
``ctx.last_checkpoint`` and ``ctx.once(key, fn, ...)`` write to the store through a
:class:`Progress`, fenced on the run's lease epoch: a write refused because another holder
took the run over raises :class:`FencedOut` and marks the step canceled. The executor's
:class:`~cadenza.executor.tracking.RunTracker` binds each run it claims (:func:`bind_run`:
the store and the new epoch); a ``ctx`` finds its run's binding by run id. A child process
cannot use the parent's store object: its :class:`~cadenza.executor.child.ChildSpec`
carries a :class:`Fence` (the store's URL and the epoch) and the child opens the store
itself on first use, with the same fencing in the database. That keeps the pipe
one-way (child to parent) and makes a checkpoint one round trip to the database, not two.

``ctx.once(key, fn, *args, connection=NAME)`` runs ``fn`` in a transaction of its own on
the ``sql`` connection NAME and records the key in that database
(``cadenza_operation_keys``, created on demand) in the same transaction, then mirrors it
into the store. Races: the first writer of a key wins (the UNIQUE constraint decides); the
loser's transaction is rolled back (with ``connection=``: its effect too) and it returns
the winner's recorded result. Without ``connection=`` the effect comes before the record:
a racer that loses has already applied its effect (a WARNING says so).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cadenza.clock import Clock, SystemClock
from cadenza.config.schema_settings import (
    STEP_OUTPUT_BYTES,
    HttpConnection,
    Settings,
    SqlConnection,
)
from cadenza.domain.errors import Fatal, Retryable, StepError
from cadenza.domain.outputs import summarize
from cadenza.domain.texts import cut_before_redaction
from cadenza.resources.leased import LeasedResource, find_route
from cadenza.steps.runtime import RunInfo, StepInfo, StepResult
from cadenza.store.boundary import EventSpec

if TYPE_CHECKING:
    import httpx
    import sqlalchemy as sa

    from cadenza.domain.params import Scope
    from cadenza.executor.runlog import StepLogger
    from cadenza.store.checkpoints import KeyRecord
    from cadenza.store.protocols import WorkerStore

MAX_SQL_LOGGED = 4000
"""The SQL text and binds of one DEBUG line are cut past this many characters each."""
MAX_CHECKPOINT = 1 << 20
"""The largest ``ctx.checkpoint`` state, as JSON bytes (1 MiB)."""
MAX_KEY = 512
"""The longest ``ctx.once`` key."""
_MAX_BOUND = 4096


class FencedOut(Retryable):
    """The run's lease was taken over: this holder's writes are refused and its step stops."""


@dataclass(frozen=True)
class Fence:
    """What a child process needs to write its step's checkpoints and keys: the store's
    URL (with its password: it travels only through the spawn pipe) and the epoch."""

    store_url: str
    epoch: int


class Progress:
    """Checkpoint and operation-key writes of one run, fenced on its lease ``epoch``.

    ``store`` is the executor's store, or (child process) a callable opening one on first
    use; :meth:`close` closes a store opened that way."""

    def __init__(self, store: WorkerStore | Callable[[], WorkerStore], run_id: str, job_id: str,
                 epoch: int) -> None:
        self._store = store if not callable(store) else None
        self._open = store if callable(store) else None
        self._owned = False
        self.run_id, self.job_id, self.epoch = run_id, job_id, epoch
        self._lock = threading.Lock()

    @property
    def store(self) -> WorkerStore:
        with self._lock:
            if self._store is None:
                assert self._open is not None
                self._store = self._open()
                self._owned = True
            return self._store

    def save_state(self, step: str, state_json: str) -> bool:
        return self.store.save_step_state(self.run_id, self.epoch, step, state_json)

    def load_state(self, step: str) -> Any:
        return self.store.load_step_state(self.run_id, step)

    def find_key(self, key: str) -> KeyRecord | None:
        return self.store.find_operation_key(self.job_id, key)

    def record_key(self, key: str, result_json: str, *, fenced: bool = True) -> KeyRecord | None:
        return self.store.record_operation_key(self.job_id, key, result_json, self.run_id,
                                               self.epoch if fenced else None)

    def held(self) -> bool:
        return self.store.run_is_held(self.run_id, self.epoch)

    def close(self) -> None:
        with self._lock:
            if self._owned and self._store is not None:
                self._store.close()
                self._store = None


_BOUND: OrderedDict[str, tuple[WorkerStore, int]] = OrderedDict()
_BOUND_LOCK = threading.Lock()


def bind_run(run_id: str, store: WorkerStore, epoch: int) -> None:
    """Record that this process holds ``run_id`` at ``epoch`` in ``store`` (called by the
    tracker at each claim); the ``ctx`` of its steps write their checkpoints there. Only
    the latest :data:`_MAX_BOUND` runs are kept (far more than a node runs at once)."""
    with _BOUND_LOCK:
        _BOUND[run_id] = (store, epoch)
        _BOUND.move_to_end(run_id)
        while len(_BOUND) > _MAX_BOUND:
            _BOUND.popitem(last=False)


def bound_progress(run: RunInfo) -> Progress | None:
    """The :class:`Progress` of a run bound in this process, or None."""
    with _BOUND_LOCK:
        found = _BOUND.get(run.id)
    return None if found is None else Progress(found[0], run.id, run.job_id, found[1])


def bound_fence(run_id: str) -> Fence | None:
    """The :class:`Fence` a child process of ``run_id`` needs, or None when not bound."""
    with _BOUND_LOCK:
        found = _BOUND.get(run_id)
    if found is None:
        return None
    store, epoch = found
    return Fence(store.engine.url.render_as_string(hide_password=False), epoch)


def fence_progress(fence: Fence, run: RunInfo) -> Progress:
    """A child's :class:`Progress`: the store at ``fence.store_url``, opened on first use."""

    def open_store() -> WorkerStore:
        from cadenza.store import Store

        return Store.open(fence.store_url, migrate=False)

    return Progress(open_store, run.id, run.job_id, fence.epoch)


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
        progress: Progress | None = None,
        clock: Clock | None = None,
        lease: Callable[[], float | None] | None = None,
        calls: Any = None,
        resources: Mapping[str, Sequence[LeasedResource]] | None = None,
    ) -> None:
        self.params: Mapping[str, Any] = _ReadOnly(params)
        # The executor's ChildCalls (executor/calls.py): what a call_job step runs through.
        self.calls = calls
        self.resources: Mapping[str, Sequence[LeasedResource]] = (
            resources if isinstance(resources, LazyResources) else _ReadOnly(resources or {}))
        """Pool name -> the members the run holds (docs/pools.md); values from secrets are
        known to the redactor."""
        # Seconds until the run's lease surely held ends, minus a margin (RunControl.lease_left):
        # a thread step stops acting and commits nothing once it has passed.
        self._lease = lease
        self.run = run
        self.step = step
        self.log = log
        self.home = home
        self.settings = settings
        self.scope = scope
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._connections = connections
        self._events = events
        self._outputs = dict(outputs or {})
        budget = step.timeout_seconds if timeout_seconds is None else timeout_seconds
        self._deadline = self.clock.monotonic() + budget
        self._canceled = False  # set once, read by the step's thread
        self._sql: dict[str, sa.Connection] = {}
        self._http: dict[str, httpx.Client] = {}
        self._lock = threading.Lock()
        self._progress = progress if progress is not None else bound_progress(run)
        self._state: list[Any] | None = None  # [state] once read or saved

    def route(self, pool: str | None = None) -> LeasedResource | None:
        """A route the run holds: of ``pool`` when given, else any (bound ones included)."""
        return find_route(self.resources, pool)

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
                try:
                    conn = self._connections.sql_engine(name).connect()
                except Exception as exc:  # classified where every database error is
                    from cadenza.steps.builtin.lib.sqlutil import translate

                    raise translate(exc, f"connection {name!r}: cannot connect") from exc
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
        self._events(EventSpec(str(event_type), message, str(level).upper(),
                               dict(payload) if payload is not None else None,
                               self.clock.now()))

    def cancelled(self) -> bool:
        """True once the step's time is up, the run is being stopped, or the run's lease
        is about to end without a renewal (a worker stopped or cut from the store)."""
        return (self._canceled or self.clock.monotonic() >= self._deadline
                or self.lease_passed())

    def lease_passed(self) -> bool:
        """Whether the lease this worker surely held ends within the margin (no renewal came
        in time): the step must not act any more. False without a lease (a test's run)."""
        if self._lease is None:
            return False
        left = self._lease()
        return left is not None and left <= 0

    def remaining(self) -> float:
        """Seconds left before the step's timeout (never negative); 0 once the run's lease
        passed (:meth:`lease_passed`: the step has no time left to act, and what stops
        because of it is retryable, as after a timeout)."""
        if self.lease_passed():
            return 0.0
        return max(0.0, self._deadline - self.clock.monotonic())

    def previous(self, step: str) -> Mapping[str, Any] | None:
        """An earlier step's record: ``{"state", "rows", "output"}``, or None."""
        return self._outputs.get(step)

    def restart(self, deadline: float) -> None:
        """The step starts now (it may have been prepared seconds before its run's due
        time): its time is up at ``deadline`` (the clock's monotonic time)."""
        self._deadline = deadline

    def cancel(self) -> None:
        """Make :meth:`cancelled` true (the executor gave up on the step)."""
        self._canceled = True

    # -- checkpoints and operation keys (see the module docstring) ----------------------

    def _need_progress(self, what: str) -> Progress:
        if self._progress is None:
            raise Fatal(f"step {self.step.name!r}: {what} needs a run executed by Cadenza's "
                        "executor (this context has no store)")
        return self._progress

    def _fenced_out(self, what: str) -> FencedOut:
        self.cancel()
        return FencedOut(f"step {self.step.name!r}: {what} refused: the run's lease was taken "
                         "over by another holder; this attempt stops")

    def checkpoint(self, state: Any) -> None:
        """Save ``state`` (JSON-able, at most 1 MiB as JSON) as this step's progress, in the
        store at once; a later attempt of the step reads it as :attr:`last_checkpoint`."""
        progress = self._need_progress("ctx.checkpoint")
        text = _to_json(state, f"step {self.step.name!r}: ctx.checkpoint(state)")
        size = len(text.encode("utf-8"))
        if size > MAX_CHECKPOINT:
            raise Fatal(f"step {self.step.name!r}: ctx.checkpoint(state): the state is {size} "
                        f"bytes as JSON, more than the {MAX_CHECKPOINT} allowed; keep a "
                        "position (a counter, a key), not the data")
        if not progress.save_state(self.step.name, text):
            raise self._fenced_out("ctx.checkpoint")
        self._state = [json.loads(text)]

    @property
    def last_checkpoint(self) -> Any:
        """The state this step saved last with :meth:`checkpoint` (in an earlier attempt,
        or in this one), or None for a step that never saved one."""
        if self._state is None:
            progress = self._progress
            self._state = [None if progress is None else progress.load_state(self.step.name)]
        return self._state[0]

    def once(self, key: str, fn: Callable[..., Any], *args: Any, connection: str | None = None,
             **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` unless ``key`` is recorded for this job; then record the
        key with ``fn``'s result (JSON-able) and return the result, as decoded from its
        JSON (the recorded one when skipped). With ``connection=NAME`` (a ``sql``
        connection), ``fn`` gets an open transaction on it as first argument and the key is
        recorded in that database in the same transaction (see the module docstring)."""
        where = f"step {self.step.name!r}: ctx.once({key!r})"
        if not isinstance(key, str) or not key or len(key) > MAX_KEY or any(
                ord(c) < 32 for c in key):
            raise Fatal(f"step {self.step.name!r}: ctx.once: the key must be text of 1 to "
                        f"{MAX_KEY} characters without control characters, got {key!r}")
        progress = self._need_progress("ctx.once")
        if connection is not None:
            return self._once_in(connection, key, fn, args, kwargs, progress, where)
        found = progress.find_key(key)
        if found is not None:
            self.log.info("ctx.once(%s): already done (run %s); skipped", key, found.run_id)
            return found.result
        text = _to_json(fn(*args, **kwargs), f"{where}: the result of fn")
        record = progress.record_key(key, text)
        if record is None:
            raise self._fenced_out(f"ctx.once({key!r}) (its effect was applied)")
        if not record.recorded:
            self.log.warning("ctx.once(%s): run %s recorded this key while this run applied "
                             "its effect: both effects happened (use connection= to make "
                             "effect and key one transaction); its result is returned",
                             key, record.run_id)
        return record.result

    def _once_in(self, name: str, key: str, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], progress: Progress, where: str) -> Any:
        from cadenza.steps.builtin.lib import sqlutil

        if not isinstance(self._connections.definition(name), SqlConnection):
            raise Fatal(f"{where}: connection {name!r} is not a sql connection")
        engine = self._connections.sql_engine(name)
        job = self.run.job_id
        me: Any = self  # a StepContext (its log is a StepLogger, which mypy cannot match)
        sqlutil.ensure_operation_keys(engine, f"{where}: cannot create "
                                      f"{sqlutil.OPERATION_KEYS.name}")
        found = sqlutil.find_operation_key(engine, job, key)
        if found is None:
            failed: list[BaseException] = []
            try:
                with sqlutil.transaction(engine, me, f"{where} on {name!r}") as (conn, _):
                    try:
                        value = fn(conn, *args, **kwargs)
                    except BaseException as exc:  # fn's own error, unchanged, after rollback
                        failed.append(exc)
                        raise _RolledBack() from None
                    text = _to_json(value, f"{where}: the result of fn")
                    if not sqlutil.insert_operation_key(conn, job, key, text, self.run.id,
                                                        self.clock.now()):
                        raise _RolledBack()
                    if not progress.held():
                        raise self._fenced_out(f"ctx.once({key!r})")
                self.log.debug("ctx.once(%s): applied and recorded in %s", key, name)
                found = (json.loads(text), self.run.id)
            except _RolledBack:
                if failed:
                    raise failed[0] from None
                found = sqlutil.find_operation_key(engine, job, key)
                if found is None:
                    raise Retryable(f"{where}: the key was taken, then vanished") from None
                self.log.warning("ctx.once(%s): run %s applied it first; this run's effect "
                                 "was rolled back and its result is returned", key, found[1])
        else:
            self.log.info("ctx.once(%s): already done (run %s); skipped", key, found[1])
        result = found[0]
        try:  # for visibility (cadenza runs show): the target database is the authority
            progress.record_key(key, json.dumps(result), fenced=False)
        except Exception as exc:
            self.log.warning("ctx.once(%s): the key is recorded in %s but could not be "
                             "mirrored into the store: %s", key, name, exc)
        return result

    def close_progress(self) -> None:
        """Close a store this context opened for itself (a child process's)."""
        if self._progress is not None:
            self._progress.close()

    def finish(self, success: bool) -> None:
        """Commit (``success``) or roll back every SQL connection, close every client.

        Every connection is closed even if one commit fails; the first error is raised.
        Nothing is committed once the run's lease passed (:meth:`lease_passed`): the work is
        rolled back and :class:`~cadenza.domain.errors.Retryable` raised, since another
        worker may be running the step again."""
        first: BaseException | None = None
        if success and self.lease_passed():
            success = False
            first = Retryable(f"step {self.step.name!r}: the run's lease ran out before its "
                              "work could be committed; it was rolled back")
        with self._lock:
            sql, self._sql = list(self._sql.values()), {}
            http, self._http = list(self._http.values()), {}
        # An abandoned or canceled step's worker may already have disposed of the engines:
        # its connections are closed, never handed back to a pool nobody holds any more.
        discard = self.cancelled()
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
                if discard:
                    with contextlib.suppress(Exception):
                        conn.invalidate()
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
        # Cut before the store redacts the line: never inside a secret (the cut moves on
        # to the next blank), or its first characters would be kept unrecognised.
        binds = cut_before_redaction(repr(parameters), MAX_SQL_LOGGED, "...")
        text = cut_before_redaction(statement, MAX_SQL_LOGGED, "...")
        many = " (executemany)" if executemany else ""
        self.log.debug("SQL%s: %s | binds: %s", many, text.strip(), binds)


class _RolledBack(StepError):
    """Internal: roll the once-transaction back (fn failed, or the key was taken)."""


def _to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise Fatal(f"{what} is not JSON-able ({exc})") from None


def check_result(value: object, step: str,
                 limit: int = STEP_OUTPUT_BYTES) -> StepResult:
    """``value`` as a :class:`StepResult` whose ``output`` is a JSON-able dict; :class:`Fatal`
    otherwise (a step type returning something else is a bug that retrying cannot fix). An
    output whose JSON is longer than ``limit`` is replaced by its summary
    (:mod:`cadenza.domain.outputs`)."""
    if not isinstance(value, StepResult):
        raise Fatal(f"step {step!r} returned {type(value).__name__}, expected a StepResult")
    rows = value.rows
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)):
        raise Fatal(f"step {step!r}: rows must be an integer or None, got {rows!r}")
    if not isinstance(value.output, Mapping):
        raise Fatal(f"step {step!r}: output must be a dict, got {type(value.output).__name__}")
    if not value.output and limit >= 2:  # "{}": most steps' output, nothing to check
        return value
    try:
        encoded = json.dumps(dict(value.output), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Fatal(f"step {step!r}: its output is not JSON-able ({exc})") from None
    if len(encoded) > limit:  # ASCII (json.dumps escapes the rest): characters are bytes
        return StepResult(value.rows, summarize(value.output, len(encoded), limit))
    return value


class LazyResources(Mapping[str, Sequence[LeasedResource]]):
    """``ctx.resources`` read at its first use (most steps never look: a run's no-op step
    then costs no read and builds nothing, docs/benchmarks.md); read-only."""

    def __init__(self, read: Callable[[], Mapping[str, Sequence[LeasedResource]]]) -> None:
        self._read: Callable[[], Mapping[str, Sequence[LeasedResource]]] | None = read
        self._data: dict[str, Sequence[LeasedResource]] = {}

    def _held(self) -> dict[str, Sequence[LeasedResource]]:
        read = self._read
        if read is not None:
            self._data = dict(read())
            self._read = None
        return self._data

    def __getitem__(self, key: str) -> Sequence[LeasedResource]:
        return self._held()[key]

    def __iter__(self) -> Any:
        return iter(self._held())

    def __len__(self) -> int:
        return len(self._held())

    def __repr__(self) -> str:
        return f"resources({self._held()!r})"

    def __reduce__(self) -> Any:
        return (_ReadOnly, (self._held(),))


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
