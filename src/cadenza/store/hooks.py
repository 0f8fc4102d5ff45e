"""What the store calls inside its own transactions, given to it once as one
:class:`StoreHooks` table (built by :func:`cadenza.assembly.assemble` for every process:
``serve``, ``run --local``, the claimer process, the CLI's services): :class:`ClaimHook`,
:class:`StepLeaseHook`, :class:`StepStartHook`, :class:`RunEndHook` and :class:`MissedHook`,
one protocol each."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import sqlalchemy as sa

    from cadenza.store.boundary import EndedRun, StepChange


class ClaimHook(Protocol):
    """What else a run takes in its claim's transaction: the resource pools
    (:class:`~cadenza.resources.leasing.PoolLeaser`).

    Called with the transaction's connection, the runs just taken as ``(run_id, job_id)`` in
    admission order, and the claim's time; returns ``{run_id: why}`` for the runs that must
    not start now (they stay QUEUED with ``why`` as their wait_reason). ``steps``: run id ->
    the step whose start the claim writes too (a staged claim): that step's needs are taken
    with the run's, all or nothing. ``starting``: the caller writes the runs' first step
    starts in this transaction, then calls :meth:`flush`. Whatever it takes it takes in a
    fixed order (by resource id), all or nothing per run, so that two claims never wait on
    each other. Raising rolls the whole transaction back."""

    def __call__(self, conn: sa.Connection, taken: Sequence[tuple[str, str]], now: datetime,
                 steps: Mapping[str, str] | None = None,
                 starting: bool = False) -> Mapping[str, str]:
        ...

    def serves(self, conn: sa.Connection, job_ids: Sequence[str], now: datetime) -> bool:
        """False when none of ``job_ids`` can have what it needs now: the claim of the
        queue for those jobs is skipped (nothing to take, nothing to give back)."""
        ...

    def flush(self, conn: sa.Connection, now: datetime) -> None:
        """A claim made with ``starting`` and its first step starts are written: write what
        the hook held back (its lease events, one per member for both changes)."""
        ...


class StepLeaseHook(Protocol):
    """Called in the transaction of a batch of boundaries, before the step starts are
    written, with the boundaries that end a step or start one without ending their run:
    the resource pools return what the step that ended held and take what the starting
    step needs. Returns ``{run_id: why}`` for the runs whose step cannot start now: their
    boundary ends the run instead (QUEUED, ``wait_reason`` = why, no attempt spent).
    Raising rolls the batch back."""

    def __call__(self, conn: sa.Connection, changes: Sequence[StepChange],
                 now: datetime) -> Mapping[str, str]:
        ...


class StepStartHook(Protocol):
    """Called in the transaction of a batch of boundaries (and of a staged claim) with the
    runs ``(run_id, job_id)`` one of whose steps starts RUNNING in it: the resource pools
    move the members a run leased LEASED -> RUNNING there. Raising rolls the batch back."""

    def __call__(self, conn: sa.Connection, runs: Sequence[tuple[str, str]],
                 now: datetime) -> None:
        ...


class RunEndHook(Protocol):
    """Called in the transaction of every run end (a boundary's, the reaper's, a cancel, an
    abandon) with the runs whose execution ended: what else a run end releases (its
    resource leases), announces (a notification's outbox row) or wakes (a parent waiting
    for this child; the children of a canceled parent) is written there. Raising rolls the
    whole transaction back."""

    def __call__(self, conn: sa.Connection, ended: Sequence[EndedRun], now: datetime) -> None:
        ...


class MissedHook(Protocol):
    """Called in the transaction that records MISSED fires with the ``(run_id, job_id)`` of
    each MISSED run it inserted (the notifications' outbox)."""

    def __call__(self, conn: sa.Connection, missed: list[tuple[str, str]],
                 now: datetime) -> None:
        ...


@dataclass(frozen=True)
class StoreHooks:
    """Everything the store calls inside its own transactions, in one table, given to the
    store once (:meth:`~cadenza.store.core.StoreCore.use_hooks`). A cancel is a run end: the
    run end hooks see the runs a cancel ended (and a cancel of a parent reaches its children
    through the children's run end hook). Empty by default: a bare store (a test's, a
    backup's) writes runs and nothing else."""

    claim: ClaimHook | None = None
    step_lease: StepLeaseHook | None = None
    step_start: tuple[StepStartHook, ...] = ()
    run_end: tuple[RunEndHook, ...] = ()
    """In order: the pools release, the notifications write their outbox rows, the child
    runs wake their parent or follow its cancel."""
    missed: tuple[MissedHook, ...] = ()

    def names(self) -> dict[str, list[str]]:
        """Each hook's kind and the names of what fills it (for a test and for a log line)."""
        def name(hook: object) -> str:
            if isinstance(hook, types.MethodType):
                kind, method = type(hook.__self__), hook.__func__.__name__
            else:
                kind, method = type(hook), "__call__"
            return f"{kind.__module__}.{kind.__qualname__}.{method}"

        return {"claim": [name(self.claim)] if self.claim is not None else [],
                "step_lease": [name(self.step_lease)] if self.step_lease is not None else [],
                "step_start": [name(h) for h in self.step_start],
                "run_end": [name(h) for h in self.run_end],
                "missed": [name(h) for h in self.missed]}
