"""Fires recorded in bulk (``Store.create_fires``): the same rows and events as ``create_run``,
one row per fire whoever races for it, one event per row actually inserted (SPEC §6, §10)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from cadenza.audit.redact import Redactor
from cadenza.clock import FakeClock
from cadenza.domain.errors import InvalidTransition
from cadenza.domain.events import EventType
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.fires import NewFire
from cadenza.store.tables import event_log, runs

SECRET = "hunter2-S3CRET"
PARIS = ZoneInfo("Europe/Paris")


@pytest.fixture
def redacting(store: Store, store_url: str, clock: FakeClock) -> Iterator[Store]:
    """A second store on the same database whose redactor knows SECRET."""
    opened = Store.open(store_url, clock=clock, redactor=Redactor([SECRET]))
    yield opened
    opened.close()


def _fires(at: datetime) -> list[NewFire]:
    return [
        NewFire("a", "job", at),
        NewFire(
            "a",
            "preset:month-end",
            at,
            overrides={
                "preset": "month-end",
                "params": {"password": "pw-1", "dsn": f"postgresql://u:{SECRET}@db/x"},
            },
            priority=5,
            not_before=at + timedelta(seconds=42),
        ),
        NewFire(
            "b",
            "job",
            at.astimezone(PARIS),
            state=RunState.MISSED,
            reason=f"scheduler was not running (token={SECRET}); on_missed = skip",
            priority=-2,
        ),
        NewFire("c", "job", at - timedelta(minutes=1), reason="catch-up of a missed fire"),
    ]


def _snapshot(store: Store) -> list[tuple[Any, ...]]:
    """Every run (without its id) with its events (without their ids), in a stable order."""
    with store.read() as c:
        rows = c.execute(sa.select(runs).order_by(runs.c.job_id, runs.c.schedule)).all()
        events = c.execute(sa.select(event_log).order_by(event_log.c.event_id)).all()
    out = []
    for row in rows:
        mine = [
            tuple(v for k, v in e._mapping.items() if k not in ("event_id", "run_id"))
            for e in events
            if e.run_id == row.id
        ]
        out.append((tuple(v for k, v in row._mapping.items() if k != "id"), mine))
    return out


def test_it_writes_exactly_what_create_run_writes(redacting: Store, clock: FakeClock) -> None:
    fires = _fires(clock.now())
    for fire in fires:
        assert redacting.create_run(
            fire.job_id, "scheduled", state=fire.state, schedule=fire.schedule,
            scheduled_for=fire.scheduled_for, overrides=fire.overrides, reason=fire.reason,
            priority=fire.priority, not_before=fire.not_before, actor="scheduler",
        )
    one_by_one = _snapshot(redacting)
    with redacting.write() as c:
        c.execute(sa.delete(event_log))
        c.execute(sa.delete(runs))
    ids = redacting.create_fires(fires, actor="scheduler")
    assert all(ids)
    assert _snapshot(redacting) == one_by_one
    # ... and both redacted the run's reason and the events' messages and payloads (the
    # overrides column holds the preset's values from jobs.toml as they are, in both).
    events = [event for _row, events in one_by_one for event in events]
    assert SECRET not in repr(events) and "pw-1" not in repr(events) and "***" in repr(events)
    missed = redacting.get_run(str(ids[2]))
    assert missed is not None and missed.reason is not None and SECRET not in missed.reason
    [event] = redacting.list_events(run_id=str(ids[1]))
    assert event.payload["overrides"]["params"]["password"] == "***"
    assert SECRET not in event.payload["overrides"]["params"]["dsn"]


def test_existing_and_repeated_fires_are_skipped(store: Store, clock: FakeClock) -> None:
    at = clock.now()
    first = store.create_run("nightly", "scheduled", schedule="job", scheduled_for=at)
    fires = [
        NewFire("nightly", "job", at.astimezone(PARIS)),  # recorded already (same instant)
        NewFire("nightly", "job", at + timedelta(days=1)),
        NewFire("nightly", "job", at + timedelta(days=1), state=RunState.MISSED),  # repeated
        NewFire("nightly", "preset:x", at, state=RunState.MISSED, reason="overlap: busy"),
    ]
    ids = store.create_fires(fires, actor="scheduler")
    assert ids[0] is None and ids[2] is None and ids[1] and ids[3]
    assert len(set(ids)) == 3
    assert len(store.list_runs(job="nightly")) == 3
    created = store.list_events(event_type=EventType.RUN_CREATED)
    assert [e.run_id for e in created] == [first, ids[1]]
    [missed] = store.list_events(event_type=EventType.RUN_MISSED)
    assert (missed.run_id, missed.level, missed.actor) == (ids[3], "WARNING", "scheduler")
    run = store.get_run(str(ids[3]))
    assert run is not None
    assert (run.state, run.finished_at, run.reason) == (RunState.MISSED, at, "overlap: busy")
    queued = store.get_run(str(ids[1]))
    assert queued is not None and (queued.state, queued.finished_at) == (RunState.QUEUED, None)
    # Again: every fire exists now; nothing is written.
    assert store.create_fires(fires) == [None] * 4
    assert len(store.list_events(limit=100)) == 3
    assert store.create_fires([]) == []


def test_bad_input_is_refused_before_anything_is_written(store: Store, clock: FakeClock) -> None:
    at = clock.now()
    good = NewFire("j", "job", at)
    with pytest.raises(InvalidTransition):
        store.create_fires([good, NewFire("j", "job", at, state=RunState.RUNNING)])
    with pytest.raises(ValueError, match="timezone-aware"):
        store.create_fires([good, NewFire("j", "job", at.replace(tzinfo=None))])
    with pytest.raises(ValueError, match="timezone-aware"):
        store.create_fires([good, NewFire("k", "job", at, not_before=at.replace(tzinfo=None))])
    assert store.list_runs() == [] and store.list_events() == []


def test_it_joins_the_callers_transaction(store: Store, clock: FakeClock) -> None:
    with pytest.raises(RuntimeError), store.write() as conn:
        assert all(store.create_fires([NewFire("j", "job", clock.now())], conn=conn))
        raise RuntimeError("the caller's transaction fails")
    assert store.list_runs() == [] and store.list_events() == []


def test_a_large_batch_spans_several_statements(store: Store, clock: FakeClock) -> None:
    at = clock.now()
    fires = [NewFire(f"j{k:04d}", "job", at) for k in range(700)]
    early = store.create_fires(fires[::2])
    assert all(early)
    ids = store.create_fires(fires)
    assert [run_id is None for run_id in ids] == [k % 2 == 0 for k in range(700)]
    assert len(store.list_runs(limit=1000)) == 700
    events = store.list_events(event_type=EventType.RUN_CREATED, limit=1000)
    assert sorted(e.run_id or "" for e in events) == sorted([*early, *ids[1::2]])


def _race(stores: list[Store], orders: list[list[NewFire]]) -> list[list[str | None]]:
    """Each store inserts its batch in its own thread, all starting together."""
    results: list[list[str | None]] = [[] for _ in stores]
    start = threading.Barrier(len(stores))

    def insert(k: int) -> None:
        start.wait()
        results[k] = stores[k].create_fires(orders[k])

    threads = [threading.Thread(target=insert, args=(k,)) for k in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_racing_stores_record_each_fire_once(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    """Two stores (two engines, as two processes would have) insert the same batch at once,
    in opposite orders: one row and one event per fire, and each fire's id goes to one."""
    stores = [Store.open(store_url, clock=clock) for _ in range(2)]
    try:
        for round_ in range(5):
            at = clock.now() + timedelta(minutes=round_)
            batch = [NewFire(f"j{k:03d}", "job", at) for k in range(300)]
            results = _race(stores, [batch, batch[::-1]])
            forward, backward = results[0], results[1][::-1]
            assert len(forward) == len(backward) == 300
            assert all((a is None) != (b is None) for a, b in zip(forward, backward, strict=True))
        assert len(store.list_runs(limit=10_000)) == 5 * 300
        events = store.list_events(event_type=EventType.RUN_CREATED, limit=10_000)
        assert len(events) == 5 * 300
        with store.read() as c:
            ids = set(c.execute(sa.select(runs.c.id)).scalars())
        assert {e.run_id for e in events} == ids
    finally:
        for opened in stores:
            opened.close()
