"""Cron fires against an independent oracle, over random expressions, zones and dates.

The oracle knows nothing of the parser or of cronsim: the test draws each field's set of
values and writes its text (``*``, ``*/n``, ``a``, ``a-b``, ``a-b/n``, lists of those),
then walks the calendar day by day in the zone's wall time and keeps the first minutes
whose fields match, with the documented day rule (0 = Monday; when both day fields are
restricted, either matching fires). The zones have no daylight saving time in the years
drawn (the DST rules have their own tests: test_cron_dst.py), so a wall minute is one
instant.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cadenza.domain.cron import next_fires

ZONES = ["UTC", "Asia/Shanghai", "Asia/Kolkata", "Asia/Tokyo", "Africa/Nairobi",
         "America/Bogota", "Asia/Kathmandu"]
"""No daylight saving time from 2025 to 2040 (fixed offsets, some of them odd)."""
FIELDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]


@st.composite
def part(draw: st.DrawFn, low: int, high: int) -> tuple[str, set[int]]:
    kind = draw(st.sampled_from(["star", "step", "one", "range", "range_step"]))
    if kind == "star":
        return "*", set(range(low, high + 1))
    if kind == "step":
        n = draw(st.integers(2, max(2, (high - low + 1) // 2)))
        return f"*/{n}", set(range(low, high + 1, n))
    a = draw(st.integers(low, high))
    if kind == "one":
        return str(a), {a}
    b = draw(st.integers(a, high))
    if kind == "range":
        return f"{a}-{b}", set(range(a, b + 1))
    # A step larger than the field's range is refused (it could never repeat): the
    # parser's own tests cover that refusal; here every drawn expression is valid.
    n = draw(st.integers(1, max(1, min(b - a + 1, high - low))))
    return f"{a}-{b}/{n}", set(range(a, b + 1, n))


@st.composite
def field(draw: st.DrawFn, low: int, high: int) -> tuple[str, set[int]]:
    parts = draw(st.lists(part(low, high), min_size=1, max_size=3))
    if any(text == "*" for text, _ in parts):
        parts = [("*", set(range(low, high + 1)))]
    return ",".join(t for t, _ in parts), set().union(*(v for _, v in parts))


@st.composite
def expressions(draw: st.DrawFn) -> tuple[str, list[set[int]]]:
    drawn = [draw(field(low, high)) for low, high in FIELDS]
    return " ".join(t for t, _ in drawn), [v for _, v in drawn]


def oracle(sets: list[set[int]], zone: ZoneInfo, after: datetime, n: int) -> list[datetime]:
    """The first ``n`` wall minutes strictly after ``after`` that match, within 8 years."""
    minutes, hours, days, months, weekdays = sets
    dom_restricted = days != set(range(1, 32))
    dow_restricted = weekdays != set(range(7))
    local = after.astimezone(zone)
    out: list[datetime] = []
    day = local.date()
    while len(out) < n and day < local.date() + timedelta(days=8 * 366):
        in_month = day.day in days
        in_week = day.weekday() in weekdays  # 0 = Monday, as documented
        matches = (in_month or in_week) if dom_restricted and dow_restricted \
            else (in_month and in_week)
        if day.month in months and matches:
            for hour in sorted(hours):
                for minute in sorted(minutes):
                    fire = datetime.combine(day, time(hour, minute), tzinfo=zone)
                    if fire > local and len(out) < n:
                        out.append(fire)
        day += timedelta(days=1)
    return out


@settings(max_examples=300, deadline=None)
@given(expr=expressions(), zone=st.sampled_from(ZONES),
       start=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2035, 12, 31)))
@pytest.mark.reliability_case(13)
def test_next_fires_match_the_oracle(expr: tuple[str, list[set[int]]], zone: str,
                                     start: datetime) -> None:
    text, sets = expr
    tz = ZoneInfo(zone)
    after = start.replace(tzinfo=UTC)
    expected = oracle(sets, tz, after, 5)
    assume(len(expected) == 5)  # a schedule that fires rarely (30 Feb never) is out
    got = next_fires(text, tz, after, 5)
    assert [f.astimezone(UTC) for f in got] == [f.astimezone(UTC) for f in expected], text


def test_the_oracle_knows_the_day_rule() -> None:
    """0 9 1 * 0: the 1st of the month or a Monday (0 = Monday)."""
    sets = [{0}, {9}, {1}, set(range(1, 13)), {0}]
    fires = oracle(sets, ZoneInfo("UTC"), datetime(2027, 2, 26, tzinfo=UTC), 3)
    assert [f.date() for f in fires] == [date(2027, 3, 1), date(2027, 3, 8),
                                         date(2027, 3, 15)]
