"""Fixtures of the store contract suite: one store per test, on every supported database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import StrEnum

import pytest
import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.store import Store
from cadenza.store.tables import resources, runs, step_runs

Force = Callable[[sa.Table, object, StrEnum], None]


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
    """Put a row straight into a state with raw SQL (test setup only: no event, no checks)."""
    keys = {runs: runs.c.id, step_runs: step_runs.c.id, resources: resources.c.resource_id}

    def put(table: sa.Table, key: object, state: StrEnum) -> None:
        with store.write() as conn:
            changed = conn.execute(
                sa.update(table).where(keys[table] == key).values(state=state.value)
            ).rowcount
        assert changed == 1

    return put
