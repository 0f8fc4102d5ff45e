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


@pytest.mark.parametrize(("expr", "field", "said"), [
    ("0 9 * * 5#5", "day-of-week", "'5#5': the n-th weekday form (#, like fri#5) is not "
                                   "supported"),
    ("0 9 * * fri#1", "day-of-week", "'fri#1': the n-th weekday form"),
    ("0 9 1,15#2 * *", "day-of-month", "'15#2': the n-th weekday form"),
    ("0 9 L * *", "day-of-month", "'L': the last-day form (L) is not supported; for the last "
                                  "working day of the month use business_day = -1"),
    ("0 9 LW * *", "day-of-month", "'LW': the last-day form (L)"),
    ("0 9 l * *", "day-of-month", "'l': the last-day form (L)"),
    ("0 9 * * 5L", "day-of-week", "'5L': the last-weekday form (L, like friL)"),
    ("0 9 * * friL", "day-of-week", "'friL': the last-weekday form"),
    ("0 9 15W * *", "day-of-month", "'15W': the nearest-weekday form (W) is not supported"),
    ("0 9 ? * mon", "day-of-month", "'?': '?' is not part of this dialect; write '*'"),
    ("0 9 1 * ?", "day-of-week", "'?': '?' is not part of this dialect"),
])
@pytest.mark.reliability_case(13)
def test_the_forms_of_other_crons_are_refused_naming_field_and_form(
        expr: str, field: str, said: str) -> None:
    """``#`` (n-th weekday), ``L`` (last), ``W`` (nearest weekday) and ``?`` come from other
    cron dialects, where they mean different things; a schedule that uses them is refused
    with the field and the form named, never read as something else (``5#5`` would be the
    fifth Friday in one cron and the fifth Saturday in this one's numbering)."""
    with pytest.raises(CronError) as info:
        parse_cron(expr)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert said in str(info.value)


@pytest.mark.reliability_case(13)
def test_names_holding_the_letters_l_and_w_are_still_days_and_months() -> None:
    """The refusal of ``L`` and ``W`` looks at the day fields only: ``jul`` and ``wed`` are
    a month and a day, and fire."""
    fires = next_fires("0 9 * jul wed", PARIS, START, 2)
    assert all(f.month == 7 and f.weekday() == 2 for f in fires)


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
