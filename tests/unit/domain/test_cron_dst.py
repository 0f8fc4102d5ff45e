"""The DST rule of SPEC §6 on the four transitions of 2027, and the marks previews show.

Europe/Paris: spring 2027-03-28 02:00 -> 03:00 (+01 -> +02), autumn 2027-10-31 03:00 -> 02:00.
America/New_York: spring 2027-03-14 02:00 -> 03:00 (-05 -> -04), autumn 2027-11-07 02:00 -> 01:00.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.domain.cron import is_ambiguous, is_imaginary, next_fires, parse_cron

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def day_fires(expr: str, tz: ZoneInfo, day: str) -> list[str]:
    """Every fire on local ``day`` as ISO text with offset, plus its DST mark."""
    cron = parse_cron(expr)
    start = datetime.fromisoformat(day).replace(tzinfo=tz) - timedelta(seconds=1)
    out: list[str] = []
    for fire in cron.fires(start, tz):
        if fire.date().isoformat() != day:
            break
        mark = cron.dst_mark(fire, tz)
        out.append(fire.isoformat() + (f" {mark}" if mark else ""))
    return out


def between(fires: list[str], start: str, end: str) -> list[str]:
    return [f for f in fires if start <= f[11:16] < end]


# -- spring gap: a time that does not exist fires once, at the first instant after the gap --


@pytest.mark.parametrize(
    ("tz", "day", "after_gap"),
    [
        (PARIS, "2027-03-28", "2027-03-28T03:00:00+02:00"),
        (NEW_YORK, "2027-03-14", "2027-03-14T03:00:00-04:00"),
    ],
)
@pytest.mark.reliability_case(11)
def test_fixed_time_in_the_gap_fires_once_right_after_it(
    tz: ZoneInfo, day: str, after_gap: str
) -> None:
    assert day_fires("30 2 * * *", tz, day) == [f"{after_gap} gap"]
    assert day_fires("0 2 * * *", tz, day) == [f"{after_gap} gap"]
    # A time on the edge of the gap is an ordinary fire.
    assert day_fires("0 3 * * *", tz, day) == [after_gap]
    # 02:00 and 03:00 both land on 03:00: one fire, not two.
    assert day_fires("0 2,3 * * *", tz, day) == [f"{after_gap} gap"]


@pytest.mark.parametrize(("tz", "day"), [(PARIS, "2027-03-28"), (NEW_YORK, "2027-03-14")])
@pytest.mark.reliability_case(11)
def test_hourly_and_quarter_hourly_have_no_fire_in_the_gap(tz: ZoneInfo, day: str) -> None:
    hourly = day_fires("0 * * * *", tz, day)
    assert len(hourly) == 23
    assert [f[11:16] for f in hourly[:3]] == ["00:00", "01:00", "03:00"]
    assert hourly[2].endswith(" gap")
    quarters = day_fires("*/15 * * * *", tz, day)
    assert len(quarters) == 23 * 4
    assert between(quarters, "02:00", "03:00") == []
    assert [f[11:16] for f in between(quarters, "01:30", "03:30")] == [
        "01:30", "01:45", "03:00", "03:15",
    ]
    assert [f for f in quarters if f.endswith("gap")] == [between(quarters, "03:00", "03:01")[0]]


# -- autumn fold: a fixed time fires once (first occurrence); "*"/step hours fire in both --


@pytest.mark.parametrize(
    ("tz", "day", "expr", "first"),
    [
        (PARIS, "2027-10-31", "30 2 * * *", "2027-10-31T02:30:00+02:00"),
        (NEW_YORK, "2027-11-07", "30 1 * * *", "2027-11-07T01:30:00-04:00"),
    ],
)
@pytest.mark.reliability_case(12)
def test_fixed_time_in_the_fold_fires_once_at_the_first_occurrence(
    tz: ZoneInfo, day: str, expr: str, first: str
) -> None:
    assert day_fires(expr, tz, day) == [f"{first} fold"]


@pytest.mark.parametrize(
    ("tz", "day", "hour", "offsets"),
    [
        (PARIS, "2027-10-31", "02", ("+02:00", "+01:00")),
        (NEW_YORK, "2027-11-07", "01", ("-04:00", "-05:00")),
    ],
)
@pytest.mark.reliability_case(12)
def test_hourly_and_quarter_hourly_fire_in_both_repeated_hours(
    tz: ZoneInfo, day: str, hour: str, offsets: tuple[str, str]
) -> None:
    hourly = day_fires("0 * * * *", tz, day)
    assert len(hourly) == 25
    repeated = [f for f in hourly if f[11:13] == hour]
    assert repeated == [f"{day}T{hour}:00:00{offset} fold" for offset in offsets]
    quarters = day_fires("*/15 * * * *", tz, day)
    assert len(quarters) == 25 * 4
    in_fold = [f for f in quarters if f[11:13] == hour]
    assert [f[11:16] + f[19:25] for f in in_fold] == [
        f"{hour}:{m}{off}" for off in offsets for m in ("00", "15", "30", "45")
    ]
    assert all(f.endswith(" fold") for f in in_fold)
    # Strictly increasing in real time: the second hour comes after the first.
    instants = [datetime.fromisoformat(f.split()[0]) for f in quarters]
    assert all(a < b for a, b in itertools.pairwise(instants))


def test_a_fixed_hour_with_stepped_minutes_fires_in_the_first_hour_only() -> None:
    fires = day_fires("*/15 1 * * *", NEW_YORK, "2027-11-07")
    assert [f[11:25] for f in fires] == [f"01:{m}:00-04:00" for m in ("00", "15", "30", "45")]


def test_step_hours_fire_in_both_occurrences() -> None:
    fires = day_fires("0 */2 * * *", PARIS, "2027-10-31")
    assert "2027-10-31T02:00:00+02:00 fold" in fires
    assert "2027-10-31T02:00:00+01:00 fold" in fires


@pytest.mark.reliability_case(12)
def test_resuming_inside_the_second_occurrence() -> None:
    second = datetime(2027, 11, 7, 1, 20, tzinfo=NEW_YORK, fold=1)  # 01:20 EST
    quarter = parse_cron("*/15 * * * *")
    assert [f.isoformat() for f in next_fires(quarter, NEW_YORK, second, 3)] == [
        "2027-11-07T01:30:00-05:00",
        "2027-11-07T01:45:00-05:00",
        "2027-11-07T02:00:00-05:00",
    ]
    # After the first occurrence's last quarter, the second occurrence's come next.
    first_end = datetime(2027, 11, 7, 1, 50, tzinfo=NEW_YORK)  # 01:50 EDT
    assert next_fires(quarter, NEW_YORK, first_end, 1)[0].isoformat() == (
        "2027-11-07T01:00:00-05:00"
    )
    # A fixed time already fired at its first occurrence does not fire again.
    fixed = next_fires("30 1 * * *", NEW_YORK, second, 1)[0]
    assert fixed.isoformat() == "2027-11-08T01:30:00-05:00"


def test_ordinary_days_carry_no_mark() -> None:
    assert day_fires("30 2 * * *", PARIS, "2027-03-27") == ["2027-03-27T02:30:00+01:00"]
    assert all(" " not in f for f in day_fires("*/15 * * * *", NEW_YORK, "2027-11-08"))


def test_repeat_in_fold_follows_the_hour_field() -> None:
    assert parse_cron("0 * * * *").repeat_in_fold
    assert parse_cron("@hourly").repeat_in_fold
    assert parse_cron("*/15 * * * *").repeat_in_fold
    assert parse_cron("0 */2 * * *").repeat_in_fold
    assert parse_cron("0 1-5/2 * * *").repeat_in_fold
    assert not parse_cron("30 1 * * *").repeat_in_fold
    assert not parse_cron("*/15 1 * * *").repeat_in_fold
    assert not parse_cron("@daily").repeat_in_fold


def test_ambiguous_and_imaginary_wall_times() -> None:
    assert is_ambiguous(datetime(2027, 11, 7, 1, 30, tzinfo=NEW_YORK))
    assert is_ambiguous(datetime(2027, 11, 7, 1, 30, tzinfo=NEW_YORK, fold=1))
    assert not is_ambiguous(datetime(2027, 11, 7, 2, 30, tzinfo=NEW_YORK))
    assert is_imaginary(datetime(2027, 3, 14, 2, 30, tzinfo=NEW_YORK))
    assert not is_imaginary(datetime(2027, 3, 14, 3, 0, tzinfo=NEW_YORK))
    assert not is_ambiguous(datetime(2027, 11, 7, 1, 30, tzinfo=UTC))


# -- day names, the OR rule, leap days, aliases ---------------------------------------------


def test_day_zero_is_monday_and_sun_is_sunday() -> None:
    start = datetime(2027, 3, 1, tzinfo=UTC)
    mondays = next_fires("0 9 * * 0", PARIS, start, 5)
    sundays = next_fires("0 9 * * sun", PARIS, start, 5)
    assert {f.strftime("%A") for f in mondays} == {"Monday"}
    assert {f.strftime("%A") for f in sundays} == {"Sunday"}
    assert [f.day for f in sundays] == [7, 14, 21, 28, 4]
    assert sundays[3].isoformat() == "2027-03-28T09:00:00+02:00"  # the DST Sunday


@pytest.mark.reliability_case(13)
def test_first_of_month_or_mondays() -> None:
    fires = next_fires("0 9 1 * mon", PARIS, datetime(2027, 3, 25, tzinfo=UTC), 4)
    assert [f.date().isoformat() for f in fires] == [
        "2027-03-29", "2027-04-01", "2027-04-05", "2027-04-12",
    ]


@pytest.mark.reliability_case(13)
def test_leap_days_and_monthly() -> None:
    leap = next_fires("0 12 29 2 *", NEW_YORK, datetime(2027, 1, 1, tzinfo=UTC), 2)
    assert [f.date().isoformat() for f in leap] == ["2028-02-29", "2032-02-29"]
    monthly = next_fires("@monthly", PARIS, datetime(2027, 1, 15, tzinfo=UTC), 12)
    assert [f.isoformat()[:19] for f in monthly[1:3]] == [
        "2027-03-01T00:00:00", "2027-04-01T00:00:00",
    ]
    assert {(f.day, f.hour, f.minute) for f in monthly} == {(1, 0, 0)}
    assert {f.utcoffset() for f in monthly} == {timedelta(hours=1), timedelta(hours=2)}


# -- resuming from any fire continues the same sequence (what a cursor relies on) ----------

EXPRESSIONS = ["0 * * * *", "*/15 * * * *", "30 1 * * *", "30 2 * * *", "0 2,3 * * *",
               "*/20 1-3 * * *", "0 */2 * * *", "45 0-3 * * sun"]


@settings(max_examples=60, deadline=None)
@given(
    expr=st.sampled_from(EXPRESSIONS),
    zone=st.sampled_from([PARIS, NEW_YORK]),
    start=st.sampled_from(["2027-03-13", "2027-03-27", "2027-10-30", "2027-11-06"]),
    minutes=st.integers(min_value=0, max_value=3 * 24 * 60),
)
def test_resuming_after_any_fire_continues_the_sequence(
    expr: str, zone: ZoneInfo, start: str, minutes: int
) -> None:
    after = datetime.fromisoformat(start).replace(tzinfo=UTC) + timedelta(minutes=minutes)
    fires = next_fires(expr, zone, after, 12)
    instants = [f.astimezone(UTC) for f in fires]
    assert all(i > after for i in instants)
    assert all(a < b for a, b in itertools.pairwise(instants))
    for k, fire in enumerate(fires[:-1]):
        resumed = next_fires(expr, zone, fire, 1)[0].astimezone(UTC)
        assert resumed == instants[k + 1]
        # The same, given as a UTC instant (how cursors are stored).
        assert next_fires(expr, zone, instants[k], 1)[0].astimezone(UTC) == instants[k + 1]
