"""Reading history: runs, their steps and logs, and the audit log.

These operations need ``cadenza.toml`` and the store only: an invalid ``jobs.toml`` does
not stop them (the shell says so, from :attr:`LoadedSettings.jobs_errors`).

Operations (all read-only)::

    list_runs(RunQuery) -> list[RunView]            newest first
    runs_page(RunPageQuery) -> RunPage              keyset pages (older / newer), newest first
    get_run(run_id) -> RunDetail                    NotFound for an unknown id
    logs(run_id, min_level=None) -> list[LogLine]   NotFound for an unknown id
    follow_logs(run_id, min_level=None) -> Iterator[LogLine]   until the run ended
    events(EventQuery) -> list[EventView]           oldest first
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState, StepState
from cadenza.services.errors import InvalidRequest, NotFound
from cadenza.store.codec import run_id_time
from cadenza.store.records import LogCursor as LogCursor  # the run log's cursor, for the pages

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.store.protocols import HistoryStore
    from cadenza.store.records import RunRecord, StepRunRecord

FOLLOW_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class StepView:
    """One attempt of one step of a run."""

    id: int
    name: str
    type: str
    state: StepState
    attempt: int
    rows: int | None
    error: str | None
    reason: str | None
    output: Any

    @classmethod
    def of(cls, step: StepRunRecord) -> StepView:
        return cls(step.id, step.step, step.step_type, step.state, step.attempt, step.rows,
                   step.error, step.reason, step.output)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "state": self.state.value,
                "attempt": self.attempt, "rows": self.rows, "error": self.error,
                "reason": self.reason, "output": self.output}


@dataclass(frozen=True)
class RunView:
    """One run as a person sees it in a list."""

    id: str
    job: str
    state: RunState
    trigger: str
    scheduled_for: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    not_before: datetime | None
    rows: int | None
    params: dict[str, Any]
    error: str | None
    reason: str | None
    wait_reason: str | None
    resumes: int

    @classmethod
    def of(cls, run: RunRecord) -> RunView:
        return cls(run.id, run.job_id, run.state, run.trigger, run.scheduled_for,
                   run.started_at, run.finished_at, run.not_before, run.rows, run.params,
                   run.error, run.reason, run.wait_reason, run.resumes)

    def as_json(self) -> dict[str, Any]:
        """The ``runs list --json`` entry."""
        return {"id": self.id, "job": self.job, "state": self.state.value,
                "trigger": self.trigger, "scheduled_for": self.scheduled_for,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "rows": self.rows, "error": self.error}

    @staticmethod
    def json_of(run: RunRecord) -> dict[str, Any]:
        """``RunView.of(run).as_json()`` with the run's ``created_at``, made without the
        view (a page of the history: 50 of them per request)."""
        return {"id": run.id, "job": run.job_id, "state": run.state.value,
                "trigger": run.trigger, "scheduled_for": run.scheduled_for,
                "started_at": run.started_at, "finished_at": run.finished_at,
                "rows": run.rows, "error": run.error, "created_at": run.created_at}


@dataclass(frozen=True)
class RunDetail:
    """One run with every step attempt, in order; the call_job run that started it
    (``parent``: its run, job and step) and the runs its call_job steps started
    (``children``, oldest first)."""

    run: RunView
    steps: tuple[StepView, ...]
    parent: ParentView | None = None
    children: tuple[ChildView, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The ``runs show --json`` document (and ``GET /api/runs/{id}``'s): with why the
        run ended (``error``, ``reason``) or why it still waits (``wait_reason``,
        ``not_before``)."""
        run = self.run
        return {"id": run.id, "job": run.job, "state": run.state.value,
                "trigger": run.trigger, "scheduled_for": run.scheduled_for,
                "started_at": run.started_at, "finished_at": run.finished_at,
                "rows": run.rows, "params": run.params, "error": run.error,
                "reason": run.reason, "wait_reason": run.wait_reason,
                "resumes": run.resumes, "not_before": run.not_before,
                "steps": [step.as_json() for step in self.steps],
                "parent": None if self.parent is None else self.parent.as_json(),
                "children": [child.as_json() for child in self.children]}


@dataclass(frozen=True)
class ParentView:
    """The run whose call_job step started a run."""

    run_id: str
    job: str | None
    step: str
    state: RunState | None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.run_id, "job": self.job, "step": self.step,
                "state": None if self.state is None else self.state.value}


@dataclass(frozen=True)
class ChildView:
    """A run started by one of a run's call_job steps."""

    id: str
    job: str
    step: str
    state: RunState
    rows: int | None
    created_at: datetime
    finished_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "job": self.job, "step": self.step, "state": self.state.value,
                "rows": self.rows, "created_at": self.created_at,
                "finished_at": self.finished_at}


@dataclass(frozen=True)
class RunQuery:
    """Which runs to list: by job, by states, how many."""

    job: str | None = None
    states: tuple[RunState, ...] | None = None
    limit: int = 20


@dataclass(frozen=True)
class RunPageQuery:
    """One page of the runs history: filters, and at most one keyset cursor (``before``: the
    page older than that run, ``after``: the page newer than it). ``since``/``until`` bound
    the creation time; ``states`` is any of them."""

    job: str | None = None
    states: tuple[RunState, ...] | None = None
    trigger: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before: str | None = None
    after: str | None = None
    limit: int = 50


@dataclass(frozen=True)
class RunPage:
    """A page of runs, newest first, with the cursors of its neighbours: ``older`` (pass it
    as ``before``) and ``newer`` (pass it as ``after``), None at either end."""

    runs: tuple[RunRecord, ...]
    older: str | None
    newer: str | None


def parse_states(text: str | None) -> tuple[RunState, ...] | None:
    """``"failed,queued"`` → the states; InvalidRequest naming the unknown ones."""
    if text is None:
        return None
    names = [v.strip().upper() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in RunState.__members__]
    if unknown:
        raise InvalidRequest(f"unknown state {', '.join(unknown)}; expected one of "
                             f"{', '.join(RunState.__members__)}")
    return tuple(RunState(n) for n in names)


def parse_level(text: str | None) -> str | None:
    """A log level name, upper-cased; InvalidRequest for an unknown one."""
    if text is None:
        return None
    if text.upper() not in Level.__members__:
        raise InvalidRequest(f"unknown level {text!r}; expected one of "
                             f"{', '.join(Level.__members__)}")
    return text.upper()


@dataclass(frozen=True)
class LogLine:
    """One line of a run's log: a line it wrote, or one of its audit events (``event``)."""

    id: str
    """Where a reader goes on from after this line (``"line.event"``, see LogCursor)."""
    time: datetime
    level: str
    step: str | None
    message: str

    event: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"time": self.time, "level": self.level, "step": self.step,
                "message": self.message, "event": self.event}


@dataclass(frozen=True)
class EventQuery:
    """Which audit events to list. ``since`` is an age (``90s``, ``1h``, ``2d``) or an ISO
    time; ``type`` an event type name in any case."""

    run: str | None = None
    resource: str | None = None
    type: str | None = None
    since: str | None = None
    limit: int = 200
    actor: str | None = None
    before: int | None = None
    """Keyset cursor of newest-first pages: events older than this event id."""
    after: int | None = None
    """Keyset cursor of oldest-first pages: events newer than this event id."""
    newest_first: bool = False


@dataclass(frozen=True)
class EventView:
    """One audit event."""

    id: int
    at: datetime
    type: str
    level: str
    run: str | None
    resource: str | None
    actor: str | None
    message: str
    payload: Any

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at, "type": self.type, "level": self.level,
                "run": self.run, "resource": self.resource, "actor": self.actor,
                "message": self.message, "payload": self.payload}


class HistoryService:
    """Read-only queries of the store (see the module docstring)."""

    def __init__(self, store: Callable[[], HistoryStore], clock: Clock) -> None:
        self._store = store
        self.clock = clock

    def list_runs(self, query: RunQuery) -> list[RunView]:
        """Runs, newest first."""
        runs = self._store().list_runs(job=query.job, state=query.states, limit=query.limit)
        return [RunView.of(run) for run in runs]

    def runs_page(self, query: RunPageQuery) -> RunPage:
        """One keyset page of the history: one query on the store's ``(created_at, id)``
        order (plus the cursor's own row), never an offset or a count. InvalidRequest for a
        cursor that is not a run id (a made-up one would not be an index range)."""
        for cursor in (query.before, query.after):
            if cursor is not None and run_id_time(cursor) is None:
                raise InvalidRequest(f"invalid cursor {cursor!r}: give the cursor of a page "
                                     "(a run id)")
        store = self._store()
        filters: dict[str, Any] = {"job": query.job, "state": query.states,
                                   "trigger": query.trigger}
        if query.after is not None:
            rows = store.list_runs(**filters, after=query.after, limit=query.limit + 1)
            more = len(rows) > query.limit
            rows = rows[1:] if more else rows
            if query.until is not None:
                kept = [r for r in rows if r.created_at < query.until]
                more = more and len(kept) == len(rows)
                rows = kept
            return RunPage(tuple(rows), rows[-1].id if rows else query.after,
                           rows[0].id if more and rows else None)
        before: str | datetime | None = query.before or query.until
        rows = store.list_runs(**filters, before=before, limit=query.limit + 1)
        more = len(rows) > query.limit
        rows = rows[:query.limit]
        if query.since is not None:
            kept = [r for r in rows if r.created_at >= query.since]
            more = more and len(kept) == len(rows)
            rows = kept
        newer = None
        if query.before is not None:
            newer = rows[0].id if rows else query.before
        return RunPage(tuple(rows), rows[-1].id if more and rows else None, newer)

    def get_run(self, run_id: str) -> RunDetail:
        """One run and its step attempts; NotFound for an unknown id."""
        # One read snapshot, on the DBAPI cursor (the page of a run and its API answer).
        found = self._store().children.family(run_id)
        if found is None:
            raise NotFound(f"no run {run_id!r}")
        run = found.run
        parent = None
        if found.parent is not None:
            parent = ParentView(found.parent[0], found.parent[2], found.parent[1],
                                found.parent[3])
        children = tuple(ChildView(c.id, c.job_id, c.parent_step, c.state, c.rows,
                                   c.created_at, c.finished_at) for c in found.children)
        steps = tuple(StepView.of(step) for step in found.steps)
        return RunDetail(RunView.of(run), steps, parent, children)

    def logs(self, run_id: str, min_level: str | None = None) -> list[LogLine]:
        """The run's log lines so far (at ``min_level`` or above)."""
        return [line for line in self._lines(run_id, parse_level(min_level), follow=False)
                if line is not None]

    def follow_logs(self, run_id: str, min_level: str | None = None,
                    poll: float = FOLLOW_POLL_SECONDS) -> Iterator[LogLine]:
        """The run's log lines, then each new one as it is written, until the run ended."""
        lines = self._lines(run_id, parse_level(min_level), follow=True, poll=poll)
        return (line for line in lines if line is not None)

    def follow_logs_idle(self, run_id: str, min_level: str | None = None,
                         poll: float = FOLLOW_POLL_SECONDS) -> Iterator[LogLine | None]:
        """As :meth:`follow_logs`, with a ``None`` after each poll that found nothing new:
        each ``next()`` returns within one poll, so a reader can stop between two (a
        client that closed its stream costs at most one poll, never the rest of the run).
        NotFound at once for an unknown run."""
        return self._lines(run_id, parse_level(min_level), follow=True, poll=poll)

    def _lines(self, run_id: str, min_level: str | None, *, follow: bool,
               poll: float = FOLLOW_POLL_SECONDS) -> Iterator[LogLine | None]:
        store = self._store()
        if store.get_run(run_id) is None:
            raise NotFound(f"no run {run_id!r}")
        return self._tail(store, run_id, min_level, follow, poll)

    def _tail(self, store: HistoryStore, run_id: str, min_level: str | None, follow: bool,
              poll: float) -> Iterator[LogLine | None]:
        after: LogCursor | None = None
        while True:
            # Read "finished" first: the lines of a run's end commit with it, so a read
            # after seeing it finished sees them all.
            finished = store.run_is_finished(run_id) if follow else True
            found = False
            for line in store.run_log(run_id, after=after, min_level=min_level):
                after = line.cursor
                found = True
                yield LogLine(line.id, line.ts, line.level, line.step, line.message,
                              line.event)
            if finished:
                return
            if not found:
                yield None
            self.clock.sleep(poll)

    def events(self, query: EventQuery) -> list[EventView]:
        """Audit events, oldest first (``newest_first``: newest first), filtered."""
        event_type = check_type(query.type) if query.type is not None else None
        since = parse_since(query.since, self.clock.now()) if query.since else None
        rows = self._store().list_events(run_id=query.run, resource_id=query.resource,
                                         event_type=event_type, since=since,
                                         limit=query.limit, actor=query.actor,
                                         before_id=query.before, after_id=query.after,
                                         newest_first=query.newest_first)
        return [EventView(e.event_id, e.created_at, e.event_type, e.level, e.run_id,
                          e.resource_id, e.actor, e.message, e.payload) for e in rows]


def check_type(text: str) -> str:
    """An event type name, upper-cased; InvalidRequest listing the known ones."""
    if text.upper() not in EventType.__members__:
        raise InvalidRequest(f"unknown event type {text!r}; known: "
                             f"{', '.join(EventType.__members__)}")
    return text.upper()


def parse_since(text: str, now: datetime) -> datetime:
    """An age before ``now`` (``90s``, ``30m``, ``1h``, ``2d``) or an ISO time (local when
    it has no offset); InvalidRequest otherwise."""
    from cadenza.config import parse_duration

    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"--since {text!r}: expected an age like 90s, 30m, 1h, 2d or "
                             "an ISO time") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return when
