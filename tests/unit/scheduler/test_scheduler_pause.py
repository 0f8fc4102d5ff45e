"""Scheduling paused by a person (the desktop's tray, ``cadenza scheduling pause``), on a
FakeClock and a real SQLite file: each fire due while paused is recorded MISSED with who
paused it and alerts nobody; nothing fires twice or is lost around the pause; the look-ahead
records nothing ahead while paused and the loop does not spin; resumed, fires run again."""

from __future__ import annotations

from datetime import timedelta

from scheduler_helpers import MakeScheduler, fires_of, job, jobs

from cadenza.clock import FakeClock
from cadenza.domain.events import EventType
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.desktop import SchedulingPauses
from cadenza.store.hooks import StoreHooks


def test_fires_due_while_paused_are_missed_with_who_paused_and_alert_nobody(
        make_scheduler: MakeScheduler, clock: FakeClock, store: Store) -> None:
    alerted: list[object] = []
    store.use_hooks(StoreHooks(missed=(lambda conn, missed, now: alerted.extend(missed),)))
    every = job("every", schedule="*/10 * * * *", max_concurrency=100)
    scheduler = make_scheduler(jobs(every), lookahead=timedelta(seconds=5))
    pauses = SchedulingPauses(store)
    clock.set("2027-03-01T09:00:30+00:00")
    scheduler.tick(clock.now())

    def run_until(stop: str) -> None:
        """Tick at each wake-up the scheduler asks for, as its loop does, until ``stop``;
        never twice at one instant (a spinning loop would)."""
        ticks = 0
        while True:
            wake = scheduler.next_wakeup(clock.now())
            assert wake is not None
            target = clock.now().fromisoformat(stop)
            if wake > target:
                clock.set(stop)
                return
            if wake > clock.now():
                clock.set(wake.isoformat())
            else:
                ticks += 1
                assert ticks < 5, "the scheduler asks to tick again at the same instant"
                clock.advance(timedelta(milliseconds=1))
            scheduler.tick(clock.now())

    run_until("2027-03-01T09:15:00+00:00")  # 09:10 fires
    assert pauses.pause("desktop:alice").by == "desktop:alice"
    assert pauses.pause("someone-else").by == "desktop:alice"  # paused already: unchanged
    run_until("2027-03-01T09:45:00+00:00")  # 09:20, 09:30, 09:40 while paused
    assert pauses.resume("user:bob") is True
    assert pauses.resume("user:bob") is False
    run_until("2027-03-01T10:05:00+00:00")  # 09:50, 10:00
    runs = [(r.scheduled_for.strftime("%H:%M"), r.state, r.reason)
            for r in fires_of(store, "every")]
    assert [(t, s) for t, s, _ in runs] == [
        ("09:10", RunState.QUEUED), ("09:20", RunState.MISSED), ("09:30", RunState.MISSED),
        ("09:40", RunState.MISSED), ("09:50", RunState.QUEUED), ("10:00", RunState.QUEUED)]
    assert runs[1][2] == "scheduling paused by desktop:alice (since 2027-03-01 09:15:00 UTC)"
    assert alerted == []  # a person paused it: nothing to alert about
    said = [(e.message, e.actor) for e in store.list_events(limit=100)
            if e.event_type == EventType.SCHEDULING_CHANGED]
    assert sorted(said) == [("scheduling paused by desktop:alice", "desktop:alice"),
                            ("scheduling resumed by user:bob", "user:bob")]
