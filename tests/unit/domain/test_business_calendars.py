"""Golden tests of business calendars: the fire dates of business-day schedules over 2025–2026
for France, France with Alsace-Moselle and China equal lists written here from the official
calendars (the French Code du travail L3133-1 and its Alsace-Moselle additions; the State
Council's notices on the 2025 and 2026 holidays, make-up working days included), not from
the library that Cadenza reads them from."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cadenza.domain.business_days import CalendarRule
from cadenza.domain.calendar import Calendar
from cadenza.domain.cron import parse_cron

PARIS = ZoneInfo("Europe/Paris")
SHANGHAI = ZoneInfo("Asia/Shanghai")


def days(*spans: str) -> set[date]:
    """``"2025-01-28..2025-02-04"`` or ``"2025-01-01"`` → the dates."""
    out: set[date] = set()
    for span in spans:
        first, _, last = span.partition("..")
        d, end = date.fromisoformat(first), date.fromisoformat(last or first)
        while d <= end:
            out.add(d)
            d += timedelta(days=1)
    return out


FR_OFF = days(
    "2025-01-01", "2025-04-21", "2025-05-01", "2025-05-08", "2025-05-29", "2025-06-09",
    "2025-07-14", "2025-08-15", "2025-11-01", "2025-11-11", "2025-12-25",
    "2026-01-01", "2026-04-06", "2026-05-01", "2026-05-08", "2026-05-14", "2026-05-25",
    "2026-07-14", "2026-08-15", "2026-11-01", "2026-11-11", "2026-12-25",
)
ALSACE_MOSELLE_OFF = FR_OFF | days("2025-04-18", "2025-12-26", "2026-04-03", "2026-12-26")
CN_OFF = days(
    # 2025: 元旦; 春节 1/28–2/4; 清明 4/4–6; 劳动节 5/1–5; 端午 5/31–6/2; 国庆中秋 10/1–8
    "2025-01-01", "2025-01-28..2025-02-04", "2025-04-04..2025-04-06",
    "2025-05-01..2025-05-05", "2025-05-31..2025-06-02", "2025-10-01..2025-10-08",
    # 2026: 元旦 1/1–3; 春节 2/15–23; 清明 4/4–6; 劳动节 5/1–5; 端午 6/19–21; 中秋 9/25–27;
    # 国庆 10/1–7
    "2026-01-01..2026-01-03", "2026-02-15..2026-02-23", "2026-04-04..2026-04-06",
    "2026-05-01..2026-05-05", "2026-06-19..2026-06-21", "2026-09-25..2026-09-27",
    "2026-10-01..2026-10-07",
)
CN_WORKED_WEEKENDS = days(
    "2025-01-26", "2025-02-08", "2025-04-27", "2025-09-28", "2025-10-11",
    "2026-01-04", "2026-02-14", "2026-02-28", "2026-05-09", "2026-09-20", "2026-10-10",
)


def working_days(off: set[date], extra: set[date] | None = None) -> list[date]:
    """Mon–Fri that are not off, plus the extra working days: the oracle."""
    extra = extra or set()
    out = []
    for d in sorted(days("2025-01-01..2026-12-31")):
        if (d.weekday() < 5 and d not in off) or d in extra:
            out.append(d)
    return out


def fire_dates(rule: CalendarRule, zone: ZoneInfo, expr: str = "0 2 * * *",
               runs_only: bool = True) -> list[date]:
    """The local dates of the rule's fires in 2025–2026 (skipped ones left out)."""
    cron = parse_cron(expr)
    start = datetime(2024, 12, 31, 12, tzinfo=zone)
    out = []
    for fire in rule.fires(cron, start, zone):
        if fire.year > 2026:
            break
        note = rule.note(cron, fire, zone)
        if runs_only and note is not None and note.kind == "skipped":
            continue
        out.append(fire.date())
    return out


@pytest.mark.parametrize(("calendar", "zone", "expected"), [
    (Calendar("fr", country="FR"), PARIS, working_days(FR_OFF)),
    (Calendar("alsace", country="FR", subdivision="57"), PARIS,
     working_days(ALSACE_MOSELLE_OFF)),
    (Calendar("cn", country="CN"), SHANGHAI, working_days(CN_OFF, CN_WORKED_WEEKENDS)),
], ids=["fr", "fr-alsace-moselle", "cn"])
def test_a_business_day_schedule_fires_on_the_official_working_days(
        calendar: Calendar, zone: ZoneInfo, expected: list[date]) -> None:
    assert fire_dates(CalendarRule(calendar, "business"), zone) == expected


def test_chinese_make_up_saturdays_fire_and_the_golden_week_does_not() -> None:
    dates = fire_dates(CalendarRule(Calendar("cn", country="CN"), "business"), SHANGHAI)
    assert date(2025, 1, 26) in dates and date(2025, 2, 8) in dates
    assert not days("2025-10-01..2025-10-08") & set(dates)


def nth(calendar: Calendar, n: int, zone: ZoneInfo) -> list[date]:
    return fire_dates(CalendarRule(calendar, business_day=n), zone, "0 6 * * *")


def oracle_nth(workdays: list[date], n: int) -> list[date]:
    out = []
    for year in (2025, 2026):
        for month in range(1, 13):
            month_days = [d for d in workdays if (d.year, d.month) == (year, month)]
            out.append(month_days[n - 1] if n > 0 else month_days[n])
    return out


def test_the_third_and_the_last_business_day_over_24_months() -> None:
    fr, cn = Calendar("fr", country="FR"), Calendar("cn", country="CN")
    fr_days, cn_days = working_days(FR_OFF), working_days(CN_OFF, CN_WORKED_WEEKENDS)
    for calendar, zone, workdays in ((fr, PARIS, fr_days), (cn, SHANGHAI, cn_days)):
        assert nth(calendar, 3, zone) == oracle_nth(workdays, 3)
        assert nth(calendar, -1, zone) == oracle_nth(workdays, -1)
        assert len(nth(calendar, 3, zone)) == 24
    # Spot checks read off the calendars by hand.
    assert nth(fr, 3, PARIS)[4] == date(2025, 5, 6)       # 1 and 8 May off: 2, 5, 6
    assert nth(cn, 3, SHANGHAI)[1] == date(2025, 2, 7)    # 春节 to 2/4: 2/5, 2/6, 2/7
    assert nth(cn, -1, SHANGHAI)[0] == date(2025, 1, 27)  # 1/28 is 除夕
    assert nth(cn, -1, SHANGHAI)[9] == date(2025, 10, 31)


def test_a_holiday_fire_is_kept_as_skipped_with_its_french_name() -> None:
    rule = CalendarRule(Calendar("fr", country="FR"), "business")
    dates = fire_dates(rule, PARIS, runs_only=False)
    assert date(2025, 7, 14) in dates                  # recorded, not silently absent
    assert date(2025, 7, 12) not in dates              # an ordinary Saturday is no fire
    cron = parse_cron("0 2 * * *")
    fire = datetime(2025, 7, 14, 2, tzinfo=PARIS)
    note = rule.note(cron, fire, PARIS)
    assert note is not None and note.kind == "skipped"
    assert note.days[0].name == "Fête nationale"
    assert "2025-07-14 Fête nationale" in note.text()
    english = rule.note(cron, fire, PARIS, "en")
    assert english is not None and english.days[0].name == "National Day"


def test_shift_next_moves_a_holiday_fire_and_merges_it_with_the_next_days_own() -> None:
    cal = Calendar("fr", country="FR")
    cron = parse_cron("0 2 14 * *")  # the 14th of each month
    rule = CalendarRule(cal, "business", "next")
    start = datetime(2025, 7, 1, tzinfo=PARIS)
    fires = [f for f, _ in zip(rule.fires(cron, start, PARIS), range(3), strict=False)]
    assert fires[0] == datetime(2025, 7, 15, 2, tzinfo=PARIS)
    note = rule.note(cron, fires[0], PARIS)
    assert note is not None and note.kind == "moved"
    assert note.text().startswith("moved from 2025-07-14 Fête nationale")
    assert fires[1] == datetime(2025, 8, 14, 2, tzinfo=PARIS)
    # 14 Sep 2025 is a Sunday: Monday 15th.
    assert fires[2] == datetime(2025, 9, 15, 2, tzinfo=PARIS)
    daily = CalendarRule(cal, "business", "next")
    every = [f.date() for f, _ in zip(daily.fires(parse_cron("0 2 * * *"),
                                                  datetime(2025, 7, 11, tzinfo=PARIS), PARIS),
                                      range(3), strict=False)]
    assert every == [date(2025, 7, 11), date(2025, 7, 15), date(2025, 7, 16)]


def test_shift_previous_moves_back_in_time_order() -> None:
    rule = CalendarRule(Calendar("fr", country="FR"), "business", "previous")
    cron = parse_cron("0 18 1 * *")  # the 1st of each month, 18:00
    start = datetime(2025, 4, 20, tzinfo=PARIS)
    fires = [f for f, _ in zip(rule.fires(cron, start, PARIS), range(3), strict=False)]
    # 1 May (holiday) → Wed 30 April; 1 June is a Sunday → Fri 30 May; 1 July a Tuesday.
    assert [f.date() for f in fires] == [date(2025, 4, 30), date(2025, 5, 30), date(2025, 7, 1)]
    assert all(f.astimezone(UTC) > start.astimezone(UTC) for f in fires)


def test_local_days_off_and_working_days_win_over_the_library() -> None:
    cal = Calendar("acme", country="FR", days_off=((date(2025, 12, 24), "Fermeture"),),
                   working_days=((date(2025, 6, 9), "Journée de solidarité"),))
    assert cal.day(date(2025, 12, 24)).name == "Fermeture"
    assert not cal.working(date(2025, 12, 24))
    assert cal.working(date(2025, 6, 9))  # Whit Monday, worked here
    listed = {(d.day, d.kind) for d in cal.year(2025)}
    assert (date(2025, 12, 24), "closed") in listed
    assert (date(2025, 6, 9), "extra_working") in listed
    bare = Calendar("plain", weekend=frozenset({4, 5}))  # Friday–Saturday weekend, no country
    assert not bare.working(date(2025, 7, 11)) and bare.working(date(2025, 7, 13))
