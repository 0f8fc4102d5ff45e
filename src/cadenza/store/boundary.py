"""What an executor asks the store to record at once (see :mod:`cadenza.store.boundaries`).

Plain frozen values: an executor builds them while a run goes on and hands a whole
:class:`Boundary` to :meth:`~cadenza.store.boundaries.BoundaryWriter.record_boundaries`,
which writes it in one transaction (together with other runs' boundaries, when a group
commit collects several).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cadenza.domain.states import RunState, StepState


@dataclass(frozen=True, slots=True)
class NewRun:
    """An unscheduled run to create QUEUED (manual or call_job trigger).

    ``params`` are the run's parameter overrides as given; ``overrides`` the rest of the run
    request (preset, step_args, disabled_steps, log_level)."""

    job_id: str
    trigger: str
    scheduled_for: datetime | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    priority: int = 0
    not_before: datetime | None = None
    actor: str = "system"


@dataclass(frozen=True, slots=True)
class LogLine:
    """One run log line as produced (its own time), before redaction."""

    ts: datetime
    level: str
    step: str | None
    message: str


@dataclass(frozen=True, slots=True)
class EventSpec:
    """An audit event a step asked for (``ctx.event``), written with its boundary."""

    event_type: str
    message: str
    level: str = "INFO"
    payload: Any = None
    ts: datetime | None = None


@dataclass(frozen=True, slots=True)
class StepStart:
    """A step run row to create: RUNNING (the step starts now) or SKIPPED with a reason
    (disabled | earlier step failed | canceled). With ``resumes``, no row is created: the
    PENDING row of that id (an attempt that waited, e.g. a call_job step for its child)
    goes on RUNNING."""

    step: str
    step_type: str
    attempt: int = 1
    state: StepState = StepState.RUNNING
    reason: str | None = None
    resumes: int | None = None


@dataclass(frozen=True, slots=True)
class StepEnd:
    """The end of a RUNNING step run: SUCCEEDED, FAILED or CANCELED, with what it recorded;
    or PENDING (with the wait in ``reason``): the attempt waits, its run goes back to QUEUED,
    and it goes on when the run is taken again (:attr:`StepStart.resumes`)."""

    step_run_id: int
    step: str
    step_type: str
    attempt: int
    state: StepState
    rows: int | None = None
    output: Any = None
    error: str | None = None
    error_class: str | None = None
    reason: str | None = None
    seconds: float | None = None
    """How long the attempt ran (its event says it; the run log does not restate it)."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The end of the run's execution: a terminal state, its rows, its error.

    Two ends are not final (docs/retries.md): QUEUED (a retry or deferral: ``not_before`` is when
    the next try may start, ``wait_reason`` says why it waits) and NEEDS_REVIEW (the retry
    attempts are spent). Both keep finished_at empty. ``attempt``, when given, sets the
    run's spent attempts (``runs.attempt``)."""

    state: RunState
    rows: int | None = None
    error: str | None = None
    reason: str | None = None
    not_before: datetime | None = None
    wait_reason: str | None = None
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The run's step-level checkpoint after a boundary: the step to run next and the
    outputs of the steps done so far (``${steps.NAME.*}``, each with its ``rows``).
    Writing it clears the step-local state (``step_state_json``) of the previous step."""

    next_step: str
    outputs: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Boundary:
    """Everything recorded between two steps of one run, fenced on the run's lease ``epoch``.

    Applied in this order: ``step_end``, ``starts``, ``params`` (the run's resolved
    parameters), ``run_end``, ``checkpoint``; ``logs`` and ``events`` go with them."""

    run_id: str
    epoch: int
    step_end: StepEnd | None = None
    starts: Sequence[StepStart] = ()
    run_end: RunEnd | None = None
    params: Mapping[str, Any] | None = None
    logs: Sequence[LogLine] = ()
    events: Sequence[EventSpec] = ()
    actor: str = "system"
    checkpoint: Checkpoint | None = None
    rows: int | None = None
    """The run's rows so far: its rows should the boundary end the run after all (a step
    that must wait for its resources, see ``record_boundaries``)."""

    def is_empty(self) -> bool:
        """True when there is nothing to write."""
        return not (self.step_end or self.starts or self.run_end or self.params is not None
                    or self.logs or self.events or self.checkpoint)


@dataclass(frozen=True, slots=True)
class BoundaryResult:
    """Whether a boundary was applied; the ids of the step runs it created (in the order of
    its ``starts``); the run's state (when refused: ``None`` if there is no such run)."""

    applied: bool
    step_run_ids: tuple[int, ...]
    state: RunState | None


@dataclass(frozen=True, slots=True)
class StepChange:
    """A boundary of a run that goes on: the step that ended in it (``None``: its first
    boundary) and the step that starts RUNNING in it (``None``: only skips, or nothing)."""

    run_id: str
    job_id: str
    ended: str | None
    starting: str | None


@dataclass(frozen=True, slots=True)
class EndedRun:
    """A run whose execution a boundary ended: its new state (terminal, QUEUED or
    NEEDS_REVIEW) and the lease epoch it held. ``child``: whether it is a child run
    (``parent_run_id`` set), when the writer knows it (``None``: unknown); a hook that acts
    on children only reads nothing for a batch of runs known to have no parent."""

    run_id: str
    job_id: str
    state: RunState
    epoch: int
    child: bool | None = None
