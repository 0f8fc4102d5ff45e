"""Business calendars: which days are worked, and the name of each day off (docs/calendars.md).

A :class:`Calendar` is a country's public holidays (and, for a country that moves working days,
its make-up working days: China's 调休 Saturdays) from the ``holidays`` library, which computes
them offline, plus the home's own additions: ``days_off`` (a company's closing days) and
``working_days`` (a make-up day the library does not know yet, a holiday the company works).
The home's additions win over the library; ``working_days`` wins over ``days_off``.

A day is worked when it is not a weekly rest day (the ``weekend``, by default the country's)
and not a holiday, or when it is an extra working day. :meth:`Calendar.day` answers for one
date, with the day's name in a language; :meth:`Calendar.year` lists a year's days off and
extra working days; :meth:`Calendar.nth_working_day` is "the 3rd working day of the month" (or
``-1``, the last).

Names come in the calendar's language (``language``, else the library's default for the
country: French for France, Chinese for China); :meth:`Calendar.day` and :meth:`Calendar.year`
take another language and fall back to English, then to the country's own, where the library
has no translation.
"""

from __future__ import annotations

import calendar as stdcal
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

import holidays as holidays_lib

DayKind = Literal["working", "weekend", "holiday", "closed", "extra_working"]
"""``working`` an ordinary working day; ``weekend`` a weekly rest day without a name;
``holiday`` a public holiday of the country; ``closed`` a day off of the home's own;
``extra_working`` a working day on a weekly rest day or a holiday (a make-up day)."""

WEEKDAY_KEYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
LANGUAGES = {"en": "en_US", "fr": "fr", "zh_Hans": "zh_CN", "zh": "zh_CN"}
"""Cadenza's page languages → the ``holidays`` library's."""
MAX_WORKING_DAYS = 23
"""No month has more working days than this: ``business_day`` lies in ±1..this."""


class CalendarError(ValueError):
    """A calendar cannot be built (an unknown country or subdivision); says which."""


def supported_countries() -> dict[str, list[str]]:
    """Country code → its subdivision codes, as the library knows them."""
    return {code: list(subs) for code, subs in holidays_lib.list_supported_countries().items()}


@functools.lru_cache(maxsize=256)
def _library_year(country: str, subdivision: str | None, year: int,
                  language: str | None) -> tuple[dict[date, str], frozenset[date], frozenset[int]]:
    """(holidays → name, make-up working days, weekly rest days) of one country and year."""
    try:
        found = holidays_lib.country_holidays(country, subdiv=subdivision, years=year,
                                              language=language)
    except NotImplementedError as exc:
        raise CalendarError(str(exc)) from exc
    names = {day: name for day, name in found.items() if day.year == year}
    extra = frozenset(d for d in getattr(found, "weekend_workdays", ()) if d.year == year)
    weekend = frozenset(getattr(found, "weekend", (5, 6)))
    return names, extra, weekend


@functools.lru_cache(maxsize=64)
def _languages_of(country: str) -> tuple[str | None, tuple[str, ...]]:
    """(the country's own language, every language its names come in)."""
    entity = holidays_lib.country_holidays(country, years=[])
    return (getattr(entity, "default_language", None),
            tuple(getattr(entity, "supported_languages", ())))


@dataclass(frozen=True)
class DayInfo:
    """One date as a calendar sees it."""

    day: date
    working: bool
    kind: DayKind
    name: str | None = None


@dataclass(frozen=True)
class Calendar:
    """A business calendar (see the module doc). Frozen and hashable: a schedule that
    names it restarts its fires when it changes."""

    name: str
    country: str | None = None
    subdivision: str | None = None
    language: str | None = None
    weekend: frozenset[int] | None = None
    """Weekly rest days (0 = Monday); None: the country's (Saturday and Sunday without one)."""
    days_off: tuple[tuple[date, str], ...] = ()
    working_days: tuple[tuple[date, str], ...] = ()
    _own_off: Mapping[date, str] = field(default_factory=dict, init=False, compare=False,
                                         hash=False, repr=False)
    _own_work: Mapping[date, str] = field(default_factory=dict, init=False, compare=False,
                                          hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_own_off", dict(self.days_off))
        object.__setattr__(self, "_own_work", dict(self.working_days))
        if self.country is not None:
            self._library(2000, None)  # an unknown country or subdivision fails here, named

    def _lang(self, language: str | None) -> str | None:
        """The library's language for ``language`` (a page language or a library one)."""
        if self.country is None:
            return None
        own, supported = _languages_of(self.country)
        wanted = language or self.language
        wanted = LANGUAGES.get(wanted, wanted) if wanted else None
        if wanted is None or wanted in supported:
            return wanted or own  # never the process's locale: the library reads $LANG
        return "en_US" if "en_US" in supported else own

    def _library(self, year: int, language: str | None
                 ) -> tuple[dict[date, str], frozenset[date], frozenset[int]]:
        if self.country is None:
            return {}, frozenset(), frozenset((5, 6))
        return _library_year(self.country, self.subdivision, year, self._lang(language))

    def language_problem(self, language: str) -> str | None:
        """Why the names cannot come in ``language`` (a library code like ``fr`` or
        ``zh_CN``), or None."""
        if self.country is None:
            return None
        _, supported = _languages_of(self.country)
        if language in supported or LANGUAGES.get(language) in supported:
            return None
        return (f"no names in {language!r} for {self.country}: expected one of "
                f"{', '.join(supported)}")

    def rest_days(self) -> frozenset[int]:
        """The weekly rest days (0 = Monday)."""
        if self.weekend is not None:
            return self.weekend
        return self._library(2000, None)[2]

    def day(self, when: date, language: str | None = None) -> DayInfo:
        """Whether ``when`` is worked, and the name of the day off or extra working day."""
        if when in self._own_work:
            return DayInfo(when, True, "extra_working", self._own_work[when])
        if when in self._own_off:
            return DayInfo(when, False, "closed", self._own_off[when])
        names, extra, _ = self._library(when.year, language)
        if when in names:
            return DayInfo(when, False, "holiday", names[when])
        rest = when.weekday() in self.rest_days()
        if when in extra:
            return DayInfo(when, True, "extra_working", None)
        if rest:
            return DayInfo(when, False, "weekend", None)
        return DayInfo(when, True, "working", None)

    def working(self, when: date) -> bool:
        """Whether ``when`` is a working day."""
        return self.day(when).working

    def year(self, year: int, language: str | None = None) -> list[DayInfo]:
        """Every day off with a name and every extra working day of ``year``, in date order
        (ordinary weekends are left out)."""
        names, extra, _ = self._library(year, language)
        days = set(names) | set(extra)
        days |= {d for d in self._own_off if d.year == year}
        days |= {d for d in self._own_work if d.year == year}
        out = [self.day(d, language) for d in sorted(days)]
        return [d for d in out if d.kind in ("holiday", "closed", "extra_working")]

    def nth_working_day(self, year: int, month: int, n: int) -> date | None:
        """The ``n``-th working day of the month (``-1`` the last, ``-2`` the one before), or
        None when the month has fewer."""
        days = [date(year, month, d) for d in range(1, stdcal.monthrange(year, month)[1] + 1)]
        worked = [d for d in days if self.working(d)]
        if n == 0 or abs(n) > len(worked):
            return None
        return worked[n - 1] if n > 0 else worked[n]

    def shifted(self, when: date, direction: int, limit: int) -> date | None:
        """The nearest working day after (``direction`` 1) or before (-1) ``when``, within
        ``limit`` days, or None."""
        for k in range(1, limit + 1):
            candidate = when + timedelta(days=direction * k)
            if self.working(candidate):
                return candidate
        return None


def calendar_from(name: str, table: Mapping[str, Any]) -> Calendar:
    """A :class:`Calendar` from the validated values of ``[calendars.NAME]`` (a mapping with
    ``country``, ``subdivision``, ``language``, ``weekend``, ``days_off``, ``working_days``)."""
    weekend = table.get("weekend")
    return Calendar(
        name=name,
        country=table.get("country"),
        subdivision=table.get("subdivision"),
        language=table.get("language"),
        weekend=frozenset(WEEKDAY_KEYS.index(d) for d in weekend) if weekend is not None
        else None,
        days_off=tuple(sorted((date.fromisoformat(k), v)
                              for k, v in (table.get("days_off") or {}).items())),
        working_days=tuple(sorted((date.fromisoformat(k), v)
                                  for k, v in (table.get("working_days") or {}).items())),
    )
