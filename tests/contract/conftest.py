"""Fixtures of the store contract suite: one store per test, on every supported database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import StrEnum

import pytest
import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.domain.states import RESOURCE_TRANSITIONS, ResourceState
from cadenza.store import Store
from cadenza.store.tables import resources, runs, step_runs

Force = Callable[[sa.Table, object, StrEnum], None]


def legal_path(frm: ResourceState, to: ResourceState) -> list[StrEnum]:
    """The shortest walk of the resource state table from ``frm`` to ``to`` (the states
    after ``frm``; empty when they are the same)."""
    paths: dict[ResourceState, list[StrEnum]] = {frm: []}
    todo = [frm]
    while todo and to not in paths:
        here = todo.pop(0)
        for nxt in sorted(RESOURCE_TRANSITIONS.get(here, frozenset())):
            if nxt not in paths:
                paths[nxt] = [*paths[here], nxt]
                todo.append(nxt)
    return paths[to]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-03-01T08:00:00+00:00")


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[Store]:
    """A migrated store on a fresh database (SQLite file or PostgreSQL), closed afterwards."""
    opened = Store.open(store_url, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def force(store: Store) -> Force:
    """Put a row straight into a state with raw SQL (test setup only: no event, no checks
    but the database's own: a resource walks the state table there)."""
    keys = {runs: runs.c.id, step_runs: step_runs.c.id, resources: resources.c.resource_id}

    def put(table: sa.Table, key: object, state: StrEnum) -> None:
        with store.write() as conn:
            steps: list[StrEnum] = [state]
            if table is resources:  # the database refuses a resource's illegal moves
                now = conn.execute(sa.select(resources.c.state)
                                   .where(resources.c.resource_id == key)).scalar_one()
                steps = legal_path(ResourceState(now), ResourceState(state))
            for step in steps:
                changed = conn.execute(
                    sa.update(table).where(keys[table] == key).values(state=step.value)
                ).rowcount
                assert changed == 1

    return put
