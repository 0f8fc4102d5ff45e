"""Fixtures of the scheduler tests: a FakeClock and a real SQLite store file."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from scheduler_helpers import MakeScheduler

from cadenza.clock import FakeClock
from cadenza.scheduler.service import Scheduler
from cadenza.store import Store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-03-01T00:00:00+00:00")


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{(tmp_path / 'cadenza.db').as_posix()}", clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def make_scheduler(store: Store, clock: FakeClock) -> MakeScheduler:
    """A Scheduler on the test's store and clock (each call: a fresh process's scheduler)."""

    def make(jobs: Any, **kwargs: Any) -> Scheduler:
        kwargs.setdefault("rng", random.Random(1))
        kwargs.setdefault("default_zone", ZoneInfo("UTC"))
        return Scheduler(store, jobs, clock=clock, **kwargs)

    return make
