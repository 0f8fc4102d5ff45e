"""Durations written as text: ``"30s"``, ``"90m"``, ``"2h"``, ``"1d"``, ``"1h30m"``.

Units are ``d`` (days), ``h`` (hours), ``m`` (minutes) and ``s`` (seconds), largest first,
each at most once; ``"0s"`` is zero. Bare numbers are refused so that ``timeout = 30`` can
never be read as 30 of the wrong unit.
"""

from __future__ import annotations

import re
from datetime import timedelta

EXPECTED = 'expected a duration like "30s", "90m", "2h", "1d" or "1h30m"'
MAX_DURATION = timedelta(days=3650)

_DURATION = re.compile(
    r"(?:(?P<d>\d{1,6})d)?(?:(?P<h>\d{1,7})h)?(?:(?P<m>\d{1,9})m)?(?:(?P<s>\d{1,10})s)?"
)


def parse_duration(text: str) -> timedelta:
    """Parse ``text`` into a :class:`~datetime.timedelta`.

    Raises :class:`ValueError` with a message saying the expected form when ``text`` is
    not a duration or is longer than ten years.
    """
    if not isinstance(text, str):
        raise ValueError(f"{EXPECTED}, got {type(text).__name__}")
    value = text.strip().lower()
    match = _DURATION.fullmatch(value)
    if not value or match is None or not any(match.groupdict().values()):
        raise ValueError(f"{EXPECTED}, got {text!r}")
    parts = {unit: int(amount) for unit, amount in match.groupdict().items() if amount}
    result = timedelta(
        days=parts.get("d", 0),
        hours=parts.get("h", 0),
        minutes=parts.get("m", 0),
        seconds=parts.get("s", 0),
    )
    if result > MAX_DURATION:
        raise ValueError(f"{EXPECTED}, at most 3650d, got {text!r}")
    return result


def format_duration(value: timedelta) -> str:
    """The shortest text :func:`parse_duration` reads back as ``value`` (whole seconds)."""
    seconds = int(value.total_seconds())
    if seconds <= 0:
        return "0s"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, seconds = divmod(seconds, size)
        if amount:
            out += f"{amount}{unit}"
    return out
