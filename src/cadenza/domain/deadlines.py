"""Deadlines of a scheduled run (docs/calendars.md "Deadlines"): ``start_by`` and ``finish_by``.

A deadline is a time of day (``07:00``: the first 07:00 in the job's zone at or after the
scheduled time, so a 23:00 fire with ``finish_by = "07:00"`` is due the next morning) or a
duration after the scheduled time (``2h``). Pure: ``now`` is an argument.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

Deadline = time | timedelta


def deadline_at(deadline: Deadline, scheduled_for: datetime, zone: ZoneInfo) -> datetime:
    """The instant (UTC) of ``deadline`` for a fire at ``scheduled_for`` (aware)."""
    if isinstance(deadline, timedelta):
        return scheduled_for.astimezone(UTC) + deadline
    local = scheduled_for.astimezone(zone)
    day = local.date() if local.time() <= deadline else local.date() + timedelta(days=1)
    return datetime.combine(day, deadline, tzinfo=zone).astimezone(UTC)
