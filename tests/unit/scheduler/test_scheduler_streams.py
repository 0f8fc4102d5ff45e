"""FireStream answers exactly what fires_between and next_fire answer, across DST changes,
while it is kept between ticks (cursors moving forward, questions about earlier instants)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from scheduler_helpers import job

from cadenza.scheduler.fires import FireStream, fires_between, next_fire
from cadenza.scheduler.schedules import ScheduleSpec, schedules_of

CASES = [
    ("*/15 * * * *", "Europe/Paris"),
    ("0 * * * *", "America/New_York"),
    ("30 2 * * *", "Europe/Paris"),
    ("30 1 * * *", "America/New_York"),
    ("0 2,3 * * *", "Europe/Paris"),
    ("*/15 1 * * *", "Europe/Paris"),
    ("0 */2 * * *", "Australia/Lord_Howe"),
    ("* * * * *", "UTC"),
    ("0 0 29 2 *", "UTC"),
]
# Around the 2027 changes of both zones (spring and autumn), and a quiet week.
WINDOWS = [
    datetime(2027, 3, 13, 20, tzinfo=UTC),
    datetime(2027, 3, 27, 20, tzinfo=UTC),
    datetime(2027, 10, 30, 20, tzinfo=UTC),
    datetime(2027, 11, 6, 20, tzinfo=UTC),
    datetime(2027, 4, 4, 3, tzinfo=UTC),
]


def _spec(expression: str, zone: str) -> ScheduleSpec:
    return schedules_of(job("s", schedule=expression, timezone=zone), ZoneInfo(zone))[0]


@pytest.mark.parametrize(("expression", "zone"), CASES)
def test_a_kept_stream_answers_like_a_fresh_computation(expression: str, zone: str) -> None:
    spec = _spec(expression, zone)
    rng = random.Random(f"{expression} {zone}")
    for start in WINDOWS:
        stream = FireStream(spec, start)
        cursor = start
        for _ in range(60):
            # The scheduler's questions: what is due up to now, what comes next; the cursor
            # then moves to the last fire written (forward only)...
            now = cursor + timedelta(minutes=rng.choice([1, 7, 29, 61, 90, 180, 1500]))
            due = stream.between(cursor, now)
            assert due == fires_between(spec, cursor, now)
            if due:
                cursor = due[-1]
            assert stream.first_after(cursor) == next_fire(spec, cursor)
            stream.forget(cursor)
            # ... and sometimes another scheduler moved it further, or it is behind.
            if rng.random() < 0.1:
                cursor += timedelta(minutes=rng.choice([13, 47]))
            if rng.random() < 0.05:
                earlier = cursor - timedelta(hours=rng.choice([1, 5]))
                assert stream.between(earlier, cursor) == fires_between(spec, earlier, cursor)
                assert stream.first_after(earlier) == next_fire(spec, earlier)


def test_an_empty_or_backward_interval_has_no_fires() -> None:
    spec = _spec("* * * * *", "UTC")
    at = datetime(2027, 3, 1, tzinfo=UTC)
    stream = FireStream(spec, at)
    assert stream.between(at, at) == []
    assert stream.between(at, at - timedelta(minutes=5)) == []
    assert stream.first_after(at) == at + timedelta(minutes=1)
