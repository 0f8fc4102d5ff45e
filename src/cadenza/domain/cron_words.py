"""A cron schedule in words, for people: ``every day at 02:00, Europe/Paris``, ``monthly on
day 1 at 06:00, UTC``.

:func:`describe` reads the parsed sets of a :class:`~cadenza.domain.cron.CronExpr` (so an
alias and its five fields read the same) and names the zone the schedule fires in: a
schedule always says whose clock it follows (docs/ui.md). What it cannot say shortly it
leaves as the expression (``cron "1,2 3-5 * * *", UTC``), never a wrong sentence.

Day of week counts 0 = Monday … 6 = Sunday, as everywhere in Cadenza.
"""

from __future__ import annotations

from cadenza.domain.cron import DAY_NAMES, CronError, CronExpr, parse_cron

MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
               "September", "October", "November", "December")
_MAX_TIMES = 4
"""At most this many wall times are listed (``at 02:00 and 14:30``)."""


def describe(expression: str | CronExpr, zone: str | None = None) -> str:
    """The schedule in words with its zone (``, Europe/Paris``) when given; the expression
    itself for one that does not parse."""
    try:
        cron = parse_cron(expression) if isinstance(expression, str) else expression
    except CronError:
        text = f"cron {expression!r}"
    else:
        text = _words(cron)
    return f"{text}, {zone}" if zone else text


def _step(values: frozenset[int], low: int, high: int) -> int | None:
    """The step of ``values`` when they are ``low, low+s, low+2s ...`` up to ``high``."""
    ordered = sorted(values)
    if len(ordered) < 2 or ordered[0] != low:
        return None
    step = ordered[1] - ordered[0]
    if ordered != list(range(low, high + 1, step)):
        return None
    return step


def _ordinal(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return f"{day}th"
    return f"{day}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th') }"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _time_part(cron: CronExpr) -> str | None:
    minutes, hours = cron.minutes, cron.hours
    all_hours = len(hours) == 24
    if len(minutes) == 60:
        if all_hours:
            return "every minute"
        if len(hours) <= _MAX_TIMES:
            return "every minute of " + _join([f"{h:02d}:00–{h:02d}:59" for h in sorted(hours)])
        return None
    minute_step = _step(minutes, 0, 59)
    if all_hours:
        if minute_step is not None:
            return f"every {minute_step} minutes"
        if len(minutes) == 1:
            (minute,) = minutes
            return "every hour" if minute == 0 else f"every hour at :{minute:02d}"
        return "every hour at " + _join([f":{m:02d}" for m in sorted(minutes)])
    hour_step = _step(hours, 0, 23)
    if hour_step is not None and len(minutes) == 1:
        (minute,) = minutes
        return f"every {hour_step} hours at :{minute:02d}"
    if len(minutes) * len(hours) <= _MAX_TIMES:
        times = [f"{h:02d}:{m:02d}" for h in sorted(hours) for m in sorted(minutes)]
        return "at " + _join(times)
    return None


def _weekdays(days: frozenset[int]) -> str:
    if days == frozenset(range(5)):
        return "on weekdays"
    if days == frozenset({5, 6}):
        return "on weekends"
    return "every " + _join([DAY_NAMES[d] for d in sorted(days)])


def _day_part(cron: CronExpr) -> str:
    if cron.days_restricted and cron.weekdays_restricted:
        weekdays = _weekdays(cron.weekdays).removeprefix("every ")
        days = _join([_ordinal(d) for d in sorted(cron.days)])
        text = f"on the {days} of the month or {weekdays}"
    elif cron.days_restricted:
        return _month_days(cron)
    elif cron.weekdays_restricted:
        text = _weekdays(cron.weekdays)
    else:
        text = "every day"
    if len(cron.months) < 12:
        text += " in " + _join([MONTH_NAMES[m - 1] for m in sorted(cron.months)])
    return text


def _month_days(cron: CronExpr) -> str:
    """Days of the month only: ``monthly on day 1``, ``monthly on days 1 and 15``,
    ``yearly on January 1``, ``on day 1 in January and July``."""
    days = sorted(cron.days)
    numbers = ("day " if len(days) == 1 else "days ") + _join([str(d) for d in days])
    if len(cron.months) == 12:
        return f"monthly on {numbers}"
    if len(cron.months) == 1 and len(days) == 1:
        (month,) = cron.months
        return f"yearly on {MONTH_NAMES[month - 1]} {days[0]}"
    return f"on {numbers} in " + _join([MONTH_NAMES[m - 1] for m in sorted(cron.months)])


def _words(cron: CronExpr) -> str:
    time = _time_part(cron)
    if time is None:
        return f"cron {cron.source!r}"
    day = _day_part(cron)
    if time.startswith("every") and day == "every day":
        return time
    if time.startswith("every"):
        return f"{time}, {day}"
    return f"{day} {time}"
