from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from cadenza.domain.cron import CronError, next_fires, parse_cron

PARIS = ZoneInfo("Europe/Paris")
START = datetime(2027, 3, 1, 0, 0, tzinfo=UTC)  # a Monday


def weekdays(expr: str, n: int = 6) -> set[int]:
    return {f.weekday() for f in next_fires(expr, PARIS, START, n)}


def test_day_zero_is_monday_and_names_mean_what_they_say() -> None:
    assert weekdays("0 9 * * 0") == {0}
    assert weekdays("0 9 * * sun") == {6}
    assert weekdays("0 9 * * 6") == {6}
    assert weekdays("0 9 * * mon-fri", 15) == {0, 1, 2, 3, 4}
    assert weekdays("0 9 * * 5-6", 8) == {5, 6}


@pytest.mark.reliability_case(13)
def test_both_day_fields_restricted_fire_on_either() -> None:
    fires = next_fires("0 9 1 * mon", PARIS, datetime(2027, 3, 2, tzinfo=UTC), 6)
    assert all(f.day == 1 or f.weekday() == 0 for f in fires)
    assert any(f.day == 1 and f.weekday() != 0 for f in fires)
    assert any(f.weekday() == 0 and f.day != 1 for f in fires)


def test_aliases_and_leap_day() -> None:
    assert [f.day for f in next_fires("@monthly", PARIS, START, 3)] == [1, 1, 1]
    leap = next_fires("0 0 29 2 *", PARIS, START, 1)[0]
    assert (leap.year, leap.month, leap.day) == (2028, 2, 29)


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("0 9 * * 7", "day-of-week"),
        ("60 * * * *", "minute"),
        ("0 24 * * *", "hour"),
        ("0 0 0 * *", "day-of-month"),
        ("0 0 * 13 *", "month"),
        ("*/0 * * * *", "minute"),
        ("0 0 30 2 *", "day-of-month"),
        ("0 0 * * mon-7", "day-of-week"),
        ("0 0 L * *", "day-of-month"),
        ("5-1 * * * *", "minute"),
        ("x * * * *", "minute"),
    ],
)
@pytest.mark.reliability_case(10, 13)
def test_bad_fields_are_named(expr: str, field: str) -> None:
    with pytest.raises(CronError) as info:
        parse_cron(expr)
    assert info.value.field == field
    assert field in str(info.value)


@pytest.mark.parametrize("expr", ["", "* * * *", "* * * * * *", "@fortnightly", "1" * 300])
@pytest.mark.reliability_case(10)
def test_malformed_expressions(expr: str) -> None:
    with pytest.raises(CronError):
        parse_cron(expr)


@pytest.mark.reliability_case(11)
def test_spring_gap_fires_once_after_the_gap() -> None:
    fires = next_fires("30 2 * * *", PARIS, datetime(2027, 3, 27, 12, tzinfo=UTC), 2)
    assert fires[0].isoformat() == "2027-03-28T03:00:00+02:00"
    assert fires[1].isoformat() == "2027-03-29T02:30:00+02:00"
