"""Run windows: ``"mon-fri 08:00-18:00"`` — when a job's runs may start (job's zone).

Syntax: ``[DAYS ]HH:MM-HH:MM``. ``DAYS`` is a comma list of day names (``mon`` … ``sun``)
or ranges of them (``mon-fri``, ``fri-mon`` wraps over the week end); without it the
window is open every day. Times are ``00:00`` … ``23:59``; the end may be ``24:00``. An
end before the start crosses midnight (``22:00-06:00``): the days name the day the window
opens on. A window never is empty (start = end is an error).

A window is a set of wall-clock times in the job's zone, so daylight saving time follows
from :meth:`Window.contains`: on the spring night the window opens at the first instant the
clocks show a time inside it (``02:30-04:00`` opens at 03:00, when the clocks jump from
02:00; a window lying wholly inside the gap does not open that night); on the autumn night
the repeated hour is inside the window in both of its passes. :meth:`Window.next_open` finds
the first instant at which :meth:`Window.contains` holds, so the two never disagree.

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
EXPECTED = 'expected a window like "mon-fri 08:00-18:00" or "22:00-06:00"'
_WINDOW = re.compile(r"(?:(?P<days>[A-Za-z,\- ]+?)\s+)?(?P<start>\d{1,2}:\d{2})\s*-\s*"
                     r"(?P<end>\d{1,2}:\d{2})")
# A window opens at least once a week; two weeks leave room for a DST night that swallows
# one opening.
_SEARCH_DAYS = 15


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

    def next_open(self, local: datetime) -> datetime:
        """The first instant at or after ``local`` at which the window is open.

        ``local`` must be timezone-aware; the window is evaluated in its zone (the job's),
        and the result is in that zone. Returns ``local`` itself when the window is open
        then. DST nights follow the module's rule (see the module docstring).
        """
        tz = local.tzinfo
        if tz is None or local.utcoffset() is None:
            raise ValueError("next_open() needs a timezone-aware datetime")
        if self.contains(local):
            return local
        after = local.astimezone(UTC)
        first_day = local.date()
        for offset in range(_SEARCH_DAYS):
            day = first_day + timedelta(days=offset)
            # Instants are compared in UTC: aware datetimes sharing one tzinfo compare by
            # wall time, which is wrong across a DST change.
            candidates = _transitions_on(day, tz)
            if day.weekday() in self.days:
                candidates += [_instant(day, self.start, tz, fold) for fold in (0, 1)]
            opening = [c for c in candidates
                       if c > after and self.contains(c.astimezone(tz))]
            if opening:
                return min(opening).astimezone(tz)
        raise ValueError(f"window {self.describe()} does not open within {_SEARCH_DAYS} days")

    def describe(self) -> str:
        """The canonical text of the window (``"mon-fri 08:00-18:00"``), parseable again."""
        times = f"{_hhmm(self.start)}-{_hhmm(self.end)}"
        days = describe_days(self.days)
        return f"{days} {times}" if days else times


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


def is_open(windows: Iterable[Window], local: datetime) -> bool:
    """Whether a job with ``windows`` may start at ``local``: no windows means always."""
    listed = tuple(windows)
    return not listed or any(w.contains(local) for w in listed)


def next_opening(windows: Iterable[Window], local: datetime) -> datetime:
    """The first instant at or after ``local`` at which one of ``windows`` is open.

    ``local`` when already open (or when there are no windows); in ``local``'s zone.
    """
    listed = tuple(windows)
    if is_open(listed, local):
        return local
    return min((w.next_open(local) for w in listed), key=lambda t: t.astimezone(UTC))


def describe_days(days: frozenset[int]) -> str:
    """``{0,1,2,3,4}`` → ``"mon-fri"``, ``{4,5,6,0}`` → ``"fri-mon"``; every day → ``""``."""
    if len(days) == 7:
        return ""
    runs: list[tuple[int, int]] = []
    for first in sorted(days):
        if (first - 1) % 7 in days:
            continue
        last = first
        while (last + 1) % 7 in days:
            last = (last + 1) % 7
        runs.append((first, last))
    return ",".join(DAY_NAMES[a] if a == b else f"{DAY_NAMES[a]}-{DAY_NAMES[b]}"
                    for a, b in runs)


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _offset(instant: datetime, tz: tzinfo) -> timedelta | None:
    return instant.astimezone(tz).utcoffset()


def _transition_between(lo: datetime, hi: datetime, tz: tzinfo) -> datetime:
    """The first instant in ``(lo, hi]`` (UTC) with ``hi``'s UTC offset, to the second."""
    target = _offset(hi, tz)
    low, high = int(lo.timestamp()), int(hi.timestamp())
    while high - low > 1:
        mid = (low + high) // 2
        if _offset(datetime.fromtimestamp(mid, UTC), tz) == target:
            high = mid
        else:
            low = mid
    return datetime.fromtimestamp(high, UTC)


def _instant(day: date, minute: int, tz: tzinfo, fold: int) -> datetime:
    """The UTC instant the clocks of ``tz`` show ``minute`` on ``day`` (pass ``fold``).

    A wall time inside a spring gap never shows; it maps to the instant the clocks jump
    past it (the first instant after the gap), like the cron rule (docs/scheduling.md).
    """
    naive = datetime.combine(day, time()) + timedelta(minutes=minute)
    utc = naive.replace(tzinfo=tz, fold=fold).astimezone(UTC)
    if utc.astimezone(tz).replace(tzinfo=None) == naive:
        return utc
    one = naive.replace(tzinfo=tz, fold=0).astimezone(UTC)
    other = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
    return _transition_between(min(one, other), max(one, other), tz)


def _transitions_on(day: date, tz: tzinfo) -> list[datetime]:
    """The UTC instant of a change of offset during local ``day``, if any (at most one)."""
    begin = _instant(day, 0, tz, 0)
    end = _instant(day + timedelta(days=1), 0, tz, 0)
    if _offset(begin, tz) == _offset(end, tz):
        return []
    return [_transition_between(begin, end, tz)]


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
