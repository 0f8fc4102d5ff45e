"""What a step type sees while it runs, and what it returns.

The executor implements :class:`StepContext`; step modules code against this protocol
only, so that ``steps`` never imports ``executor`` (dependencies point one way).

A step type's ``run(ctx, config) -> StepResult`` receives its ``Config`` with every
``${...}`` token already substituted, except the fields it lists in ``raw_fields`` (for
example ``sql_query.query``, whose tokens must become bind parameters, never text: it
renders them itself with :func:`cadenza.domain.params.render_sql` and ``ctx.scope``).

Time: a step reads it from ``ctx.clock`` (a :class:`cadenza.clock.Clock`), never from
``time`` or ``datetime.now``: ``ctx.clock.now()`` for wall time (UTC), ``ctx.clock.monotonic()``
for durations and deadlines, ``ctx.clock.sleep(s)`` / ``ctx.clock.wait(event, timeout)`` to
wait. The executor's clock is the node's, so a test that drives the node with a
:class:`~cadenza.clock.FakeClock` drives its steps' timeouts too; ``ctx.remaining()`` and
``ctx.cancelled()`` count on the same clock. :func:`clock_of` reads it from a context that
may predate the attribute (a plugin's own test harness): the system clock then.

Errors: raise :class:`cadenza.Retryable`, :class:`cadenza.Deferred`,
:class:`cadenza.Fatal` or :class:`cadenza.ResourceFault`; a built-in step translates its
driver's exceptions into these at its boundary (docs/retries.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cadenza.clock import Clock, SystemClock

if TYPE_CHECKING:
    import httpx
    import sqlalchemy as sa

    from cadenza.config.schema_settings import Settings
    from cadenza.domain.params import Scope
    from cadenza.resources.leased import LeasedResource


@dataclass(frozen=True)
class StepResult:
    """What a step recorded: ``rows`` (None when the notion does not apply) and ``output``,
    a JSON-able dict stored (redacted) with the step run; its keys are readable by later
    steps as ``${steps.NAME.KEY}``."""

    rows: int | None = None
    output: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunInfo:
    """Facts of the run a step belongs to."""

    id: str
    job_id: str
    trigger: str
    scheduled_for: datetime | None
    log_level: str


@dataclass(frozen=True)
class StepInfo:
    """Facts of the step being run."""

    name: str
    type: str
    attempt: int
    timeout_seconds: float


class StepLog(Protocol):
    """A logger whose lines go to the run log (redacted), with the step's name."""

    def debug(self, message: str, *args: object) -> None: ...
    def info(self, message: str, *args: object) -> None: ...
    def warning(self, message: str, *args: object) -> None: ...
    def error(self, message: str, *args: object) -> None: ...


class StepContext(Protocol):
    """The ``ctx`` of a step, as built-in and plugin steps see it (docs/running.md)."""

    params: Mapping[str, Any]
    run: RunInfo
    step: StepInfo
    log: StepLog
    home: Path
    settings: Settings
    scope: Scope
    clock: Clock
    """Where the step reads time (see the module docstring); ``remaining()`` and
    ``cancelled()`` count on it."""
    resources: Mapping[str, Sequence[LeasedResource]]
    """Pool name -> the members the run holds (docs/pools.md)."""

    def route(self, pool: str | None = None) -> LeasedResource | None:
        """A route the run holds: of ``pool`` when given, else any (bound ones included)."""
        ...

    @property
    def job(self) -> RunInfo:
        """The job's id is ``ctx.job.job_id`` (same object as ``ctx.run``)."""
        ...

    def connection(self, name: str) -> sa.Connection | httpx.Client:
        """A ``sql`` connection: a SQLAlchemy Connection in a transaction that commits when
        the step succeeds and rolls back when it fails. An ``http`` connection: an httpx
        Client with the connection's base URL and headers."""
        ...

    def sql_engine(self, name: str) -> sa.Engine:
        """The engine of a ``sql`` connection, for steps that manage their own transactions."""
        ...

    def event(self, event_type: str, message: str, payload: Mapping[str, Any] | None = None,
              level: str = "INFO") -> None:
        """Write an audit event about this run (redacted)."""
        ...

    def cancelled(self) -> bool:
        """True once the run is being canceled or its time is up."""
        ...

    def remaining(self) -> float:
        """Seconds left before the step's timeout, on :attr:`clock`'s monotonic time."""
        ...

    def previous(self, step: str) -> Mapping[str, Any] | None:
        """An earlier step's recorded output and state, or None."""
        ...

    def checkpoint(self, state: Any) -> None:
        """Save the step's own progress (JSON-able, at most 1 MiB) durably, at once; a later
        attempt of the same step reads it back as :attr:`last_checkpoint` (docs/exactly-once.md)."""
        ...

    @property
    def last_checkpoint(self) -> Any:
        """The state this step saved last with :meth:`checkpoint` (None: never saved)."""
        ...

    def once(self, key: str, fn: Callable[..., Any], *args: Any, connection: str | None = None,
             **kwargs: Any) -> Any:
        """Apply ``fn(*args, **kwargs)`` at most once per ``key`` for the job: skipped (the
        recorded result returned) when the key is recorded, else called and the key recorded
        with its JSON-able result. ``connection=NAME``: ``fn`` gets an open transaction on
        that sql connection first, and effect and key commit together (docs/exactly-once.md)."""
        ...


_SYSTEM_CLOCK = SystemClock()


def clock_of(ctx: object) -> Clock:
    """``ctx.clock``; the system clock for a context without one (written before contexts
    carried a clock)."""
    clock = getattr(ctx, "clock", None)
    return clock if clock is not None else _SYSTEM_CLOCK
