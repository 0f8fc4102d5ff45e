"""Shared builders for the scheduler tests: jobs as validated ``JobConfig`` objects."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.states import RunState
from cadenza.scheduler.service import Scheduler
from cadenza.store import RunRecord, Store

MakeScheduler = Callable[..., Scheduler]
"""The ``make_scheduler`` fixture: a Scheduler on the test's store and clock."""


def job(job_id: str = "nightly", **fields: Any) -> JobConfig:
    """A job validated like jobs.toml would be (steps are not the scheduler's business)."""
    fields.setdefault("timezone", "Europe/Paris")
    return JobConfig.model_validate({"id": job_id, **fields})


def jobs(*items: JobConfig) -> dict[str, JobConfig]:
    return {item.id: item for item in items}


def at(text: str) -> datetime:
    """An aware instant from ISO text (an offset is required)."""
    value = datetime.fromisoformat(text)
    assert value.tzinfo is not None, text
    return value


def fires_of(store: Store, job_id: str | None = None) -> list[RunRecord]:
    """Every run of the store (of ``job_id``), oldest scheduled time first."""
    runs = store.list_runs(job=job_id, limit=100_000)
    return sorted(runs, key=lambda r: (r.scheduled_for or r.created_at, r.schedule or ""))


def states(runs: Iterable[RunRecord]) -> list[tuple[str, RunState]]:
    """(scheduled_for as ISO UTC, state) of each run."""
    return [
        (r.scheduled_for.isoformat() if r.scheduled_for else "-", r.state) for r in runs
    ]
