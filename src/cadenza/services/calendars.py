"""Business calendars as a person reads them: ``cadenza calendars list|show`` and
``GET /api/calendars[/NAME]`` (docs/calendars.md).

``show(name, year, language)`` lists a year's days off (public holidays and the home's own
closing days) and extra working days (make-up days), each with its name in ``language``
(``en``, ``fr``, ``zh_Hans``; None: the calendar's own, which is the country's language by
default); ordinary weekends are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cadenza.domain.calendar import WEEKDAY_KEYS, Calendar, DayInfo
from cadenza.services.errors import InvalidRequest, NotFound

if TYPE_CHECKING:
    from cadenza.services.context import Services

KIND_WORDS = {"holiday": "public holiday", "closed": "day off (this home's)",
              "extra_working": "extra working day (make-up)", "weekend": "weekend",
              "working": "working day"}


@dataclass(frozen=True)
class CalendarSummary:
    """One calendar of cadenza.toml, as ``calendars list`` shows it."""

    name: str
    country: str | None
    subdivision: str | None
    weekend: tuple[str, ...]
    days_off: int
    working_days: int

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "country": self.country, "subdivision": self.subdivision,
                "weekend": list(self.weekend), "days_off": self.days_off,
                "working_days": self.working_days}


@dataclass(frozen=True)
class CalendarYear:
    """The named days of one calendar in one year."""

    name: str
    year: int
    language: str | None
    days: tuple[DayInfo, ...]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "year": self.year, "language": self.language,
                "days": [{"date": d.day.isoformat(), "weekday": WEEKDAY_KEYS[d.day.weekday()],
                          "kind": d.kind, "working": d.working, "name": d.name}
                         for d in self.days]}


class CalendarService:
    """Reads the business calendars of a home."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def _all(self) -> dict[str, Calendar]:
        return dict(self.services.settings().settings.calendar_objects)

    def list(self) -> list[CalendarSummary]:
        """Every calendar of cadenza.toml, in file order."""
        return [CalendarSummary(c.name, c.country, c.subdivision,
                                tuple(WEEKDAY_KEYS[d] for d in sorted(c.rest_days())),
                                len(c.days_off), len(c.working_days))
                for c in self._all().values()]

    def show(self, name: str, year: int, language: str | None = None) -> CalendarYear:
        """The days off and extra working days of ``name`` in ``year``."""
        calendars = self._all()
        if name not in calendars:
            raise NotFound(f"no calendar {name!r} in cadenza.toml (calendars: "
                           f"{', '.join(calendars) or 'none'}); add a [calendars.{name}] table")
        if not 1900 <= year <= 2200:
            raise InvalidRequest(f"expected a year between 1900 and 2200, got {year}")
        return CalendarYear(name, year, language,
                            tuple(calendars[name].year(year, language)))
