"""The audit log (``event_log``, append-only) and run logs (``run_logs``), docs/store.md.

Both are redacted before they are written: message text through the redactor's
``redact_text``, event payloads through ``redact_value``. The database refuses UPDATE on
``event_log`` (a trigger); retention may delete old rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import TERMINAL_RUN_STATES
from cadenza.store.codec import require_aware
from cadenza.store.core import StoreCore
from cadenza.store.records import EventRecord, LogCursor, LogRecord, RunLogEntry
from cadenza.store.tables import EVENT_ACTOR_INDEXED, RESOURCE_EVENTS, run_logs, runs

_EVENT_COLUMNS_SQL = ", ".join(f'"{column}"' for column in (
    "event_id", "run_id", "resource_id", "event_type", "level", "message", "payload_json",
    "created_at", "actor"))
"""The columns :meth:`EventRecord.from_raw` reads, in its order."""


class EventsRepository(StoreCore):
    """Audit events and run log lines."""

    def append_event(
        self,
        event_type: EventType | str,
        message: str,
        *,
        run_id: str | None = None,
        resource_id: str | None = None,
        level: Level | str = Level.INFO,
        payload: Any = None,
        actor: str = "system",
        conn: sa.Connection | None = None,
    ) -> int:
        """Append one event; returns its ``event_id`` (increasing, never reused).

        ``message`` goes through ``redact_text`` and ``payload`` (any JSON-able value) through
        ``redact_value`` before the INSERT. With ``conn``, the event commits with the caller's
        transaction. Changes nothing else.
        """
        level = Level(level)
        with self._joined(conn) as c:
            return self._insert_event(
                c,
                event_type,
                message,
                run_id=run_id,
                resource_id=resource_id,
                level=level,
                payload=payload,
                actor=actor,
            )

    def list_events(
        self,
        *,
        run_id: str | None = None,
        resource_id: str | None = None,
        event_type: EventType | str | None = None,
        since: datetime | None = None,
        limit: int = 1000,
        after_id: int | None = None,
        newest_first: bool = False,
        before_id: int | None = None,
        actor: str | None = None,
        resources_only: bool = False,
    ) -> list[EventRecord]:
        """Events matching every given filter, oldest first (``newest_first`` reverses).

        ``since`` keeps events created at or after that time; ``after_id`` is a keyset cursor
        (events with a larger ``event_id``), e.g. for following the log; ``before_id`` the
        cursor of newest-first pages (events with a smaller ``event_id``); ``actor`` keeps the
        events of one actor (``user:ana``); ``resources_only`` the events that name a
        resource (with ``event_type`` and ``since``: a pool's history by type and time, read
        along its own index).
        """
        # Hand-written SQL on the DBAPI cursor (StoreCore._quick_read): the read behind
        # every events page and a run's audit trail.
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("run_id", run_id), ("resource_id", resource_id),
                              ("event_type", None if event_type is None else str(event_type)),
                              ("actor", actor)):
            if value is not None:
                where.append(f'"{column}" = ?')
                params.append(value)
        if actor is not None and actor != "system":
            where.append(EVENT_ACTOR_INDEXED)  # the partial index's condition: it is used
        if resources_only:
            where.append(RESOURCE_EVENTS)  # the same, for ix_event_log_resource_type_created
        if since is not None:
            at = self._raw_time(require_aware(since, "since"))
            where.append('"created_at" >= ?')
            params.append(at)
            if run_id is None and resource_id is None and not resources_only:
                # No index leads with the time but ``created_at``'s own: start the walk along
                # event_id (by type, by actor, or the whole log) at the window's first event.
                # Its smallest id, not the id of its earliest time: ids follow the commits,
                # times the writers' clocks, and the two orders may differ (a clock set back).
                # ``+ 0``: the smallest id of the window's range of the created_at index;
                # ``min("event_id")`` alone walks the ids from the first event ever until
                # one is in the window.
                where.append('"event_id" >= (SELECT min("event_id" + 0) FROM event_log'
                             ' WHERE "created_at" >= ?)')
                params.append(at)
        if after_id is not None:
            where.append('"event_id" > ?')
            params.append(after_id)
        if before_id is not None:
            where.append('"event_id" < ?')
            params.append(before_id)
        sql = (f"SELECT {_EVENT_COLUMNS_SQL} FROM event_log"
               + (" WHERE " + " AND ".join(where) if where else "")
               + f' ORDER BY "event_id"{" DESC" if newest_first else ""} LIMIT ?')
        with self._quick_read() as read:
            rows = read(sql, (*params, limit))
        return [EventRecord.from_raw(row) for row in rows]

    def list_logs(
        self,
        run_id: str,
        *,
        after_id: int | None = None,
        limit: int | None = None,
        min_level: Level | str | None = None,
    ) -> list[LogRecord]:
        """The run's log lines in order; ``after_id`` continues after a line (``--follow``)."""
        query = sa.select(run_logs).where(run_logs.c.run_id == run_id)
        if after_id is not None:
            query = query.where(run_logs.c.id > after_id)
        if min_level is not None:
            order = list(Level)
            allowed = order[order.index(Level(min_level)) :]
            query = query.where(run_logs.c.level.in_([lv.value for lv in allowed]))
        query = query.order_by(run_logs.c.id)
        if limit is not None:
            query = query.limit(limit)
        with self.read() as c:
            rows = c.execute(query).all()
        return [LogRecord.from_row(row) for row in rows]

    def run_log(
        self,
        run_id: str,
        *,
        after: LogCursor | None = None,
        limit: int | None = None,
        min_level: Level | str | None = None,
    ) -> list[RunLogEntry]:
        """The run's log as a reader sees it: the lines it wrote and its audit events
        (started, succeeded, retried, leased, finished…) merged by time, after ``after``.

        The run writes no line that restates an event: its events are its log's milestones.
        Each table is read in its own order and the two are merged by time, so each entry's
        cursor covers everything before it: a reader going on from any entry's cursor
        misses nothing and gets nothing twice. With ``limit``, the merge stops where either
        table's page ends."""
        after = after or LogCursor()
        levels = None
        if min_level is not None:
            order = list(Level)
            levels = {lv.value for lv in order[order.index(Level(min_level)):]}
        page = limit if limit is not None else 100_000
        lines = self.list_logs(run_id, after_id=after.line, limit=page, min_level=min_level)
        events = self.list_events(run_id=run_id, after_id=after.event, limit=page)
        lines_cut, events_cut = len(lines) >= page, len(events) >= page
        merged: list[RunLogEntry] = []
        line_at, event_at = after.line, after.event
        i = j = 0
        while len(merged) < page:
            line = lines[i] if i < len(lines) else None
            event = events[j] if j < len(events) else None
            if line is None and (lines_cut or event is None):
                break
            if event is None and events_cut:
                break
            if line is not None and (event is None or line.ts <= event.created_at):
                i += 1
                line_at = line.id
                merged.append(RunLogEntry(LogCursor(line_at, event_at), line.ts, line.level,
                                          line.step, line.message))
                continue
            assert event is not None
            j += 1
            event_at = event.event_id
            if levels is not None and event.level not in levels:
                continue
            payload = event.payload if isinstance(event.payload, dict) else {}
            step = payload.get("step")
            merged.append(RunLogEntry(LogCursor(line_at, event_at), event.created_at,
                                      event.level, step if isinstance(step, str) else None,
                                      event.message, event.event_type))
        return merged

    def run_is_finished(self, run_id: str) -> bool:
        """Whether the run is in a terminal state (a log follower stops then)."""
        with self.read() as c:
            state = c.execute(sa.select(runs.c.state).where(runs.c.id == run_id)).scalar()
        return state is not None and state in {s.value for s in TERMINAL_RUN_STATES}
