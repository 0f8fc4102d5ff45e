"""State machines of runs, step runs and resources (docs/store.md, docs/pools.md), as data.

Each machine is a table ``{from_state: allowed_to_states}``; ``None`` as the from-state
stands for creation. :func:`check` enforces a table in code; the store enforces the same
table with ``UPDATE ... WHERE state IN (sources_of(to))`` and checks the row count.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

from cadenza.domain.errors import InvalidTransition


class RunState(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    MISSED = "MISSED"
    NEEDS_REVIEW = "NEEDS_REVIEW"


class StepState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELED = "CANCELED"


class ResourceState(StrEnum):
    AVAILABLE = "AVAILABLE"
    LEASED = "LEASED"
    RUNNING = "RUNNING"
    COOLDOWN = "COOLDOWN"
    FAULT = "FAULT"
    DISABLED = "DISABLED"


R = RunState
RUN_TRANSITIONS: Mapping[RunState | None, frozenset[RunState]] = {
    None: frozenset({R.QUEUED, R.MISSED}),
    R.QUEUED: frozenset({R.RUNNING, R.CANCELED}),
    R.RUNNING: frozenset({R.SUCCEEDED, R.FAILED, R.CANCELED, R.QUEUED, R.NEEDS_REVIEW}),
    R.NEEDS_REVIEW: frozenset({R.QUEUED, R.FAILED}),
    R.SUCCEEDED: frozenset(),
    R.FAILED: frozenset(),
    R.CANCELED: frozenset(),
    R.MISSED: frozenset(),
}

S = StepState
# The step states, in the smallest table that records
# one row per attempt: a row is created PENDING (or directly RUNNING / SKIPPED) and ends once.
# RUNNING -> PENDING is a step that waits without a worker (a call_job step waiting for its
# child run; its reason says so): the same attempt goes on RUNNING when its run is taken
# again, or ends CANCELED with its run.
STEP_TRANSITIONS: Mapping[StepState | None, frozenset[StepState]] = {
    None: frozenset({S.PENDING, S.RUNNING, S.SKIPPED}),
    S.PENDING: frozenset({S.RUNNING, S.SKIPPED, S.CANCELED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELED, S.PENDING}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.SKIPPED: frozenset(),
    S.CANCELED: frozenset(),
}

X = ResourceState
RESOURCE_TRANSITIONS: Mapping[ResourceState | None, frozenset[ResourceState]] = {
    None: frozenset({X.AVAILABLE, X.DISABLED}),
    X.AVAILABLE: frozenset({X.LEASED, X.COOLDOWN, X.DISABLED}),
    X.LEASED: frozenset({X.RUNNING, X.AVAILABLE, X.DISABLED}),
    X.RUNNING: frozenset({X.COOLDOWN, X.FAULT, X.DISABLED}),
    X.COOLDOWN: frozenset({X.AVAILABLE, X.DISABLED}),
    X.FAULT: frozenset({X.AVAILABLE, X.DISABLED}),
    X.DISABLED: frozenset({X.AVAILABLE}),
}



class Lease(StrEnum):
    """What an UPDATE that moves a resource by a :data:`RESOURCE_SHORTCUTS` entry does to
    its lease, as the database sees it in the row (the evidence that the steps between were
    taken in the statement, not skipped)."""

    TAKEN = "taken"
    """A lease taken: ``lease_epoch`` one more, a holder (``lease_owner``) set."""
    GIVEN_BACK = "given back"
    """A lease taken in the same transaction put back (nobody saw it): ``lease_epoch`` one
    less, no holder."""


RESOURCE_SHORTCUTS: Mapping[tuple[ResourceState, ResourceState], Lease] = {
    # A member whose cooldown has passed is leased in one statement.
    (X.COOLDOWN, X.LEASED): Lease.TAKEN,  # COOLDOWN -> AVAILABLE -> LEASED
    # A claim that starts its runs' first steps leases straight to RUNNING.
    (X.AVAILABLE, X.RUNNING): Lease.TAKEN,  # AVAILABLE -> LEASED -> RUNNING
    (X.COOLDOWN, X.RUNNING): Lease.TAKEN,  # COOLDOWN -> AVAILABLE -> LEASED -> RUNNING
    # A claim that cannot have all it needs puts back what it took, as it was.
    (X.LEASED, X.COOLDOWN): Lease.GIVEN_BACK,
    (X.RUNNING, X.AVAILABLE): Lease.GIVEN_BACK,
}
"""Moves the pool leaser makes in one statement, each a path of
:data:`RESOURCE_TRANSITIONS` (taken) or the undoing of one in its own transaction (given
back). The database accepts them only with the lease change that proves it
(:class:`Lease`); nothing else may skip a step. :func:`check` and the store's
compare-and-swap know only the table: these are the leaser's SQL's, and the trigger's."""

TERMINAL_RUN_STATES = frozenset({R.SUCCEEDED, R.FAILED, R.CANCELED, R.MISSED})
ACTIVE_RUN_STATES = frozenset({R.QUEUED, R.RUNNING, R.NEEDS_REVIEW})

E = TypeVar("E", RunState, StepState, ResourceState)

MACHINES: Mapping[str, Mapping[object, frozenset[object]]] = {
    "run": RUN_TRANSITIONS,  # type: ignore[dict-item]
    "step_run": STEP_TRANSITIONS,  # type: ignore[dict-item]
    "resource": RESOURCE_TRANSITIONS,  # type: ignore[dict-item]
}


def sources_of(table: Mapping[E | None, frozenset[E]], to: E) -> frozenset[E]:
    """The states from which ``to`` may be reached (creation excluded)."""
    return frozenset(s for s, targets in table.items() if s is not None and to in targets)


def is_allowed(table: Mapping[E | None, frozenset[E]], frm: E | None, to: E) -> bool:
    """Whether ``frm -> to`` is in the table (``frm=None`` means creation)."""
    return to in table.get(frm, frozenset())


def check(machine: str, table: Mapping[E | None, frozenset[E]], frm: E | None, to: E) -> None:
    """Raise :class:`InvalidTransition` unless ``frm -> to`` is allowed."""
    if not is_allowed(table, frm, to):
        raise InvalidTransition(machine, frm, to)
