"""Instants typed by people: ISO dates or times, in the server's zone when they have no
offset."""

from __future__ import annotations

from datetime import UTC, datetime

from cadenza.services.errors import InvalidRequest


def parse_instant(text: str, option: str, example: str) -> datetime:
    """``text`` as a UTC instant; InvalidRequest naming ``option`` and showing ``example``
    (what a valid value looks like) otherwise."""
    from cadenza.scheduler.schedules import server_zone

    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(f"{option}: expected {example}, got {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=server_zone())
    return parsed.astimezone(UTC)
