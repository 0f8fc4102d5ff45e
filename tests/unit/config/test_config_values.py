"""Durations, windows and the constrained string types."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cadenza.config import format_duration, parse_duration, parse_window


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30s", timedelta(seconds=30)), ("90m", timedelta(minutes=90)), ("2h", timedelta(hours=2)),
     ("1d", timedelta(days=1)), ("1h30m", timedelta(minutes=90)), ("0s", timedelta(0)),
     (" 2H ", timedelta(hours=2))],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert parse_duration(format_duration(expected)) == expected


@pytest.mark.parametrize("text", ["", "30", "30 s", "1.5h", "-1s", "1m1h", "h", "1w",
                                  "99999999d"])
def test_bad_durations_say_the_expected_form(text: str) -> None:
    with pytest.raises(ValueError, match=r'expected a duration like "30s", "90m"'):
        parse_duration(text)


def test_format_duration() -> None:
    assert format_duration(timedelta(days=1, hours=2, seconds=5)) == "1d2h5s"
    assert format_duration(timedelta(0)) == "0s"


def test_windows() -> None:
    office = parse_window("mon-fri 08:00-18:00")
    assert office.days == frozenset(range(5))
    assert office.contains(datetime(2027, 1, 4, 8, 0))  # a Monday
    assert not office.contains(datetime(2027, 1, 4, 18, 0))
    assert not office.contains(datetime(2027, 1, 9, 9, 0))  # a Saturday
    night = parse_window("fri 22:00-06:00")
    assert night.crosses_midnight
    assert night.contains(datetime(2027, 1, 9, 5, 59))  # Saturday early morning
    assert not night.contains(datetime(2027, 1, 8, 5, 59))  # Friday early morning
    assert parse_window("00:00-24:00").contains(datetime(2027, 1, 10, 23, 59))
    assert parse_window("sat-mon 00:00-01:00").days == frozenset({5, 6, 0})
    assert parse_window("mon,wed 10:00-11:00").days == frozenset({0, 2})


@pytest.mark.parametrize("text", ["", "mon-fri", "08:00", "mon-fri 8-18", "funday 08:00-09:00",
                                  "mon 25:00-26:00", "mon 08:00-08:00", "mon 08:60-09:00",
                                  "mon-fri 24:00-06:00"])
def test_bad_windows(text: str) -> None:
    with pytest.raises(ValueError, match="window"):
        parse_window(text)
