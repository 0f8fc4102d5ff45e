"""Compare-and-swap state transitions, written once for every state machine of the store.

A machine (runs, step runs, resources) is data: its states, its ``TRANSITIONS`` table
(:mod:`cadenza.domain.states`), the row it moves and the columns a caller may set. One
transition, :meth:`Transitions._compare_and_swap`, in the caller's transaction or its own:

1. read the row (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` holds the lock);
   no row: refused, "does not exist";
2. ``UPDATE <table> SET state = :to ... WHERE <key> = :key AND state IN (sources_of(to))
   [AND <the epoch fence>]``: the database applies the same rule as the table, so a lost
   race and a forbidden transition look the same (no row changes, nothing is written);
3. exactly one row changed: the machine's events are inserted in the same transaction.

The result is ``(changed, state before)``; :meth:`Machine.refuse` turns a refusal into the
exception of the ``*_or_raise`` methods: :class:`StoreError` (no such row),
:class:`StaleEpoch` (the table allows it, only the epoch did not match) or
:class:`InvalidTransition` (with the state the row was in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, NoReturn, TypeVar

import sqlalchemy as sa

from cadenza.domain.errors import InvalidTransition, StaleEpoch, StoreError
from cadenza.domain.states import (
    ResourceState,
    RunState,
    StepState,
    is_allowed,
    sources_of,
)
from cadenza.store.codec import aware_values
from cadenza.store.core import StoreCore

S = TypeVar("S", RunState, StepState, ResourceState)

Change = Callable[[Any, datetime], tuple[sa.Executable, Mapping[str, Any]]]
"""(the row before, now) -> the conditional UPDATE and its parameters."""
Record = Callable[[sa.Connection, Any, Any, datetime], None]
"""(connection, the row before, the state before, now): writes the transition's events."""


@dataclass(frozen=True)
class Machine(Generic[S]):
    """One state machine of the store: what :meth:`Transitions._compare_and_swap` needs."""

    name: str
    """The machine's name in :class:`InvalidTransition` ("run", "step_run", "resource")."""
    noun: str
    """What the row is called in messages ("run", "step run", "resource")."""
    states: type[S]
    transitions: Mapping[S | None, frozenset[S]]
    table: sa.Table
    key: sa.Column[Any]
    select: sa.Select[Any]
    """The row before the change by ``:p_id``, ``FOR UPDATE``; it has a ``state`` column."""
    fields: frozenset[str]
    """Columns a transition may set explicitly (``fields=``)."""
    stale: str
    """The :class:`StaleEpoch` message after "<noun> <key>: " ({epoch}, {frm}, {to})."""

    def settable(self, fields: Mapping[str, Any] | None) -> dict[str, Any]:
        """``fields`` checked against :attr:`fields` (ValueError naming the others), with
        every datetime required timezone-aware."""
        values = aware_values(fields or {})
        unknown = set(values) - self.fields
        if unknown:
            raise ValueError(f"cannot set {self.noun} fields {sorted(unknown)}; "
                             f"allowed: {sorted(self.fields)}")
        return values

    def sources(self, to: S) -> list[str]:
        """The states ``to`` may be reached from, sorted (the ``state IN (...)`` list)."""
        return sorted(s.value for s in sources_of(self.transitions, to))

    def update(self, key: Any, to: S, values: Mapping[str, Any],
               *fence: sa.ColumnElement[bool]) -> sa.Update:
        """``UPDATE <table> SET values WHERE <key> = key AND state IN (sources of to)
        AND fence``."""
        return (sa.update(self.table)
                .where(self.key == key, self.table.c.state.in_(self.sources(to)), *fence)
                .values(dict(values)))

    def refuse(self, key: Any, to: S, epoch: int | None, frm: S | None) -> NoReturn:
        """Raise what a refused ``*_or_raise`` transition raises (see the module doc)."""
        if frm is None:
            raise StoreError(f"{self.noun} {key} does not exist")
        if epoch is not None and is_allowed(self.transitions, frm, to):
            raise StaleEpoch(f"{self.noun} {key}: "
                             + self.stale.format(epoch=epoch, frm=frm, to=to))
        raise InvalidTransition(self.name, frm, to)


class Transitions(StoreCore):
    """The transition skeleton shared by the repositories of runs, step runs and resources."""

    def _compare_and_swap(self, machine: Machine[S], key: Any, to: S,
                          conn: sa.Connection | None, change: Change, record: Record, *,
                          at: datetime | None = None) -> tuple[bool, S | None]:
        """Move the row ``key`` of ``machine`` to ``to`` (module doc); returns whether it
        changed and the state it was in (``None``: no such row). ``at``: the time written
        (default: now on the store's clock)."""
        with self._joined(conn) as c:
            before = c.execute(machine.select, {"p_id": key}).first()
            if before is None:
                return False, None
            frm = machine.states(before.state)
            if not sources_of(machine.transitions, to):
                return False, frm
            now = at or self._now()
            statement, params = change(before, now)
            if c.execute(statement, params).rowcount != 1:
                return False, frm
            record(c, before, frm, now)
            return True, frm
