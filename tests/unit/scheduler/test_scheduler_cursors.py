"""Cursors: crash safety between deciding and recording, and config reloads (no backfill)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from scheduler_helpers import MakeScheduler, at, fires_of, job, jobs

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreError
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.tables import schedule_cursors

HOURLY = job("hourly", schedule="0 * * * *", timezone="UTC", on_overlap="queue")


@pytest.mark.reliability_case(39)
def test_a_crash_before_the_commit_records_nothing_then_exactly_once(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock.set("2027-03-01T00:30:00+00:00")
    make_scheduler(jobs(HOURLY)).tick(clock.now())
    clock.set("2027-03-01T01:00:05+00:00")
    crashing = make_scheduler(jobs(HOURLY))

    def crash(*args: Any, **kwargs: Any) -> None:
        raise StoreError("disk I/O error (simulated crash between runs and cursor)")

    monkeypatch.setattr(store, "advance_cursors", crash)
    with pytest.raises(StoreError):
        crashing.tick(clock.now())
    monkeypatch.undo()
    assert fires_of(store) == []  # the runs' insert was rolled back with the cursor
    assert store.get_cursors()[("hourly", "job")] == at("2027-03-01T00:30:00+00:00")
    assert len(crashing.tick(clock.now()).created) == 1  # retried by the same scheduler
    assert make_scheduler(jobs(HOURLY)).tick(clock.now()).created == ()  # and by a new one
    assert len(fires_of(store)) == 1


@pytest.mark.reliability_case(39)
def test_a_cursor_left_behind_never_doubles_a_fire(make_scheduler: MakeScheduler,
                                                   clock: FakeClock, store: Store) -> None:
    clock.set("2027-03-01T00:30:00+00:00")
    make_scheduler(jobs(HOURLY)).tick(clock.now())
    clock.set("2027-03-01T01:00:05+00:00")
    make_scheduler(jobs(HOURLY)).tick(clock.now())
    with store.write() as conn:  # as if the cursor update had been lost
        conn.execute(sa.update(schedule_cursors).values(last_fire=at("2027-03-01T00:30Z")))
    result = make_scheduler(jobs(HOURLY)).tick(clock.now())
    assert result.created == () and result.already_recorded == 1
    assert len(fires_of(store)) == 1
    assert store.get_cursors()[("hourly", "job")] == at("2027-03-01T01:00:00+00:00")


def test_cursors_only_move_forward(store: Store) -> None:
    store.init_cursors([("a", "job")], at("2027-03-01T01:00Z"))
    store.advance_cursors({("a", "job"): at("2027-03-01T02:00Z")}, create=False)
    store.advance_cursors({("a", "job"): at("2027-03-01T01:30Z")}, create=False)  # stays
    assert store.init_cursors([("a", "job")], at("2027-03-01T00:00Z")) == 0
    assert store.get_cursors([("a", "job"), ("b", "job")]) == {
        ("a", "job"): at("2027-03-01T02:00Z")
    }
    assert store.get_cursors([]) == {}


def test_reload_with_a_changed_schedule_does_not_backfill(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    daily = job("report", schedule="0 2 * * *", timezone="UTC")
    scheduler = make_scheduler(jobs(daily))
    clock.set("2027-03-01T00:00:00+00:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T10:00:00+00:00")  # the daily fire at 02:00 is long missed
    minutely = job("report", schedule="*/10 * * * *", timezone="UTC", on_overlap="queue")
    scheduler.reload(jobs(minutely))
    # The old config's due fire was recorded first; the new expression owes nothing before now.
    assert [(r.scheduled_for, r.state) for r in fires_of(store)] == [
        (at("2027-03-01T02:00Z"), RunState.MISSED)
    ]
    assert scheduler.next_wakeup(clock.now()) == at("2027-03-01T10:10Z")
    clock.set("2027-03-01T10:10:01+00:00")
    assert len(scheduler.tick(clock.now()).queued) == 1


def test_removed_then_re_added_schedule_starts_from_now(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    keeper = job("keeper", schedule="0 3 * * *", timezone="UTC")
    report = job("report", schedule="0 * * * *", timezone="UTC", on_overlap="queue")
    scheduler = make_scheduler(jobs(keeper, report))
    clock.set("2027-03-01T00:30:00+00:00")
    scheduler.tick(clock.now())
    scheduler.reload(jobs(keeper))
    assert ("report", "job") in store.get_cursors()  # kept
    clock.set("2027-03-01T05:30:00+00:00")
    scheduler.tick(clock.now())
    scheduler.reload(jobs(keeper, report))
    clock.set("2027-03-01T06:00:01+00:00")
    scheduler.tick(clock.now())
    assert [r.scheduled_for for r in fires_of(store, "report")] == [at("2027-03-01T06:00Z")]


def test_removed_while_down_then_re_added_does_not_backfill_the_gap(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    report = job("report", schedule="0 * * * *", timezone="UTC", on_overlap="queue")
    clock.set("2027-03-01T00:30:00+00:00")
    make_scheduler(jobs(report)).tick(clock.now())
    clock.set("2027-03-02T00:30:00+00:00")
    make_scheduler(jobs()).tick(clock.now())  # started a day later without it
    assert len(fires_of(store)) == 0
    clock.set("2027-03-02T01:00:01+00:00")
    make_scheduler(jobs(report)).tick(clock.now())  # re-added
    assert [r.scheduled_for for r in fires_of(store)] == [at("2027-03-02T01:00Z")]


def test_disabled_then_enabled_owes_nothing(make_scheduler: MakeScheduler, clock: FakeClock,
                                            store: Store) -> None:
    on = job("report", schedule="0 * * * *", timezone="UTC", on_overlap="queue")
    off = job("report", schedule="0 * * * *", timezone="UTC", on_overlap="queue",
              enabled=False)
    scheduler = make_scheduler(jobs(on))
    clock.set("2027-03-01T00:30:00+00:00")
    scheduler.tick(clock.now())
    scheduler.reload(jobs(off))
    clock.set("2027-03-01T04:30:00+00:00")
    assert scheduler.tick(clock.now()).created == ()
    assert scheduler.next_wakeup(clock.now()) is None
    scheduler.reload(jobs(on))
    clock.set("2027-03-01T05:00:01+00:00")
    scheduler.tick(clock.now())
    assert [r.scheduled_for for r in fires_of(store)] == [at("2027-03-01T05:00Z")]


def test_a_new_preset_schedule_starts_at_the_reload(make_scheduler: MakeScheduler,
                                                    clock: FakeClock, store: Store) -> None:
    plain = job("report", schedule="0 4 * * *", timezone="UTC")
    with_preset = job("report", schedule="0 4 * * *", timezone="UTC",
                      presets={"hourly": {"schedule": "0 * * * *", "params": {}}})
    scheduler = make_scheduler(jobs(plain))
    clock.set("2027-03-01T00:30:00+00:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T02:30:00+00:00")
    scheduler.reload(jobs(with_preset))
    assert scheduler.next_wakeup(clock.now()) == clock.now()  # new cursor to create
    clock.set("2027-03-01T03:00:01+00:00")
    scheduler.tick(clock.now())
    assert [(r.schedule, r.scheduled_for) for r in fires_of(store)] == [
        ("preset:hourly", at("2027-03-01T03:00Z"))
    ]
    assert store.get_cursors()[("report", "preset:hourly")] == at("2027-03-01T03:00Z")


@pytest.mark.reliability_case(14)
def test_a_changed_time_zone_neither_doubles_nor_backfills(
    make_scheduler: MakeScheduler, clock: FakeClock, store: Store
) -> None:
    paris = job("report", schedule="0 2 * * *", timezone="Europe/Paris")
    new_york = job("report", schedule="0 2 * * *", timezone="America/New_York")
    scheduler = make_scheduler(jobs(paris))
    clock.set("2027-03-01T00:00:00+00:00")
    scheduler.tick(clock.now())
    clock.set("2027-03-01T01:00:30+00:00")  # 02:00 in Paris: fires
    scheduler.tick(clock.now())
    clock.set("2027-03-01T03:00:00+00:00")
    scheduler.reload(jobs(new_york))  # 02:00 in New York is 07:00 UTC, still ahead
    clock.set("2027-03-01T07:00:30+00:00")
    scheduler.tick(clock.now())
    assert [r.scheduled_for for r in fires_of(store)] == [
        at("2027-03-01T01:00:00+00:00"), at("2027-03-01T07:00:00+00:00"),
    ]
    clock.set("2027-03-01T09:00:00+00:00")
    scheduler.reload(jobs(paris))  # tomorrow 02:00 Paris is next; nothing owed today
    assert scheduler.next_wakeup(clock.now()) == at("2027-03-02T01:00:00+00:00")


ZONE = "America/Sao_Paulo"  # a real name (the configuration checks it); its rules are ours


def _tzif(transitions: list[tuple[int, int]], first: int, footer: str) -> bytes:
    """A TZif (version 2) file: the UTC offset ``first`` (seconds), then each
    ``(instant, offset)`` of ``transitions``, then the POSIX rule ``footer``."""
    import struct

    offsets = [first, *[o for _, o in transitions]]
    kinds = list(dict.fromkeys(offsets))
    names = b"".join(f"X{k}".encode() + b"\0" for k in range(len(kinds)))

    def block(wide: bool) -> bytes:
        head = b"TZif2" + b"\0" * 15 + struct.pack(
            ">6l", 0, 0, 0, len(transitions), len(kinds), len(names))
        times = b"".join(struct.pack(">q" if wide else ">l", t) for t, _ in transitions)
        index = bytes(kinds.index(o) for _, o in transitions)
        types = b"".join(struct.pack(">lBB", o, 0, 3 * k) for k, o in enumerate(kinds))
        return head + times + index + types + names

    return block(False) + block(True) + f"\n{footer}\n".encode()


@pytest.fixture
def zone_rules(tmp_path: Any) -> Any:
    """``install(data)``: make ``data`` the rules of :data:`ZONE`, as a tzdata update
    followed by a restart would (a fresh zone cache); the system's rules come back after."""
    import zoneinfo

    def install(data: bytes) -> None:
        folder = tmp_path / f"tz{len(list(tmp_path.iterdir()))}"
        (folder / "America").mkdir(parents=True)
        (folder / "America" / "Sao_Paulo").write_bytes(data)
        zoneinfo.reset_tzpath([str(folder)])
        zoneinfo.ZoneInfo.clear_cache()

    yield install
    zoneinfo.reset_tzpath()
    zoneinfo.ZoneInfo.clear_cache()


CHANGE = int(at("2027-03-10T03:00:00+00:00").timestamp())
OLD_RULES = _tzif([], -3 * 3600, "<-03>3")  # UTC-3 for ever
AHEAD = _tzif([(CHANGE, -2 * 3600)], -3 * 3600, "<-02>2")  # UTC-2 from 10 March
BACK = _tzif([(CHANGE, -4 * 3600)], -3 * 3600, "<-04>4")  # UTC-4 from 10 March


@pytest.mark.reliability_case(14)
def test_a_tzdata_update_between_runs_moves_the_next_fires_and_repeats_none(
        make_scheduler: MakeScheduler, clock: FakeClock, store: Store, zone_rules: Any) -> None:
    """New zone rules (a tzdata update, then a restart) apply from the next fire: a daily
    02:00 fires at 02:00 of the new offset from the day they start, with nothing fired twice,
    nothing back-filled and nothing recorded MISSED. Fires are instants: those recorded
    under the old rules stay as they were."""
    daily = jobs(job("report", schedule="0 2 * * *", timezone=ZONE, on_overlap="queue"))
    zone_rules(OLD_RULES)
    clock.set("2027-03-08T12:00:00+00:00")
    make_scheduler(daily).tick(clock.now())
    clock.set("2027-03-09T05:00:30+00:00")  # 02:00 at UTC-3
    make_scheduler(daily).tick(clock.now())
    zone_rules(AHEAD)  # the update arrives before the change; the server restarts
    clock.set("2027-03-09T12:00:00+00:00")
    restarted = make_scheduler(daily)
    restarted.tick(clock.now())
    assert restarted.next_wakeup(clock.now()) == at("2027-03-10T04:00:00+00:00")
    for now in ("2027-03-10T04:00:30+00:00", "2027-03-10T05:00:30+00:00",
                "2027-03-11T04:00:30+00:00"):
        clock.set(now)
        restarted.tick(clock.now())
    assert [(r.scheduled_for, r.state) for r in fires_of(store)] == [
        (at("2027-03-09T05:00:00+00:00"), RunState.QUEUED),  # 02:00 at UTC-3
        (at("2027-03-10T04:00:00+00:00"), RunState.QUEUED),  # 02:00 at UTC-2
        (at("2027-03-11T04:00:00+00:00"), RunState.QUEUED),
    ]


@pytest.mark.reliability_case(14)
def test_a_late_tzdata_update_fires_the_true_local_time(
        make_scheduler: MakeScheduler, clock: FakeClock, store: Store, zone_rules: Any) -> None:
    """An update that arrives after the change took effect: until then the server fired at
    the old offset (02:00 at UTC-3 is 01:00 at the true UTC-4). After it, the day's 02:00
    fires at its true instant, one hour after the stale fire, which stays recorded: each
    instant fires once, and the schedule follows the rules the server runs with."""
    daily = jobs(job("report", schedule="0 2 * * *", timezone=ZONE, on_overlap="queue"))
    zone_rules(OLD_RULES)
    clock.set("2027-03-10T12:00:00+00:00")
    make_scheduler(daily).tick(clock.now())
    clock.set("2027-03-11T05:00:30+00:00")  # 02:00 by the stale rules
    make_scheduler(daily).tick(clock.now())
    zone_rules(BACK)
    clock.set("2027-03-11T05:30:00+00:00")  # 01:30 by the true rules
    restarted = make_scheduler(daily)
    restarted.tick(clock.now())
    clock.set("2027-03-11T06:00:30+00:00")
    restarted.tick(clock.now())
    clock.set("2027-03-12T06:00:30+00:00")
    restarted.tick(clock.now())
    assert [r.scheduled_for for r in fires_of(store)] == [
        at("2027-03-11T05:00:00+00:00"),  # stale: 01:00 at the true UTC-4
        at("2027-03-11T06:00:00+00:00"),  # 02:00 at UTC-4
        at("2027-03-12T06:00:00+00:00"),
    ]
