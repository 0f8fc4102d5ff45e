"""Run windows: parsing, membership, the next opening (midnight, DST), canonical text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.config import windows as config_windows
from cadenza.domain.windows import (
    Window,
    describe_days,
    is_open,
    next_opening,
    parse_window,
)

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def paris(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=PARIS)


def utc(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def test_config_module_re_exports_the_domain_window() -> None:
    assert config_windows.Window is Window
    assert config_windows.parse_window is parse_window


def test_contains_office_hours_and_a_night_crossing_midnight() -> None:
    office = parse_window("mon-fri 08:00-18:00")
    assert office.contains(paris(2027, 3, 1, 8, 0))  # Monday
    assert not office.contains(paris(2027, 3, 1, 18, 0))  # the end is excluded
    assert not office.contains(paris(2027, 3, 6, 10, 0))  # Saturday
    night = parse_window("fri 22:00-06:00")
    assert night.contains(paris(2027, 3, 5, 23, 0))  # Friday night
    assert night.contains(paris(2027, 3, 6, 5, 59))  # Saturday morning: opened on Friday
    assert not night.contains(paris(2027, 3, 5, 5, 0))  # Friday morning: opened on Thursday


def test_next_open_is_now_when_open() -> None:
    at = paris(2027, 3, 1, 9, 30)
    assert parse_window("mon-fri 08:00-18:00").next_open(at) == at


@pytest.mark.parametrize(
    ("window", "at", "opens"),
    [
        # later the same day
        ("mon-fri 08:00-18:00", paris(2027, 3, 1, 6, 0), paris(2027, 3, 1, 8, 0)),
        # after Friday's close: Monday
        ("mon-fri 08:00-18:00", paris(2027, 3, 5, 18, 0), paris(2027, 3, 8, 8, 0)),
        ("mon-fri 08:00-18:00", paris(2027, 3, 6, 12, 0), paris(2027, 3, 8, 8, 0)),
        # a night window: before it opens, after it closed on Saturday morning
        ("fri 22:00-06:00", paris(2027, 3, 5, 21, 0), paris(2027, 3, 5, 22, 0)),
        ("fri 22:00-06:00", paris(2027, 3, 6, 6, 0), paris(2027, 3, 12, 22, 0)),
        # every day, wrapping over the week end
        ("22:00-06:00", paris(2027, 3, 7, 7, 0), paris(2027, 3, 7, 22, 0)),
        ("sat-mon 10:00-11:00", paris(2027, 3, 7, 11, 0), paris(2027, 3, 8, 10, 0)),
        ("sun 23:00-24:00", paris(2027, 3, 1, 0, 0), paris(2027, 3, 7, 23, 0)),
    ],
)
def test_next_open(window: str, at: datetime, opens: datetime) -> None:
    result = parse_window(window).next_open(at)
    assert result == opens
    assert result.utcoffset() == opens.utcoffset()


# Europe/Paris 2027-03-28: at 01:00 UTC the clocks jump from 02:00 CET to 03:00 CEST.
def test_spring_window_starting_in_the_gap_opens_when_the_clocks_jump() -> None:
    opens = parse_window("02:30-04:00").next_open(paris(2027, 3, 28, 1, 0))
    assert opens.astimezone(UTC) == utc(2027, 3, 28, 1, 0)
    assert (opens.hour, opens.minute) == (3, 0)
    assert opens.utcoffset() == timedelta(hours=2)


def test_spring_window_wholly_inside_the_gap_does_not_open_that_night() -> None:
    window = parse_window("02:00-02:30")
    opens = window.next_open(paris(2027, 3, 28, 1, 0))
    assert opens.astimezone(UTC) == utc(2027, 3, 29, 0, 0)  # 02:00 CEST on Monday
    assert window.contains(opens)


def test_spring_night_window_across_midnight_keeps_its_wall_clock_times() -> None:
    window = parse_window("22:00-06:00")
    # Open across the gap; it closes at 06:00 CEST (04:00 UTC), an hour earlier in UTC.
    assert window.contains(utc(2027, 3, 28, 1, 30).astimezone(PARIS))
    assert not window.contains(utc(2027, 3, 28, 4, 0).astimezone(PARIS))
    opens = window.next_open(paris(2027, 3, 28, 7, 0))
    assert opens.astimezone(UTC) == utc(2027, 3, 28, 20, 0)  # 22:00 CEST


# Europe/Paris 2027-10-31: at 01:00 UTC the clocks fall back from 03:00 CEST to 02:00 CET.
def test_autumn_repeated_hour_is_inside_the_window_in_both_passes() -> None:
    window = parse_window("02:15-02:45")
    first_pass_after = utc(2027, 10, 31, 0, 50).astimezone(PARIS)  # 02:50 CEST
    opens = window.next_open(first_pass_after)
    assert opens.astimezone(UTC) == utc(2027, 10, 31, 1, 15)  # 02:15 CET
    assert opens.utcoffset() == timedelta(hours=1)


def test_autumn_fall_back_reopens_a_window_at_the_change_itself() -> None:
    window = parse_window("01:30-02:30")
    opens = window.next_open(utc(2027, 10, 31, 0, 40).astimezone(PARIS))  # 02:40 CEST
    assert opens.astimezone(UTC) == utc(2027, 10, 31, 1, 0)  # the clocks show 02:00 CET


def test_autumn_window_after_the_repeated_hour_opens_at_its_single_time() -> None:
    opens = parse_window("03:00-04:00").next_open(utc(2027, 10, 31, 0, 10).astimezone(PARIS))
    assert opens.astimezone(UTC) == utc(2027, 10, 31, 2, 0)  # 03:00 CET


def test_new_york_spring_gap() -> None:
    at = datetime(2027, 3, 14, 1, 0, tzinfo=NEW_YORK)
    opens = parse_window("sun 02:30-03:30").next_open(at)
    assert opens.astimezone(UTC) == utc(2027, 3, 14, 7, 0)  # 03:00 EDT
    assert (opens.hour, opens.minute) == (3, 0)


def test_next_open_needs_an_aware_time() -> None:
    with pytest.raises(ValueError, match="aware"):
        parse_window("08:00-18:00").next_open(datetime(2027, 3, 1, 6, 0))


def test_several_windows_and_none() -> None:
    windows = [parse_window("mon-fri 08:00-09:00"), parse_window("sat 10:00-12:00")]
    friday_evening = paris(2027, 3, 5, 20, 0)
    assert not is_open(windows, friday_evening)
    assert next_opening(windows, friday_evening) == paris(2027, 3, 6, 10, 0)
    assert is_open([], friday_evening)
    assert next_opening([], friday_evening) == friday_evening


def test_describe() -> None:
    assert parse_window("mon-fri 08:00-18:00").describe() == "mon-fri 08:00-18:00"
    assert parse_window("Fri-Mon 22:00-06:00").describe() == "fri-mon 22:00-06:00"
    assert parse_window("mon, sat 07:00-24:00").describe() == "mon,sat 07:00-24:00"
    assert parse_window("22:00-06:00").describe() == "22:00-06:00"
    assert describe_days(frozenset({6, 0})) == "sun-mon"


windows = st.builds(
    Window,
    days=st.frozensets(st.integers(0, 6), min_size=1),
    start=st.integers(0, 1439),
    end=st.integers(1, 1440),
).filter(lambda w: w.start != w.end)
# Around both DST changes of 2027 in Paris, and ordinary weeks.
instants = st.one_of(
    st.datetimes(datetime(2027, 3, 20), datetime(2027, 4, 4)),
    st.datetimes(datetime(2027, 10, 23), datetime(2027, 11, 7)),
    st.datetimes(datetime(2027, 6, 1), datetime(2027, 6, 15)),
).map(lambda naive: naive.replace(tzinfo=UTC))


@settings(max_examples=60, deadline=None)
@given(window=windows, at=instants)
def test_next_open_is_the_first_open_instant(window: Window, at: datetime) -> None:
    opens = window.next_open(at.astimezone(PARIS))
    assert window.contains(opens)
    opens_utc = opens.astimezone(UTC)
    assert opens_utc >= at
    # Openness only changes on whole minutes (and DST changes, on whole hours here).
    probe = at
    while probe < opens_utc:
        assert not window.contains(probe.astimezone(PARIS)), probe
        probe = (probe + timedelta(minutes=1)).replace(second=0, microsecond=0)


@given(window=windows)
def test_describe_parses_back(window: Window) -> None:
    assert parse_window(window.describe()) == window
