"""A cron schedule in words in French and Simplified Chinese, for the pages in those
languages (the command line stays English: :mod:`cadenza.domain.cron_words`).

The same shapes as the English words, in each language's order: ``tous les jours à 02:00,
Europe/Paris``, ``每天 02:00（Europe/Paris）``. A shape neither can say shortly stays the
expression (``cron "1,2 3-5 * * *"``). Days of the week count 0 = Monday, as everywhere.
"""

from __future__ import annotations

from cadenza.domain.cron import CronError, CronExpr, parse_cron
from cadenza.domain.cron_words import _MAX_TIMES, _step

FR_DAYS = ("lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche")
FR_MONTHS = ("janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août",
             "septembre", "octobre", "novembre", "décembre")
ZH_DAYS = ("周一", "周二", "周三", "周四", "周五", "周六", "周日")


def describe_in(lang: str, expression: str | CronExpr, zone: str | None = None) -> str:
    """The schedule in words in ``lang`` (``fr`` or ``zh_Hans``) with its zone."""
    try:
        cron = parse_cron(expression) if isinstance(expression, str) else expression
    except CronError:
        text = f"cron {expression!r}"
    else:
        text = (_zh(cron) if lang == "zh_Hans" else _fr(cron)) or f"cron {cron.source!r}"
    if not zone:
        return text
    return f"{text}（{zone}）" if lang == "zh_Hans" else f"{text}, {zone}"


# -- French ---------------------------------------------------------------------------------

def _fr_join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " et " + items[-1]


def _fr_day(day: int) -> str:
    return "1er" if day == 1 else str(day)


def _fr_time(cron: CronExpr) -> str | None:
    minutes, hours = cron.minutes, cron.hours
    all_hours = len(hours) == 24
    if len(minutes) == 60:
        if all_hours:
            return "chaque minute"
        if len(hours) <= _MAX_TIMES:
            return "chaque minute de " + _fr_join(
                [f"{h:02d}:00–{h:02d}:59" for h in sorted(hours)])
        return None
    minute_step = _step(minutes, 0, 59)
    if all_hours:
        if minute_step is not None:
            return f"toutes les {minute_step} minutes"
        if len(minutes) == 1:
            (minute,) = minutes
            return "toutes les heures" if minute == 0 else f"toutes les heures à :{minute:02d}"
        return "toutes les heures à " + _fr_join([f":{m:02d}" for m in sorted(minutes)])
    hour_step = _step(hours, 0, 23)
    if hour_step is not None and len(minutes) == 1:
        (minute,) = minutes
        return f"toutes les {hour_step} heures à :{minute:02d}"
    if len(minutes) * len(hours) <= _MAX_TIMES:
        return "à " + _fr_join([f"{h:02d}:{m:02d}" for h in sorted(hours)
                                for m in sorted(minutes)])
    return None


def _fr_weekdays(days: frozenset[int]) -> str:
    if days == frozenset(range(5)):
        return "en semaine"
    if days == frozenset({5, 6}):
        return "le week-end"
    return "le " + _fr_join([FR_DAYS[d] for d in sorted(days)])


def _fr_months(cron: CronExpr) -> str:
    return _fr_join([FR_MONTHS[m - 1] for m in sorted(cron.months)])


def _fr_dates(cron: CronExpr) -> str:
    days = sorted(cron.days)
    return ("le " if len(days) == 1 else "les ") + _fr_join([_fr_day(d) for d in days])


def _fr_day_part(cron: CronExpr) -> str:
    if cron.days_restricted and cron.weekdays_restricted:
        text = f"{_fr_dates(cron)} du mois ou {_fr_weekdays(cron.weekdays)}"
    elif cron.days_restricted:
        if len(cron.months) == 12:
            return f"chaque mois {_fr_dates(cron)}"
        if len(cron.months) == 1 and len(cron.days) == 1:
            (month,) = cron.months
            (day,) = cron.days
            return f"chaque année le {_fr_day(day)} {FR_MONTHS[month - 1]}"
        return f"{_fr_dates(cron)} en {_fr_months(cron)}"
    elif cron.weekdays_restricted:
        text = _fr_weekdays(cron.weekdays)
    else:
        text = "tous les jours"
    if len(cron.months) < 12:
        text += f" en {_fr_months(cron)}"
    return text


def _fr(cron: CronExpr) -> str | None:
    time = _fr_time(cron)
    if time is None:
        return None
    day = _fr_day_part(cron)
    repeating = time.startswith(("chaque", "toutes"))
    if repeating and day == "tous les jours":
        return time
    return f"{time}, {day}" if repeating else f"{day} {time}"


# -- Simplified Chinese ---------------------------------------------------------------------

def _zh_time(cron: CronExpr) -> str | None:
    minutes, hours = cron.minutes, cron.hours
    all_hours = len(hours) == 24
    if len(minutes) == 60:
        if all_hours:
            return "每分钟"
        if len(hours) <= _MAX_TIMES:
            return "、".join(f"{h:02d}:00–{h:02d}:59" for h in sorted(hours)) + " 的每分钟"
        return None
    minute_step = _step(minutes, 0, 59)
    if all_hours:
        if minute_step is not None:
            return f"每 {minute_step} 分钟"
        if len(minutes) == 1:
            (minute,) = minutes
            return "每小时" if minute == 0 else f"每小时的第 {minute} 分钟"
        return "每小时的第 " + "、".join(str(m) for m in sorted(minutes)) + " 分钟"
    hour_step = _step(hours, 0, 23)
    if hour_step is not None and len(minutes) == 1:
        (minute,) = minutes
        return f"每 {hour_step} 小时的第 {minute} 分钟"
    if len(minutes) * len(hours) <= _MAX_TIMES:
        return "、".join(f"{h:02d}:{m:02d}" for h in sorted(hours) for m in sorted(minutes))
    return None


def _zh_weekdays(days: frozenset[int]) -> str:
    if days == frozenset(range(5)):
        return "工作日"
    if days == frozenset({5, 6}):
        return "周末"
    return "每" + "、".join(ZH_DAYS[d] for d in sorted(days))


def _zh_dates(cron: CronExpr) -> str:
    return "、".join(f"{d}日" for d in sorted(cron.days))


def _zh_months(cron: CronExpr) -> str:
    return "、".join(f"{m}月" for m in sorted(cron.months))


def _zh_day_part(cron: CronExpr) -> str:
    months = "" if len(cron.months) == 12 else _zh_months(cron)
    if cron.days_restricted and cron.weekdays_restricted:
        text = f"每月{_zh_dates(cron)}或{_zh_weekdays(cron.weekdays)}"
        return f"{months}的{text}" if months else text
    if cron.days_restricted:
        if not months:
            return f"每月{_zh_dates(cron)}"
        if len(cron.months) == 1 and len(cron.days) == 1:
            return f"每年{months}{_zh_dates(cron)}"
        return f"{months}的{_zh_dates(cron)}"
    text = _zh_weekdays(cron.weekdays) if cron.weekdays_restricted else "每天"
    return f"{months}的{text}" if months else text


def _zh(cron: CronExpr) -> str | None:
    time = _zh_time(cron)
    if time is None:
        return None
    day = _zh_day_part(cron)
    repeating = time.startswith("每") or time.endswith("每分钟")
    if repeating and day == "每天":
        return time
    return f"{day}{time}" if repeating else f"{day} {time}"
