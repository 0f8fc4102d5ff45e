"""The scheduler's look-ahead (``cadenza serve``): fires recorded before their time, on a
FakeClock and a real SQLite file. Rules: docs/scheduling.md, "Look-ahead"."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cadenza.clock import FakeClock
from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.states import RunState
from cadenza.scheduler.service import LOOKAHEAD, Scheduler
from cadenza.store import RunRecord, Store

FIRE = datetime.fromisoformat("2027-03-01T02:00:00+00:00")


def job(job_id: str, **fields: Any) -> JobConfig:
    fields.setdefault("timezone", "UTC")
    fields.setdefault("schedule", "0 2 * * *")
    return JobConfig.model_validate({"id": job_id, **fields})


def jobs(*items: JobConfig) -> dict[str, JobConfig]:
    return {item.id: item for item in items}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-03-01T01:00:00+00:00")


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{(tmp_path / 'cadenza.db').as_posix()}", clock=clock)
    yield opened
    opened.close()


def scheduler(store: Store, clock: FakeClock, config: Any) -> Scheduler:
    return Scheduler(store, config, clock=clock, rng=random.Random(1),
                     default_zone=ZoneInfo("UTC"), lookahead=LOOKAHEAD)


def scheduled(store: Store, job_id: str | None = None) -> list[RunRecord]:
    return [r for r in store.list_runs(job=job_id, limit=10_000) if r.trigger == "scheduled"]


def test_lookahead_is_a_few_seconds() -> None:
    assert timedelta(seconds=1) <= LOOKAHEAD <= timedelta(seconds=5)


def test_a_fire_is_recorded_ahead_with_not_before_its_time(store: Store,
                                                            clock: FakeClock) -> None:
    s = scheduler(store, clock, jobs(job("nightly", priority=4)))
    s.tick(clock.now())
    # The loop wakes LOOKAHEAD before the fire, not at it.
    assert s.next_wakeup(clock.now()) == FIRE - LOOKAHEAD
    clock.set(FIRE - LOOKAHEAD)
    result = s.tick(clock.now())
    assert len(result.queued) == 1
    (run,) = scheduled(store)
    assert run.state is RunState.QUEUED
    assert run.scheduled_for == FIRE and run.not_before == FIRE
    assert run.created_at < FIRE and run.priority == 4
    assert store.get_cursors()[("nightly", "job")] == FIRE
    assert s.next_wakeup(clock.now()) == FIRE + timedelta(days=1) - LOOKAHEAD
    # Its due time changes nothing: the fire is recorded once.
    clock.set(FIRE + timedelta(milliseconds=20))
    assert s.tick(clock.now()).created == ()
    assert len(scheduled(store)) == 1


def test_not_yet_inside_the_lookahead_records_nothing(store: Store, clock: FakeClock) -> None:
    s = scheduler(store, clock, jobs(job("nightly")))
    s.tick(clock.now())
    clock.set(FIRE - LOOKAHEAD - timedelta(milliseconds=1))
    assert s.tick(clock.now()).created == ()
    assert scheduled(store) == []


def test_jitter_stays_on_top_of_the_scheduled_time(store: Store, clock: FakeClock) -> None:
    s = scheduler(store, clock, jobs(job("nightly", jitter="10m")))
    s.tick(clock.now())
    clock.set(FIRE - LOOKAHEAD)
    s.tick(clock.now())
    (run,) = scheduled(store)
    assert run.scheduled_for == FIRE and run.not_before is not None
    assert timedelta(0) <= run.not_before - FIRE <= timedelta(minutes=10)


def test_without_lookahead_the_fire_waits_for_its_time(store: Store, clock: FakeClock) -> None:
    s = Scheduler(store, jobs(job("nightly")), clock=clock, default_zone=ZoneInfo("UTC"))
    s.tick(clock.now())
    assert s.next_wakeup(clock.now()) == FIRE
    clock.set(FIRE - LOOKAHEAD)
    assert s.tick(clock.now()).created == ()


def test_a_fire_overlap_would_skip_is_left_for_its_due_time(store: Store,
                                                             clock: FakeClock) -> None:
    s = scheduler(store, clock, jobs(job("nightly"), job("queueing", on_overlap="queue")))
    s.tick(clock.now())
    busy = store.create_run("nightly", "manual")
    store.create_run("queueing", "manual")
    clock.set(FIRE - LOOKAHEAD)
    s.tick(clock.now())
    # on_overlap = queue: recorded ahead; skip: not decided yet, and the loop now wakes at
    # the fire itself (no busy loop until then).
    assert [r.job_id for r in scheduled(store)] == ["queueing"]
    assert s.next_wakeup(clock.now()) == FIRE
    clock.set(FIRE - timedelta(seconds=1))
    assert s.tick(clock.now()).created == ()
    # The other run ended before the fire: at its due time the fire runs, as without
    # the look-ahead.
    store.transition_run(busy, RunState.CANCELED, reason="test")
    clock.set(FIRE + timedelta(milliseconds=5))
    s.tick(clock.now())
    (run,) = scheduled(store, "nightly")
    assert run.state is RunState.QUEUED and run.not_before is None


def test_a_held_fire_is_still_skipped_when_the_overlap_lasts(store: Store,
                                                             clock: FakeClock) -> None:
    s = scheduler(store, clock, jobs(job("nightly")))
    s.tick(clock.now())
    store.create_run("nightly", "manual")
    clock.set(FIRE - LOOKAHEAD)
    s.tick(clock.now())
    clock.set(FIRE + timedelta(milliseconds=5))
    s.tick(clock.now())
    (run,) = scheduled(store, "nightly")
    assert run.state is RunState.MISSED and str(run.reason).startswith("overlap:")


@pytest.mark.parametrize("change", ["removed", "disabled", "changed"])
def test_a_reload_withdraws_a_fire_recorded_ahead(store: Store, clock: FakeClock,
                                                   change: str) -> None:
    s = scheduler(store, clock, jobs(job("nightly"), job("other")))
    s.tick(clock.now())
    clock.set(FIRE - LOOKAHEAD)
    s.tick(clock.now())
    assert len(scheduled(store)) == 2
    new = {"removed": jobs(job("other")),
           "disabled": jobs(job("nightly", enabled=False), job("other")),
           "changed": jobs(job("nightly", schedule="30 2 * * *"), job("other"))}[change]
    clock.set(FIRE - timedelta(seconds=1))
    s.reload(new, clock.now())
    (gone,) = scheduled(store, "nightly")
    assert gone.state is RunState.CANCELED
    assert f"was {change} by a configuration reload" in str(gone.reason)
    assert "withdrawn before its fire" in str(gone.reason)
    # The untouched job keeps its fire; no fire is recorded twice or run late.
    (kept,) = scheduled(store, "other")
    assert kept.state is RunState.QUEUED
    clock.set(FIRE + timedelta(seconds=1))
    s.tick(clock.now())
    assert [r.state for r in scheduled(store, "nightly")] == [RunState.CANCELED]
    assert store.claim_runs("t", clock.now() + timedelta(minutes=1), limit=10) \
        and scheduled(store, "nightly")[0].state is RunState.CANCELED


def test_a_reload_keeps_a_fire_already_due(store: Store, clock: FakeClock) -> None:
    s = scheduler(store, clock, jobs(job("nightly")))
    s.tick(clock.now())
    clock.set(FIRE - LOOKAHEAD)
    s.tick(clock.now())
    clock.set(FIRE + timedelta(milliseconds=1))
    s.reload(jobs(), clock.now())
    (run,) = scheduled(store)
    assert run.state is RunState.QUEUED  # it was due: it runs (or waits) like any other


def test_a_reload_does_not_record_ahead_under_the_old_config(store: Store,
                                                             clock: FakeClock) -> None:
    s = scheduler(store, clock, jobs(job("nightly")))
    s.tick(clock.now())
    clock.set(FIRE - timedelta(seconds=1))  # inside the window, not ticked yet
    s.reload(jobs(), clock.now())
    assert scheduled(store) == []


# -- a server stopped inside the look-ahead window ------------------------------------------


def stop_inside_the_window(store: Store, clock: FakeClock, config: Any) -> None:
    first = scheduler(store, clock, config)
    first.tick(clock.now())
    clock.set(FIRE - timedelta(seconds=1))  # the fire is recorded ahead, then the server stops
    first.tick(clock.now())
    assert [r.state for r in scheduled(store)] == [RunState.QUEUED]


@pytest.mark.parametrize(("on_missed", "down_until", "kept"), [
    ("skip", FIRE + timedelta(minutes=10), False),
    ("skip", FIRE + timedelta(seconds=30), True),  # back within missed_grace (60 s): runs
    ("run_latest", FIRE + timedelta(minutes=10), True),  # the latest missed fire runs
    ("run_latest", FIRE + timedelta(days=2, minutes=10), False),  # later fires are owed
    ("run_all", FIRE + timedelta(days=2, minutes=10), True),
])
def test_a_fire_recorded_ahead_by_a_stopped_server_follows_on_missed(
        store: Store, clock: FakeClock, on_missed: str, down_until: datetime,
        kept: bool) -> None:
    config = jobs(job("nightly", on_missed=on_missed))
    stop_inside_the_window(store, clock, config)
    clock.set(down_until)
    second = scheduler(store, clock, config)
    assert second.settle_stale(clock.now()) == (0 if kept else 1)
    second.tick(clock.now())
    at_fire = [r for r in scheduled(store) if r.scheduled_for == FIRE]
    assert len(at_fire) == 1  # still exactly one row for the fire
    if kept:
        assert at_fire[0].state is RunState.QUEUED
    else:
        assert at_fire[0].state is RunState.CANCELED
        assert at_fire[0].reason is not None and at_fire[0].reason.startswith("missed")


def test_a_fire_recorded_ahead_of_a_removed_job_is_canceled_at_start(
        store: Store, clock: FakeClock) -> None:
    stop_inside_the_window(store, clock, jobs(job("nightly")))
    clock.set(FIRE + timedelta(minutes=10))
    second = scheduler(store, clock, jobs(job("other")))
    assert second.settle_stale(clock.now()) == 1
    (run,) = scheduled(store, "nightly")
    assert run.state is RunState.CANCELED
