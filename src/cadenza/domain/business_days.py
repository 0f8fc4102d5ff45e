"""Schedules on a business calendar: the fires of a cron expression filtered or moved by the
working days of a :class:`~cadenza.domain.calendar.Calendar` (docs/calendars.md).

A :class:`CalendarRule` is what a job or preset asks with ``calendar``, ``days``, ``shift`` and
``business_day``:

* ``days = "business"``, ``shift = "skip"``: a fire on a working day fires; a fire on a named
  day off (a holiday, a closing day) is *skipped*: it is still a fire, recorded as a MISSED run
  whose reason names the day, so that nothing is silently absent; a fire on an ordinary weekly
  rest day is no fire at all, as a Monday-to-Friday cron does not fire on Saturday. A make-up
  working day (China's 调休 Saturdays) is a working day: a ``*`` day of week fires on it.
* ``shift = "next"`` / ``"previous"``: a fire on any day off moves to the nearest working day
  after (before) it, at the same wall time; a moved fire that lands on a fire of its own is
  one fire, not two. A day off with no working day within :data:`SHIFT_LIMIT` days drops.
* ``business_day = N``: fire only on the N-th working day of the month (``-1`` the last), at
  the times of the expression, whose day fields are ``*``.

:meth:`CalendarRule.fires` yields the fires (skipped ones included) in time order;
:meth:`CalendarRule.note` says what became of one: skipped, moved (from which days) or "the
3rd working day", with the day's name, for previews and the run's reason. Pure: no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from cadenza.domain.calendar import Calendar, DayInfo
from cadenza.domain.cron import CronExpr

Days = Literal["all", "business"]
Shift = Literal["skip", "next", "previous"]
SHIFT_LIMIT = 14
"""The farthest (in days) a fire moves to find a working day."""
_SPAN = timedelta(days=SHIFT_LIMIT + 1)
_EMPTY_MONTHS = 36
"""A ``business_day`` schedule that matched no day in this many months stops."""

NoteKind = Literal["skipped", "moved", "business_day"]


@dataclass(frozen=True)
class FireNote:
    """What a calendar did to one fire: ``skipped`` (its day is off), ``moved`` (from the days
    off in ``days``) or ``business_day`` (the ``n``-th working day of its month)."""

    kind: NoteKind
    days: tuple[DayInfo, ...] = ()
    n: int = 0
    calendar: str = ""

    def text(self) -> str:
        """The note in English, as a run's reason records it."""
        if self.kind == "business_day":
            return f"{ordinal(self.n)} working day of the month (calendar {self.calendar})"
        named = ", ".join(describe_day(d) for d in self.days)
        if self.kind == "skipped":
            return f"day off: {named} (calendar {self.calendar}; days = business, shift = skip)"
        return f"moved from {named} (calendar {self.calendar})"


def describe_day(day: DayInfo) -> str:
    """``2025-07-14 Fête nationale``; ``2025-03-01 (weekend)`` for an unnamed rest day."""
    return f"{day.day.isoformat()} {day.name}" if day.name else f"{day.day.isoformat()} (weekend)"


def ordinal(n: int) -> str:
    """``3rd``, ``last``, ``2nd to last``."""
    if n == -1:
        return "last"
    if n < 0:
        return f"{ordinal(-n)} to last"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _wall(day: date, fire: datetime, zone: ZoneInfo) -> datetime:
    """``fire``'s wall time on ``day`` in ``zone`` (a time in a spring gap moves past it)."""
    local = datetime.combine(day, fire.time(), tzinfo=zone)
    return local.astimezone(UTC).astimezone(zone)


@dataclass(frozen=True)
class CalendarRule:
    """``calendar`` with ``days``, ``shift`` and ``business_day`` (see the module doc)."""

    calendar: Calendar
    days: Days = "all"
    shift: Shift = "skip"
    business_day: int | None = None

    def fires(self, cron: CronExpr, after: datetime, zone: ZoneInfo) -> Iterator[datetime]:
        """The fires strictly after ``after`` (aware), skipped ones included, as aware
        datetimes in ``zone``, in time order."""
        if self.business_day is not None:
            yield from self._nth(cron, after, zone)
        elif self.days == "all":
            yield from cron.fires(after, zone)
        elif self.shift == "skip":
            for fire in cron.fires(after, zone):
                day = self.calendar.day(fire.date())
                if day.working or day.name:
                    yield fire
        else:
            yield from self._shifted(cron, after, zone)

    def _shifted(self, cron: CronExpr, after: datetime, zone: ZoneInfo) -> Iterator[datetime]:
        direction = 1 if self.shift == "next" else -1
        after_utc = after.astimezone(UTC)
        heap: list[tuple[datetime, int, datetime]] = []
        order = 0
        last: datetime | None = None
        for fire in cron.fires(after_utc - _SPAN, zone):
            fire_utc = fire.astimezone(UTC)
            if self.calendar.working(fire.date()):
                target: datetime | None = fire
            else:
                moved = self.calendar.shifted(fire.date(), direction, SHIFT_LIMIT)
                target = _wall(moved, fire, zone) if moved is not None else None
            if target is not None:
                order += 1
                heapq.heappush(heap, (target.astimezone(UTC), order, target))
            # A later raw fire lands no earlier than itself (next) or _SPAN before it (previous).
            final = fire_utc if direction == 1 else fire_utc - _SPAN
            while heap and heap[0][0] <= final:
                when, _, item = heapq.heappop(heap)
                if when > after_utc and when != last:
                    last = when
                    yield item
        for when, _, item in sorted(heap):
            if when > after_utc and when != last:
                last = when
                yield item

    def _nth(self, cron: CronExpr, after: datetime, zone: ZoneInfo) -> Iterator[datetime]:
        assert self.business_day is not None
        month: tuple[int, int] | None = None
        chosen: date | None = None
        months_without = 0
        for fire in cron.fires(after, zone):
            if (fire.year, fire.month) != month:
                month = (fire.year, fire.month)
                chosen = self.calendar.nth_working_day(*month, self.business_day)
                months_without += 1
                if months_without > _EMPTY_MONTHS:
                    return
            if fire.date() == chosen:
                months_without = 0
                yield fire

    def note(self, cron: CronExpr, fire: datetime, zone: ZoneInfo,
             language: str | None = None) -> FireNote | None:
        """What the calendar did to ``fire`` (one of :meth:`fires`), names in ``language``
        (None: the calendar's own)."""
        name = self.calendar.name
        local = fire.astimezone(zone)
        if self.business_day is not None:
            return FireNote("business_day", n=self.business_day, calendar=name)
        if self.days == "all":
            return None
        today = self.calendar.day(local.date(), language)
        if not today.working:
            return FireNote("skipped", (today,), calendar=name)
        if self.shift == "skip":
            return None
        step = -1 if self.shift == "next" else 1
        moved: list[DayInfo] = []
        for k in range(1, SHIFT_LIMIT + 1):
            day = self.calendar.day(local.date() + timedelta(days=step * k), language)
            if day.working:
                break
            if cron.matches(datetime.combine(day.day, local.time())):
                moved.append(day)
        if not moved:
            return None
        return FireNote("moved", tuple(sorted(moved, key=lambda d: d.day)), calendar=name)
