"""Scheduled fires recorded in bulk: the scheduler's write path (docs/scheduling.md).

:meth:`FiresRepository.create_fires` records many fires in the caller's transaction with a
fixed number of statements, and writes exactly what
:meth:`~cadenza.store.runs.RunsRepository.create_run` writes for each of them:

* the runs, as multi-row ``INSERT ... ON CONFLICT (job_id, schedule, scheduled_for) DO NOTHING
  RETURNING id``: the database's UNIQUE fire stays the only guard against a fire recorded
  twice (two schedulers racing insert one row; the loser's rows are simply not returned);
* one RUN_CREATED (QUEUED) or RUN_MISSED (MISSED) event per row *actually inserted*, as
  multi-row INSERTs, redacted like ``create_run``'s (message through ``redact_text``, payload
  through ``redact_value``, the run's ``reason`` through ``redact_text``).

Why not ``create_run`` in a loop: building and compiling one Core INSERT per fire, plus its
event, cost about a millisecond of Python per fire, and on SQLite nothing else can write while
the scheduler's transaction is open. The statements here are plain SQL on the DBAPI cursor of
the transaction's connection (commits, the SQLite write lock and the error mapping of
:meth:`~cadenza.store.core.StoreCore.write` still apply); values are encoded by the columns'
own types, so a fire written here and one written by ``create_run`` are the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.errors import InvalidTransition
from cadenza.domain.states import RUN_TRANSITIONS, TERMINAL_RUN_STATES, RunState
from cadenza.store.codec import dumps, new_run_id, require_aware
from cadenza.store.core import Redactor, StoreCore
from cadenza.store.run_states import CREATION_PAYLOAD_KEYS, creation_event
from cadenza.store.tables import runs

TRIGGER = "scheduled"
"""The trigger of every run created by :meth:`FiresRepository.create_fires`."""
_RUN_COLUMNS = ("id", "job_id", "state", "trigger", "schedule", "scheduled_for", "created_at",
                "finished_at", "not_before", "priority", "params_json", "overrides_json",
                "reason", "updated_at")
_EVENT_COLUMNS = ("run_id", "event_type", "level", "message", "payload_json", "created_at",
                  "actor")
_PARAMS_PER_STATEMENT = 3000
"""Bind parameters per multi-row INSERT: far below every driver's limit (SQLite 32766)."""
_EMPTY_OBJECT = dumps({})


@dataclass(frozen=True, slots=True)
class NewFire:
    """One fire to record as a run of trigger ``scheduled``.

    ``state`` is QUEUED or MISSED; ``schedule`` names the job's own schedule (``"job"``) or a
    preset's (``"preset:NAME"``); ``overrides`` is what the run's ``overrides`` column gets.
    """

    job_id: str
    schedule: str
    scheduled_for: datetime
    state: RunState = RunState.QUEUED
    overrides: Mapping[str, Any] = field(default_factory=dict)
    reason: str | None = None
    priority: int = 0
    not_before: datetime | None = None
    quiet: bool = False
    """A MISSED fire that was expected (a day off of its business calendar, scheduling paused
    by a person), so the missed hooks (the ``missed`` alert) are not called for it; its event
    and reason still say why."""


_PG_TYPES = {"scheduled_for": "timestamptz", "created_at": "timestamptz",
             "finished_at": "timestamptz", "not_before": "timestamptz",
             "updated_at": "timestamptz", "priority": "int"}
_JSON_ROWS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class _Statements:
    """The SQL of :meth:`FiresRepository.create_fires` for one database, built once.

    SQLite: multi-row ``INSERT ... VALUES (...), (...)`` of up to
    :data:`_PARAMS_PER_STATEMENT` parameters. PostgreSQL: one ``INSERT ... SELECT ... FROM
    jsonb_array_elements(:rows)`` per table whatever the count, the rows sent as one JSON
    array of arrays (timestamps as ISO 8601 text with their offset, read back with
    ``::timestamptz``): psycopg parses placeholders and escapes array elements in Python,
    which for thousands of values costs more than the insert itself.
    """

    def __init__(self, dialect: sa.Dialect) -> None:
        self.postgres = dialect.name == "postgresql"
        processor = runs.c.scheduled_for.type.dialect_impl(dialect).bind_processor(dialect)
        encode: Callable[[Any], Any] = processor or (lambda value: value)
        # A timestamp as the column type binds it (SQLite: naive UTC text of fixed width);
        # on PostgreSQL that aware UTC datetime as ISO text for the JSON rows.
        self.ts: Callable[[datetime], Any] = (
            (lambda value: encode(value).isoformat()) if self.postgres else encode
        )
        self._sql: dict[tuple[str, int], str] = {}

    def insert(self, cursor: Any, table: str, rows: list[tuple[Any, ...]]) -> list[Any]:
        """Insert ``rows`` into ``table`` (runs: ignoring existing fires and returning the
        ids of the rows that went in; event_log: returning nothing)."""
        if not rows:
            return []
        columns = _RUN_COLUMNS if table == "runs" else _EVENT_COLUMNS
        if self.postgres:
            chunks = [rows]
        else:
            per = max(1, _PARAMS_PER_STATEMENT // len(columns))
            chunks = [rows[k : k + per] for k in range(0, len(rows), per)]
        found: list[Any] = []
        for chunk in chunks:
            if self.postgres:
                params: list[Any] = [_JSON_ROWS.encode(chunk)]
            else:
                params = [value for row in chunk for value in row]
            cursor.execute(self._get(table, columns, len(chunk)), params)
            if table == "runs":
                found.extend(row[0] for row in cursor.fetchall())
        return found

    def _get(self, table: str, columns: tuple[str, ...], count: int) -> str:
        key = (table, 0 if self.postgres else count)
        sql = self._sql.get(key)
        if sql is None:
            if self.postgres:
                fields = ", ".join(f"(x->>{k})::{_PG_TYPES.get(c, 'text')}"
                                   for k, c in enumerate(columns))
                rows = f"SELECT {fields} FROM jsonb_array_elements(%s::jsonb) AS x"
            else:
                row = "(" + ", ".join(["?"] * len(columns)) + ")"
                rows = "VALUES " + ", ".join([row] * count)
            sql = f"INSERT INTO {table} ({', '.join(columns)}) {rows}"
            if table == "runs":
                sql += (" ON CONFLICT (job_id, schedule, scheduled_for) DO NOTHING"
                        " RETURNING id")
            self._sql[key] = sql
        return sql


_PAYLOAD_ORDER = tuple(sorted(CREATION_PAYLOAD_KEYS))
_PAYLOAD_KEY_JSON = {key: dumps(key) + ":" for key in CREATION_PAYLOAD_KEYS}
_MEMO_SCALARS = (str, int)
"""Values whose redacted text depends on their class and value only (with None)."""


class _Redactions:
    """The store's redactor over one batch of creation events, each distinct value once.

    ``payload_json(payload)`` is ``dumps(redactor.redact_value(payload))``, built item by
    item: ``redact_value`` redacts a mapping item by item, and :func:`dumps` writes a mapping
    as its items' texts in key order, so the text of each redacted item is computed once per
    distinct value (states, schedule names, the fire's instant shared by every job of a
    minute, empty mappings) and joined. That holds only when the redactor keeps the
    payload's keys and masks none of them, which a probe checks once per batch; otherwise
    every payload goes through ``redact_value`` whole.
    """

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        probe = dict.fromkeys(CREATION_PAYLOAD_KEYS, "")
        self.by_item = redactor.redact_value(probe) == probe
        self._items: dict[tuple[Any, ...], str] = {}
        self._texts: dict[str, str] = {}

    def text(self, text: str | None) -> str | None:
        """``redact_text(text)``, once per distinct text."""
        if text is None:
            return None
        done = self._texts.get(text)
        if done is None:
            done = self._texts[text] = self.redactor.redact_text(text)
        return done

    def payload_json(self, payload: dict[str, Any]) -> str:
        """``dumps(redact_value(payload))`` for a payload of :func:`creation_event`."""
        if not self.by_item:
            return dumps(self.redactor.redact_value(payload))
        parts: list[str] = []
        known = self._items
        for key in _PAYLOAD_ORDER:
            item = payload[key]
            kind = item.__class__
            memo: tuple[Any, ...] | None
            if kind is datetime:  # equal instants print alike at one offset
                memo = (key, kind, item, item.utcoffset())
            elif item is None or isinstance(item, _MEMO_SCALARS):
                memo = (key, kind, item)
            elif kind is dict and not item:
                memo = (key, kind)
            else:
                memo = None
            part = None if memo is None else known.get(memo)
            if part is None:
                part = _PAYLOAD_KEY_JSON[key] + dumps(self.redactor.redact_value(item))
                if memo is not None:
                    known[memo] = part
            parts.append(part)
        return "{" + ",".join(parts) + "}"


class FiresRepository(StoreCore):
    """:meth:`create_fires` (see the module docstring)."""

    _fire_statements: _Statements | None = None
    def create_fires(
        self,
        fires: Sequence[NewFire],
        *,
        actor: str = "system",
        conn: sa.Connection | None = None,
    ) -> list[str | None]:
        """Record each fire not recorded yet as a new run; the others change nothing.

        Returns one entry per fire, in order: the new run's id, or ``None`` when that fire
        (job_id, schedule, scheduled_for) already existed, in the store or earlier in
        ``fires``. Each new run gets the columns :meth:`create_run` sets: id, job_id, state,
        trigger ``scheduled``, schedule, scheduled_for, created_at = updated_at = now (one
        ``now`` for the batch), finished_at = now for MISSED, not_before, priority,
        params_json ``{}``, overrides_json, reason (redacted). Writes one RUN_CREATED
        (QUEUED) or RUN_MISSED (MISSED) event per run inserted, the same as
        :meth:`create_run` writes, redacted, in the order of ``fires``; nothing for the
        others. With ``conn``, joins the caller's transaction (the scheduler's, which
        advances the cursors in it too); otherwise commits once.

        Raises :class:`InvalidTransition` for a state other than QUEUED or MISSED and
        :class:`ValueError` for a naive time, before writing anything. Rows are inserted in
        (job_id, schedule, scheduled_for) order, so on PostgreSQL concurrent callers with
        overlapping batches wait for one another in the same order instead of deadlocking.
        """
        if not fires:
            return []
        sql = self._fire_sql()
        now = self._now()
        stamp = sql.ts(now)
        finished = {state: stamp if state in TERMINAL_RUN_STATES else None
                    for state in RUN_TRANSITIONS[None]}
        redact = _Redactions(self.redactor)
        times: dict[datetime, Any] = {}

        def ts(value: datetime | None) -> Any:
            if value is None:
                return None
            done = times.get(value)
            if done is None:
                done = times[value] = sql.ts(value)
            return done

        rows: list[tuple[Any, ...]] = []
        checked: list[tuple[RunState, datetime, datetime | None]] = []
        for fire in fires:
            state = RunState(fire.state)
            if state not in RUN_TRANSITIONS[None]:
                raise InvalidTransition("run", None, state)
            when = require_aware(fire.scheduled_for, "scheduled_for")
            not_before = (None if fire.not_before is None
                          else require_aware(fire.not_before, "not_before"))
            checked.append((state, when, not_before))
        ids = new_run_id.many(now, len(fires))
        for run_id, fire, (state, when, not_before) in zip(ids, fires, checked, strict=True):
            rows.append((run_id, fire.job_id, state.value, TRIGGER, fire.schedule, ts(when),
                         stamp, finished[state], ts(not_before), fire.priority, _EMPTY_OBJECT,
                         dumps(dict(fire.overrides)) if fire.overrides else _EMPTY_OBJECT,
                         redact.text(fire.reason), stamp))
        order = sorted(range(len(rows)), key=lambda k: (fires[k].job_id, fires[k].schedule,
                                                        checked[k][1]))
        with self._joined(conn) as c:
            cursor = c.connection.cursor()
            try:
                inserted = set(sql.insert(cursor, "runs", [rows[k] for k in order]))
                events: list[tuple[Any, ...]] = []
                for k, fire in enumerate(fires):
                    if ids[k] not in inserted:
                        continue
                    state, when, not_before = checked[k]
                    event_type, message, level, payload = creation_event(
                        fire.job_id, state, TRIGGER, fire.schedule, when, {},
                        dict(fire.overrides), fire.priority, not_before, fire.reason,
                    )
                    events.append((ids[k], str(event_type), str(level),
                                   self.redactor.redact_text(message),
                                   redact.payload_json(payload), stamp, actor))
                sql.insert(cursor, "event_log", events)
                missed = [(ids[k], fire.job_id) for k, fire in enumerate(fires)
                          if ids[k] in inserted and checked[k][0] is RunState.MISSED
                          and not fire.quiet]
                for hook in self.hooks.missed if missed else ():
                    hook(c, missed, now)
            finally:
                cursor.close()
        return [run_id if run_id in inserted else None for run_id in ids]

    def fires_ahead(
        self,
        keys: Iterable[tuple[str, str]],
        after: datetime,
        *,
        conn: sa.Connection | None = None,
    ) -> list[tuple[str, str, str, datetime]]:
        """Fires recorded ahead of their time and not due at ``after``: the QUEUED, never
        started runs of trigger ``scheduled`` of the schedules ``keys`` (job_id, schedule)
        with ``scheduled_for > after``, as (run_id, job_id, schedule, scheduled_for) in time
        order. The scheduler withdraws them when a reload removes, disables or changes their
        schedule (see ``docs/scheduling.md``). Changes nothing."""
        wanted = set(keys)
        if not wanted:
            return []
        after = require_aware(after, "after")
        jobs = sorted({job for job, _ in wanted})
        found: list[tuple[str, str, str, datetime]] = []
        with self._reading(conn) as c:
            for k in range(0, len(jobs), 500):
                rows = c.execute(
                    sa.select(runs.c.id, runs.c.job_id, runs.c.schedule, runs.c.scheduled_for)
                    .where(runs.c.job_id.in_(jobs[k : k + 500]),
                           runs.c.state == RunState.QUEUED.value,
                           runs.c.trigger == TRIGGER,
                           runs.c.started_at.is_(None),
                           runs.c.scheduled_for > after)
                )
                found.extend((row.id, row.job_id, row.schedule, row.scheduled_for)
                             for row in rows if (row.job_id, row.schedule) in wanted)
        return sorted(found, key=lambda f: (f[3], f[1], f[2]))

    def stale_fires_ahead(
        self,
        due_before: datetime,
        *,
        conn: sa.Connection | None = None,
    ) -> list[tuple[str, str, str, datetime]]:
        """Fires recorded ahead of their time that never started although their time passed
        before ``due_before``: QUEUED, never claimed runs of trigger ``scheduled`` created
        before their ``scheduled_for``. A server stopped in the look-ahead window leaves
        them; the scheduler settles them at its start by the job's ``on_missed``. Returns
        (run_id, job_id, schedule, scheduled_for) in time order; changes nothing."""
        due_before = require_aware(due_before, "due_before")
        with self._reading(conn) as c:
            rows = c.execute(
                sa.select(runs.c.id, runs.c.job_id, runs.c.schedule, runs.c.scheduled_for)
                .where(runs.c.state == RunState.QUEUED.value,
                       runs.c.trigger == TRIGGER,
                       runs.c.started_at.is_(None),
                       runs.c.created_at < runs.c.scheduled_for,
                       runs.c.scheduled_for < due_before)
                .order_by(runs.c.scheduled_for, runs.c.job_id, runs.c.schedule)
            )
            return [(r.id, r.job_id, r.schedule, r.scheduled_for) for r in rows]

    def _fire_sql(self) -> _Statements:
        if self._fire_statements is None:
            self._fire_statements = _Statements(self.engine.dialect)
        return self._fire_statements
