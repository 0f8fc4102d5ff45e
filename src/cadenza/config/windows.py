"""Run windows: ``"mon-fri 08:00-18:00"`` — when a job's runs may start (job's zone).

Syntax: ``[DAYS ]HH:MM-HH:MM``. ``DAYS`` is a comma list of day names (``mon`` … ``sun``)
or ranges of them (``mon-fri``, ``fri-mon`` wraps over the week end); without it the
window is open every day. Times are ``00:00`` … ``23:59``; the end may be ``24:00``. An
end before the start crosses midnight (``22:00-06:00``): the days name the day the window
opens on. A window never is empty (start = end is an error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
EXPECTED = 'expected a window like "mon-fri 08:00-18:00" or "22:00-06:00"'
_WINDOW = re.compile(r"(?:(?P<days>[A-Za-z,\- ]+?)\s+)?(?P<start>\d{1,2}:\d{2})\s*-\s*"
                     r"(?P<end>\d{1,2}:\d{2})")


@dataclass(frozen=True)
class Window:
    """A parsed window: the days it opens on (0 = Monday) and minutes since midnight."""

    days: frozenset[int]
    start: int
    end: int

    @property
    def crosses_midnight(self) -> bool:
        """True when the window closes on the day after it opens."""
        return self.end <= self.start

    def contains(self, local: datetime) -> bool:
        """Whether the local (job-zone) time ``local`` falls inside the window."""
        minute = local.hour * 60 + local.minute
        day = local.weekday()
        if not self.crosses_midnight:
            return day in self.days and self.start <= minute < self.end
        if day in self.days and minute >= self.start:
            return True
        return (day - 1) % 7 in self.days and minute < self.end


def parse_window(text: str) -> Window:
    """Parse one window; raise :class:`ValueError` saying the expected form."""
    match = _WINDOW.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{EXPECTED}, got {text!r}")
    days = _days(match.group("days")) if match.group("days") else frozenset(range(7))
    start = _minutes(match.group("start"), text, allow_24=False)
    end = _minutes(match.group("end"), text, allow_24=True)
    if start == end:
        raise ValueError(f"window {text!r} is empty: start and end are the same time")
    return Window(days, start, end)


def _days(text: str) -> frozenset[int]:
    days: set[int] = set()
    for item in text.replace(" ", "").lower().split(","):
        first, dash, last = item.partition("-")
        if first not in DAY_NAMES or (dash and last not in DAY_NAMES):
            raise ValueError(f"{EXPECTED}: unknown day {item!r} (days are mon, tue, wed, thu, "
                             "fri, sat, sun)")
        a = DAY_NAMES.index(first)
        b = DAY_NAMES.index(last) if dash else a
        k = a
        while True:
            days.add(k)
            if k == b:
                break
            k = (k + 1) % 7
    return frozenset(days)


def _minutes(hhmm: str, text: str, *, allow_24: bool) -> int:
    hours, minutes = (int(x) for x in hhmm.split(":"))
    if allow_24 and hours == 24 and minutes == 0:
        return 1440
    if hours > 23 or minutes > 59:
        raise ValueError(f"{EXPECTED}: {hhmm!r} is not a time of day (00:00-23:59) in {text!r}")
    return hours * 60 + minutes
