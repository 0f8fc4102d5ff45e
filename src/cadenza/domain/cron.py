"""The cron dialect of docs/scheduling.md.

Five fields: minute hour day-of-month month day-of-week, with ``* , - /`` and names.
**Day of week counts 0 = Monday … 6 = Sunday** (names ``mon``…``sun`` are recommended);
7 is an error. When both day fields are restricted, either matching fires (the OR rule).
Aliases: ``@hourly @daily @weekly @monthly @yearly`` (``@annually``, ``@midnight`` too).

Parsing is ours, so that errors name the field and the dialect is exactly the documented one; the
firing engine underneath is cronsim. The DST rule (docs/scheduling.md): a time in the spring gap
fires once at the first instant after the gap; a time repeated in autumn fires once, at its first
occurrence; ``*``/step hours fire in both. cronsim counts 0 = Sunday, so the day-of-week set is
translated at this boundary and handed over as an explicit list.

cronsim is driven in wall-clock mode (every field is handed over as an explicit list), which gives
the gap rule and "once, at the first occurrence" in the autumn fold. The documented rule wants
``*``/step hours to fire in both repeated hours, so :meth:`CronExpr.fires` adds the second
occurrence of each repeated wall time for those schedules (``repeat_in_fold``).

:meth:`CronExpr.dst_mark` classifies a fire for previews: ``"gap"`` when it stands for wall
times that did not exist (it is the first instant after a spring gap and the schedule
matched a time inside the gap), ``"fold"`` when its wall time occurs twice that night.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim  # type: ignore[import-untyped,unused-ignore]

MAX_LENGTH = 256
FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * mon",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_FOLD_SPAN = timedelta(hours=3)
"""Longer than any real clock set-back: fires are regenerated from this far back so that the
second occurrence of a repeated wall time is found even when ``after`` lies past the first."""

DstMark = Literal["gap", "fold"]
ONE_MINUTE = timedelta(minutes=1)


class CronError(ValueError):
    """A cron expression is invalid; ``field`` names the field at fault (or None)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


@dataclass(frozen=True)
class CronExpr:
    """A parsed expression: the set of values of each field, in Cadenza's numbering."""

    source: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Monday … 6 = Sunday
    days_restricted: bool
    weekdays_restricted: bool
    repeat_in_fold: bool = False
    """The hour field is ``*`` or a step: fire in both occurrences of a repeated hour."""

    @functools.cached_property
    def engine_expr(self) -> str:
        """The equivalent expression in cronsim's dialect (0 = Sunday)."""

        def lst(values: frozenset[int]) -> str:
            # Runs as ranges ("0-59", not sixty numbers): cronsim parses it far faster. Never
            # "*": a field starting with "*" switches cronsim's DST handling (see fires()).
            ordered = sorted(values)
            runs: list[str] = []
            start = prev = ordered[0]
            for value in [*ordered[1:], None]:
                if value is not None and value == prev + 1:
                    prev = value
                    continue
                runs.append(str(start) if start == prev else f"{start}-{prev}")
                if value is not None:
                    start = prev = value
            return ",".join(runs)

        dom = lst(self.days) if self.days_restricted else "*"
        dow = (
            lst(frozenset((d + 1) % 7 for d in self.weekdays)) if self.weekdays_restricted else "*"
        )
        return f"{lst(self.minutes)} {lst(self.hours)} {dom} {lst(self.months)} {dow}"

    def fires(self, after: datetime, tz: ZoneInfo) -> Iterator[datetime]:
        """Fire times strictly after ``after`` (aware), as aware datetimes in ``tz``, in order.

        A repeated wall time's second occurrence carries ``fold=1``. Compare fires through
        ``astimezone(UTC)``: Python compares two datetimes of the same zone by wall time,
        ignoring ``fold``.
        """
        if after.tzinfo is None:
            raise ValueError("fires() needs an aware datetime")
        after_utc = after.astimezone(UTC)
        start = after_utc
        if self.repeat_in_fold and _near_transition(after_utc, tz):
            start = after_utc - _FOLD_SPAN
        pending: list[datetime] = []  # second occurrences, waiting for their turn
        for fire in CronSim(self.engine_expr, start.astimezone(tz)):
            fire_utc = fire.astimezone(UTC)
            while pending and pending[0].astimezone(UTC) < fire_utc:
                second = pending.pop(0)
                if second.astimezone(UTC) > after_utc:
                    yield second
            if fire_utc > after_utc:
                yield fire
            if self.repeat_in_fold and is_ambiguous(fire):
                pending.append(fire.replace(fold=1))
        for second in pending:
            if second.astimezone(UTC) > after_utc:
                yield second

    def matches(self, wall: datetime) -> bool:
        """Whether the wall time ``wall`` (naive or aware; its fields are read) is chosen."""
        if wall.minute not in self.minutes or wall.hour not in self.hours:
            return False
        if wall.month not in self.months:
            return False
        dom = wall.day in self.days
        dow = wall.weekday() in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return dom or dow
        return dom and dow

    def dst_mark(self, fire: datetime, tz: ZoneInfo) -> DstMark | None:
        """``"fold"``, ``"gap"`` or ``None`` for a fire of this schedule (see module doc)."""
        local = fire.astimezone(tz)
        if is_ambiguous(local):
            return "fold"
        instant = local.astimezone(UTC)
        before = (instant - timedelta(seconds=1)).astimezone(tz)
        after_offset, before_offset = local.utcoffset(), before.utcoffset()
        if after_offset is None or before_offset is None or after_offset <= before_offset:
            return None
        wall = local.replace(tzinfo=None, fold=0)
        missing = wall - (after_offset - before_offset)
        while missing < wall:
            if self.matches(missing):
                return "gap"
            missing += ONE_MINUTE
        return None


def _near_transition(instant: datetime, tz: ZoneInfo) -> bool:
    """Whether the UTC offset of ``tz`` changes within :data:`_FOLD_SPAN` of ``instant``."""
    offsets = {(instant + k * _FOLD_SPAN).astimezone(tz).utcoffset() for k in (-1, 0, 1)}
    return len(offsets) > 1


def is_ambiguous(local: datetime) -> bool:
    """Whether the wall time of ``local`` (aware, in its zone) occurs twice (autumn fold)."""
    zone = local.tzinfo
    if zone is None:
        return False
    first, second = local.replace(fold=0), local.replace(fold=1)
    if first.utcoffset() == second.utcoffset():
        return False
    return _exists(first, zone) and _exists(second, zone)


def is_imaginary(local: datetime) -> bool:
    """Whether the wall time of ``local`` (aware) does not exist (inside a spring gap)."""
    zone = local.tzinfo
    return zone is not None and not _exists(local, zone)


def _exists(local: datetime, zone: tzinfo) -> bool:
    back = local.astimezone(UTC).astimezone(zone)
    return back.replace(tzinfo=None, fold=0) == local.replace(tzinfo=None, fold=0)


def _is_number(token: str) -> bool:
    """Whether ``token`` is written with ASCII digits only (``str.isdigit`` also accepts
    "²" and "١", which are not cron)."""
    return token.isascii() and token.isdigit()


def _number(token: str, index: int) -> int:
    name = FIELD_NAMES[index]
    low, high = _RANGES[index]
    lowered = token.lower()
    if index == 3 and lowered in _MONTHS:
        return _MONTHS.index(lowered) + 1
    if index == 4 and lowered in _DAYS:
        return _DAYS.index(lowered)
    if not _is_number(token):
        hint = ""
        if index == 4:
            hint = " (0-6 with 0 = Monday, or mon..sun)"
        elif index == 3:
            hint = " (1-12 or jan..dec)"
        raise CronError(f"{token!r} is not a number{hint}", name)
    value = int(token)
    if not low <= value <= high:
        if index == 4 and value == 7:
            raise CronError("7 is not a day: days count 0 = Monday to 6 = Sunday", name)
        raise CronError(f"{value} is out of range {low}-{high}", name)
    return value


def _unsupported(part: str, index: int) -> str | None:
    """Why ``part`` uses a form of other cron dialects that this one refuses (``#``, ``L``,
    ``W``, ``?``), or None. Refused rather than guessed: each means something else from one
    cron to another, and a schedule read differently fires on the wrong days."""
    upper = part.upper()
    if "#" in part:
        return f"{part!r}: the n-th weekday form (#, like fri#5) is not supported"
    if index == 2 and "L" in upper:
        return (f"{part!r}: the last-day form (L) is not supported; for the last working day "
                f"of the month use business_day = -1 with a calendar")
    if index == 4 and "L" in upper:
        return f"{part!r}: the last-weekday form (L, like friL) is not supported"
    if index == 2 and "W" in upper:
        return f"{part!r}: the nearest-weekday form (W) is not supported"
    if "?" in part:
        return f"{part!r}: '?' is not part of this dialect; write '*' for any day"
    return None


def _parse_field(text: str, index: int) -> tuple[frozenset[int], bool]:
    """Return the field's values and whether it restricts anything."""
    name = FIELD_NAMES[index]
    low, high = _RANGES[index]
    values: set[int] = set()
    if text == "":
        raise CronError("empty field", name)
    for part in text.split(","):
        if part == "":
            raise CronError(f"empty item in {text!r}", name)
        unsupported = _unsupported(part, index)
        if unsupported is not None:
            raise CronError(unsupported, name)
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not _is_number(step_text) or int(step_text) == 0:
                raise CronError(f"step in {part!r} must be a positive number", name)
            step = int(step_text)
            if step > high - low:
                # A step this large picks its start value only: almost surely a mistake
                # (like "*/60" read as "hourly").
                raise CronError(f"step {step} in {part!r} is larger than the field's range "
                                f"{low}-{high}: it could never repeat", name)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            start, end = _number(a, index), _number(b, index)
            if start > end:
                raise CronError(f"range {base!r} goes backwards", name)
        else:
            start = _number(base, index)
            end = high if slash else start
        values.update(range(start, end + 1, step))
    full = frozenset(range(low, high + 1))
    return frozenset(values), frozenset(values) != full


def parse_cron(expr: str) -> CronExpr:
    """Parse ``expr``; raise :class:`CronError` naming the field at fault."""
    source = expr.strip()
    if not source:
        raise CronError("empty schedule; expected 5 fields or an alias like @daily")
    if len(source) > MAX_LENGTH:
        raise CronError(f"schedule longer than {MAX_LENGTH} characters")
    text = ALIASES.get(source.lower(), source)
    if text.startswith("@"):
        raise CronError(f"unknown alias {source!r}; expected one of {', '.join(ALIASES)}")
    parts = text.split()
    if len(parts) != 5:
        raise CronError(
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}"
        )
    parsed = [_parse_field(p, i) for i, p in enumerate(parts)]
    # docs/scheduling.md: "*"/step hours fire in both repeated hours; fixed hours fire once.
    repeat = parts[1].startswith("*") or "/" in parts[1]
    (minutes, _), (hours, _), (days, dom_r), (months, _), (weekdays, dow_r) = parsed
    if dom_r and not dow_r:
        # A day-of-month-only schedule that no chosen month can hold never fires.
        if all(min(days) > _DAYS_IN_MONTH[m - 1] for m in months):
            raise CronError(
                "no chosen month has any of these days: the schedule never fires", "day-of-month"
            )
    return CronExpr(source, minutes, hours, days, months, weekdays, dom_r, dow_r, repeat)


def next_fires(expr: str | CronExpr, tz: ZoneInfo, after: datetime, n: int) -> list[datetime]:
    """The next ``n`` fires strictly after ``after``, in ``tz``."""
    cron = parse_cron(expr) if isinstance(expr, str) else expr
    out: list[datetime] = []
    for fire in cron.fires(after, tz):
        out.append(fire)
        if len(out) >= n:
            break
    return out
