"""What the desktop app keeps in the store (docs/desktop.md): one-time login tickets and the
scheduling pause.

A **ticket** lets the desktop window in without a password. ``cadenza desktop`` (a process of
the OS user who owns the home: it can open the store) makes a random one and stores only its
SHA-256, with the Cadenza user it logs in as, the OS user who asked, and an end a minute
away; the node's ``/desktop/enter`` spends it once, from the loopback only
(:class:`cadenza.services.auth.AuthService.desktop_login`).

The **pause** is one row: while it exists the scheduler records every due fire MISSED with
who paused it (no missed alert: a person chose it), and starts nothing on a schedule; runs
started by hand or through the API still run. A SCHEDULING_CHANGED event says who paused
and who resumed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.events import EventType
from cadenza.store.codec import utc_from_raw
from cadenza.store.tables import desktop_tickets, scheduling_pause


def ticket_hash(ticket: str) -> str:
    """The stored form of a ticket."""
    return hashlib.sha256(ticket.encode()).hexdigest()


@dataclass(frozen=True)
class Pause:
    """Scheduling is paused since ``since``, by ``by``."""

    since: datetime
    by: str

    def as_json(self) -> dict[str, Any]:
        return {"paused": True, "since": self.since.isoformat(), "by": self.by}


class DesktopTickets:
    """The one-time login tickets of a store (``store``: a :class:`~cadenza.store.Store`)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def add(self, ticket: str, username: str, os_user: str, expires_at: datetime) -> None:
        """Keep ``ticket`` (its hash) for ``username``, asked by ``os_user``, until
        ``expires_at``; tickets already spent or ended are forgotten here."""
        now = self.store._now()
        with self.store.write() as c:
            c.execute(desktop_tickets.delete().where(sa.or_(
                desktop_tickets.c.used_at.is_not(None), desktop_tickets.c.expires_at <= now)))
            c.execute(desktop_tickets.insert().values(
                ticket_hash=ticket_hash(ticket), username=username, os_user=os_user,
                expires_at=expires_at))

    def spend(self, ticket: str) -> tuple[str, str] | None:
        """(Cadenza user, OS user) of a live ticket, spent by this call; None for a ticket
        unknown, used or ended."""
        now = self.store._now()
        digest = ticket_hash(ticket)
        with self.store.write() as c:
            spent = c.execute(desktop_tickets.update().where(
                desktop_tickets.c.ticket_hash == digest, desktop_tickets.c.used_at.is_(None),
                desktop_tickets.c.expires_at > now).values(used_at=now)).rowcount
            if spent != 1:
                return None
            row = c.execute(sa.select(desktop_tickets.c.username, desktop_tickets.c.os_user)
                            .where(desktop_tickets.c.ticket_hash == digest)).one()
            return str(row[0]), str(row[1])


class SchedulingPauses:
    """The scheduling pause of a store (see the module doc)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def current(self, conn: sa.Connection | None = None) -> Pause | None:
        """The pause in force, or None: on ``conn`` inside the caller's transaction, else
        one SELECT outside any transaction."""
        if conn is not None:
            row = conn.execute(sa.select(scheduling_pause.c.paused_at,
                                         scheduling_pause.c.paused_by)).first()
            return Pause(row[0], row[1]) if row is not None else None
        rows = self.store._quick_rows(
            "SELECT paused_at, paused_by FROM scheduling_pause WHERE id = 1", ())
        if not rows:
            return None
        since = rows[0][0]
        when = since if isinstance(since, datetime) else utc_from_raw(since)
        return Pause(when, rows[0][1]) if when is not None else None

    def pause(self, actor: str) -> Pause:
        """Pause scheduling (already paused: the pause in force, unchanged)."""
        now = self.store._now()
        with self.store.write() as c:
            found = self.current(c)
            if found is not None:
                return found
            c.execute(scheduling_pause.insert().values(id=1, paused_at=now, paused_by=actor))
            self.store._insert_event(c, EventType.SCHEDULING_CHANGED,
                                     f"scheduling paused by {actor}",
                                     payload={"paused": True}, actor=actor, now=now)
        return Pause(now, actor)

    def resume(self, actor: str) -> bool:
        """Resume scheduling; False when it was not paused."""
        now = self.store._now()
        with self.store.write() as c:
            if not c.execute(scheduling_pause.delete()).rowcount:
                return False
            self.store._insert_event(c, EventType.SCHEDULING_CHANGED,
                                     f"scheduling resumed by {actor}",
                                     payload={"paused": False}, actor=actor, now=now)
        return True
