"""The outbox and the delivery log in the store (docs/notifications.md; tables
``notification_outbox`` and ``notification_log``, migration 0009), and the queries of the
notification rules (:mod:`cadenza.notify.rules`).

* :meth:`Outbox.add` writes message intents in the caller's transaction (the run end's, the
  MISSED recording's): ``INSERT ... ON CONFLICT (event_key) DO NOTHING``, so an intent
  written twice (a replayed boundary, two nodes noticing one long run) is one row.
* :meth:`Outbox.claim` takes due PENDING rows for one sender for ``lease_for`` seconds:
  ``FOR UPDATE SKIP LOCKED`` on PostgreSQL (two nodes never take one row), SQLite's single
  writer (``BEGIN IMMEDIATE``) elsewhere. A sender that dies holding rows leaves them to
  any sender once the claim expires.
* :meth:`Outbox.record` writes one delivery's outcome in ``notification_log`` (unique
  ``event_key`` = event, run, recipient) and a NOTIFICATION_SENT event, in one transaction;
  :meth:`Outbox.delivered` answers whether a delivery already happened (the dedup).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState
from cadenza.store.codec import utc_from_raw
from cadenza.store.tables import IS_RUNNING, event_log, notification_log, notification_outbox, runs

if TYPE_CHECKING:
    from cadenza.store import Store

PENDING, DONE = "PENDING", "DONE"
SENT, FAILED = "SENT", "FAILED"


@dataclass(frozen=True)
class Target:
    """Who a message goes to, and through which channel (None: the default channel);
    ``source`` says which rule or alert asked for it."""

    source: str
    channel: str | None
    to: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        """The JSON form kept in the outbox row."""
        return {"source": self.source, "channel": self.channel, "to": list(self.to)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Target:
        """The inverse of :meth:`as_json`."""
        return cls(str(data["source"]), data.get("channel"), tuple(data.get("to", ())))


@dataclass(frozen=True)
class Intent:
    """One message intent: ``event`` (failed, missed, long_run ...) about ``run_id`` /
    ``job_id``; ``key`` is unique (``event:run``); ``context`` holds what the message needs
    beyond the run (a stalled schedule's time, a test's channel)."""

    key: str
    event: str
    run_id: str | None
    job_id: str | None
    targets: tuple[Target, ...]
    context: dict[str, Any]


@dataclass(frozen=True)
class Claimed:
    """An intent a sender holds, with its attempts so far."""

    id: int
    intent: Intent
    attempts: int


@dataclass(frozen=True)
class LogEntry:
    """One row of ``notification_log``."""

    id: int
    event_key: str
    run_id: str | None
    channel: str
    recipient: str
    state: str
    error: str | None
    attempts: int
    created_at: datetime
    updated_at: datetime


_DUE = ("SELECT 1 FROM notification_outbox WHERE state = ? AND not_before <= ? AND "
        "(claimed_until IS NULL OR claimed_until < ?) LIMIT 1")
"""Whether :meth:`Outbox.claim` would find anything (its pre-read)."""

class Outbox:
    """The outbox and delivery log of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def add(self, conn: sa.Connection, intents: Sequence[Intent], now: datetime) -> int:
        """Write ``intents`` (PENDING, due ``now``) in ``conn``'s transaction; those whose
        key exists already change nothing. Returns how many went in."""
        if not intents:
            return 0
        rows = [{"event_key": i.key[:512], "event": i.event, "run_id": i.run_id,
                 "job_id": i.job_id,
                 "targets_json": json.dumps([t.as_json() for t in i.targets]),
                 "context_json": json.dumps(i.context, default=str), "state": PENDING,
                 "attempts": 0, "not_before": now, "created_at": now, "updated_at": now}
                for i in intents]
        statement = self.store._insert_ignore(notification_outbox, ["event_key"])
        # executemany: the drivers (sqlite3, psycopg 3) sum the row counts of the batch.
        return max(0, conn.execute(statement, rows).rowcount)

    def claim(self, owner: str, limit: int, lease_for: timedelta) -> list[Claimed]:
        """Take up to ``limit`` due PENDING intents not held by a live claim (oldest
        first) for ``lease_for``. Sets claimed_by, claimed_until, updated_at."""
        t = notification_outbox
        now = self.store.clock.now()
        # A read first: the sender looks every few seconds, and an empty outbox (the usual
        # case) must not cost a transaction, nor even building the claim's statement, each
        # time (one indexed read on the DBAPI connection).
        at = self.store._raw_time(now)
        with self.store._quick_read() as read:
            if not read(_DUE, (PENDING, at, at)):
                return []
        query = (sa.select(t.c.id).where(
            t.c.state == PENDING, t.c.not_before <= now,
            sa.or_(t.c.claimed_until.is_(None), t.c.claimed_until < now))
            .order_by(t.c.id).limit(limit))
        if self.store.dialect == "postgresql":
            query = query.with_for_update(skip_locked=True)
        with self.store.write() as c:
            ids = [row[0] for row in c.execute(query)]
            if not ids:
                return []
            c.execute(t.update().where(t.c.id.in_(ids)).values(
                claimed_by=owner, claimed_until=now + lease_for, updated_at=now))
            rows = c.execute(sa.select(t).where(t.c.id.in_(ids)).order_by(t.c.id)).all()
        return [Claimed(r.id, Intent(r.event_key, r.event, r.run_id, r.job_id,
                                     tuple(Target.from_json(x)
                                           for x in json.loads(r.targets_json)),
                                     json.loads(r.context_json or "{}")), r.attempts)
                for r in rows]

    def any_pending(self) -> bool:
        """Whether any intent is PENDING (due or not, claimed or not): one indexed read
        outside any transaction."""
        return bool(self.store._quick_rows(
            "SELECT 1 FROM notification_outbox WHERE state = ? LIMIT 1", (PENDING,)))

    def release_dead_claims(self, host: str, alive: Callable[[int], bool]) -> int:
        """Release the claims of senders of ``host`` (owners ``host:pid:...``) whose process
        is gone (``alive(pid)`` false): a ``kill -9`` during a delivery leaves its intents to
        the next start at once, not after the claim's end. Returns how many."""
        t = notification_outbox
        now = self.store.clock.now()
        with self.store.read() as c:
            held = c.execute(sa.select(t.c.id, t.c.claimed_by).where(
                t.c.state == PENDING, t.c.claimed_by.like(f"{host}:%"),
                t.c.claimed_until >= now)).all()
        dead: list[int] = []
        for row_id, owner in held:
            pid = owner[len(host) + 1:].split(":", 1)[0]
            if pid.isdigit() and not alive(int(pid)):
                dead.append(row_id)
        if not dead:
            return 0
        with self.store.write() as c:
            c.execute(t.update().where(t.c.id.in_(dead)).values(
                claimed_by=None, claimed_until=None, updated_at=now))
        return len(dead)

    def settle(self, claimed: Claimed, owner: str, *, done: bool, error: str | None,
               retry_at: datetime | None, settled: Sequence[str] = ()) -> None:
        """After one attempt of ``claimed``: DONE, or PENDING again at ``retry_at`` with
        attempts + 1 and the error; ``settled`` (the deliveries that failed for good) is kept
        in the context so a retry skips them. Releases the claim (only if still
        ``owner``'s)."""
        t = notification_outbox
        now = self.store.clock.now()
        values: dict[str, Any] = {"attempts": claimed.attempts + 1, "updated_at": now,
                                  "claimed_by": None, "claimed_until": None,
                                  "last_error": self.store.redactor.redact_text(error)
                                  if error else None}
        if settled:
            values["context_json"] = json.dumps(
                {**claimed.intent.context, "settled": list(settled)}, default=str)
        if done:
            values["state"] = DONE
        elif retry_at is not None:
            values["not_before"] = retry_at
        with self.store.write() as c:
            c.execute(t.update().where(t.c.id == claimed.id, t.c.claimed_by == owner)
                      .values(**values))

    def delivered(self, event_key: str) -> LogEntry | None:
        """The log row of one delivery (event, run, recipient), if any."""
        with self.store.read() as c:
            row = c.execute(sa.select(notification_log)
                            .where(notification_log.c.event_key == event_key)).first()
        return None if row is None else _entry(row)

    def record(self, event_key: str, *, run_id: str | None, channel: str, recipient: str,
               state: str, error: str | None, attempts: int, event: str,
               job_id: str | None, final: bool) -> None:
        """Write one delivery's outcome (insert or update by ``event_key``), redacted; a
        SENT, or a FAILED that is ``final``, also appends a NOTIFICATION_SENT event."""
        t = notification_log
        now = self.store.clock.now()
        redact = self.store.redactor.redact_text
        shown_error = redact(error)[:4000] if error else None
        with self.store.write() as c:
            found = c.execute(sa.select(t.c.id).where(t.c.event_key == event_key)).first()
            values = {"state": state, "error": shown_error, "attempts": attempts,
                      "updated_at": now, "channel": channel[:64],
                      "recipient": redact(recipient)[:320]}
            if found is None:
                c.execute(t.insert().values(event_key=event_key[:512], run_id=run_id,
                                            created_at=now, **values))
            else:
                c.execute(t.update().where(t.c.id == found[0]).values(**values))
            if state == SENT or final:
                ok = state == SENT
                message = (f"notification {event} for {job_id or '-'} "
                           f"{'sent to' if ok else 'could not be sent to'} {recipient} "
                           f"through {channel}" + ("" if ok else f": {shown_error}"))
                self.store.append_event(
                    EventType.NOTIFICATION_SENT, message, run_id=run_id,
                    level=Level.INFO if ok else Level.ERROR, conn=c,
                    payload={"event": event, "job": job_id, "channel": channel,
                             "recipient": recipient, "state": state, "attempts": attempts,
                             "error": shown_error})

    def log(self, *, run_id: str | None = None, state: str | None = None,
            limit: int = 100) -> list[LogEntry]:
        """Deliveries, newest first, optionally of one run and one state."""
        t = notification_log
        query = sa.select(t).order_by(t.c.id.desc()).limit(limit)
        if run_id:
            query = query.where(t.c.run_id == run_id)
        if state:
            query = query.where(t.c.state == state.upper())
        with self.store.read() as c:
            return [_entry(r) for r in c.execute(query)]

    def failing_channels(self, since: datetime) -> list[tuple[str, int, str | None, datetime]]:
        """(channel, deliveries FAILED since ``since``, the last error, when) of each channel
        with a failed delivery since then, the most recent first."""
        t = notification_log
        rows = []
        with self.store.read() as c:
            counts = c.execute(sa.select(t.c.channel, sa.func.count(), sa.func.max(t.c.id))
                               .where(t.c.state == FAILED, t.c.updated_at >= since)
                               .group_by(t.c.channel)).all()
            for channel, count, last_id in counts:
                last = c.execute(sa.select(t.c.error, t.c.updated_at)
                                 .where(t.c.id == last_id)).one()
                rows.append((channel, int(count), last[0], last[1]))
        return sorted(rows, key=lambda r: r[3], reverse=True)

    def pending(self) -> int:
        """How many intents wait to be delivered."""
        t = notification_outbox
        with self.store.read() as c:
            return int(c.execute(sa.select(sa.func.count()).select_from(t)
                                 .where(t.c.state == PENDING)).scalar_one())


def _entry(row: Any) -> LogEntry:
    return LogEntry(row.id, row.event_key, row.run_id, row.channel, row.recipient, row.state,
                    row.error, row.attempts, row.created_at, row.updated_at)


# -- what the rules ask (cadenza.notify.rules) ---------------------------------------------


def previous_end_failed(conn: sa.Connection, job_id: str, run_id: str) -> bool:
    """Whether the last run of ``job_id`` before ``run_id`` that SUCCEEDED or FAILED failed
    (a ``recovered`` rule's condition)."""
    row = conn.execute(
        sa.select(runs.c.state).where(
            runs.c.job_id == job_id, runs.c.id != run_id,
            runs.c.finished_at.is_not(None),
            runs.c.state.in_([RunState.SUCCEEDED.value, RunState.FAILED.value]))
        .order_by(runs.c.finished_at.desc(), runs.c.id.desc()).limit(1)).first()
    return row is not None and row[0] == RunState.FAILED.value


def running_of(conn: sa.Connection, job_ids: Sequence[str]) -> list[tuple[str, str, Any]]:
    """The RUNNING runs of ``job_ids``: (run id, job id, started_at) each."""
    rows = conn.execute(sa.select(runs.c.id, runs.c.job_id, runs.c.started_at).where(
        IS_RUNNING, runs.c.job_id.in_(list(job_ids)))).all()
    return [(row[0], row[1], row[2]) for row in rows]


def unfinished_fires(store: Store, job_ids: Sequence[str]
                     ) -> list[tuple[str, str, str | None, str, datetime]]:
    """The scheduled runs of ``job_ids`` that are QUEUED or RUNNING: (run id, job id,
    schedule, state, scheduled_for) each (a deadline's candidates). One SELECT outside any
    transaction: the sender asks every round, and an idle round writes nothing."""
    marks = ", ".join("?" for _ in job_ids)
    rows = store._quick_rows(
        "SELECT id, job_id, schedule, state, scheduled_for FROM runs WHERE state IN (?, ?) "
        f"AND scheduled_for IS NOT NULL AND job_id IN ({marks})",
        (RunState.QUEUED.value, RunState.RUNNING.value, *job_ids))
    out = []
    for row in rows:
        when = utc_from_raw(row[4])
        if when is not None:
            out.append((row[0], row[1], row[2], row[3], when))
    return out


def late_recorded(conn: sa.Connection, run_ids: Sequence[str]) -> set[tuple[str, str]]:
    """(run id, ``start_by`` / ``finish_by``) of the RUN_LATE events of ``run_ids``."""
    rows = conn.execute(sa.select(event_log.c.run_id, event_log.c.payload_json).where(
        event_log.c.run_id.in_(list(run_ids)),
        event_log.c.event_type == "RUN_LATE")).all()
    out: set[tuple[str, str]] = set()
    for run_id, payload in rows:
        data = json.loads(payload) if isinstance(payload, str) else payload
        out.add((run_id, str((data or {}).get("deadline"))))
    return out


def fire_recorded(conn: sa.Connection, job_id: str, schedule: str, at: datetime) -> bool:
    """Whether the fire of ``job_id``'s ``schedule`` at ``at`` has a run row."""
    return conn.execute(sa.select(runs.c.id).where(
        runs.c.job_id == job_id, runs.c.schedule == schedule,
        runs.c.scheduled_for == at).limit(1)).first() is not None


def last_fire_recorded(conn: sa.Connection, job_id: str, schedule: str) -> datetime | None:
    """The latest ``scheduled_for`` of ``job_id``'s ``schedule`` in the store, if any."""
    last: datetime | None = conn.execute(sa.select(sa.func.max(runs.c.scheduled_for)).where(
        runs.c.job_id == job_id, runs.c.schedule == schedule)).scalar()
    return last
