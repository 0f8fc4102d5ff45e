"""What the store returns: frozen snapshots of rows (never live objects).

Timestamps are aware UTC ``datetime``; JSON columns are decoded; states are the domain enums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.states import ResourceState, RunState, StepState
from cadenza.store.codec import loads, loads_mapping, utc_from_raw
from cadenza.store.tables import runs, step_runs


def _m(row: sa.Row[Any]) -> sa.RowMapping:
    return row._mapping


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run (table ``runs``)."""

    id: str
    job_id: str
    state: RunState
    trigger: str
    schedule: str | None
    scheduled_for: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    not_before: datetime | None
    priority: int
    params: dict[str, Any]
    overrides: dict[str, Any]
    rows: int | None
    error: str | None
    reason: str | None
    wait_reason: str | None
    lease_owner: str | None
    lease_until: datetime | None
    lease_epoch: int
    attempt: int
    resumes: int
    updated_at: datetime

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> RunRecord:
        m = _m(row)
        return cls(
            id=m["id"],
            job_id=m["job_id"],
            state=RunState(m["state"]),
            trigger=m["trigger"],
            schedule=m["schedule"],
            scheduled_for=m["scheduled_for"],
            created_at=m["created_at"],
            started_at=m["started_at"],
            finished_at=m["finished_at"],
            not_before=m["not_before"],
            priority=m["priority"],
            params=loads_mapping(m["params_json"]),
            overrides=loads_mapping(m["overrides_json"]),
            rows=m["rows"],
            error=m["error"],
            reason=m["reason"],
            wait_reason=m["wait_reason"],
            lease_owner=m["lease_owner"],
            lease_until=m["lease_until"],
            lease_epoch=m["lease_epoch"],
            attempt=m["attempt"],
            resumes=m["resumes"],
            updated_at=m["updated_at"],
        )

    @staticmethod
    def from_raw(row: Any) -> RunRecord:
        """A run from a raw row of every column of ``runs`` in table order, timestamps as
        the driver gives them (:meth:`StoreCore._quick_read`: the history's pages)."""
        run: RunRecord = _make_raw_run(row)
        return run


_RUN_FIELDS = tuple(column.name for column in runs.c)
RUN_FIELDS = _RUN_FIELDS
"""The columns of ``runs`` in table order (what ``RETURNING *`` gives)."""
RUN_COLUMNS_SQL = ", ".join(f'"{name}"' for name in _RUN_FIELDS)
"""Every column of ``runs`` in table order, quoted: the select list of
:meth:`RunRecord.from_raw`."""
_RUN_STATES = {state.value: state for state in RunState}


def _raw_run_maker() -> Any:
    """The function making a RunRecord from a raw row (:meth:`RunRecord.from_raw`): positions,
    one conversion per field (built once, so that a new column cannot be forgotten)."""
    index = {name: i for i, name in enumerate(_RUN_FIELDS)}
    missing = {f for f in RunRecord.__dataclass_fields__} - {
        "params", "overrides"} - set(index)
    if missing:  # pragma: no cover - a schema change that records.py did not follow
        raise RuntimeError(f"runs has no column for {sorted(missing)}")

    (i_id, i_job, i_state, i_trigger, i_schedule, i_scheduled, i_created, i_started,
     i_finished, i_not_before, i_priority, i_params, i_overrides, i_rows, i_error, i_reason,
     i_wait, i_owner, i_until, i_epoch, i_attempt, i_resumes, i_updated) = (
        index[name] for name in (
            "id", "job_id", "state", "trigger", "schedule", "scheduled_for", "created_at",
            "started_at", "finished_at", "not_before", "priority", "params_json",
            "overrides_json", "rows", "error", "reason", "wait_reason", "lease_owner",
            "lease_until", "lease_epoch", "attempt", "resumes", "updated_at"))
    states = _RUN_STATES

    def make(row: Any) -> RunRecord:
        t: Any = utc_from_raw  # created_at and updated_at are never NULL
        return RunRecord(
            row[i_id], row[i_job], states[row[i_state]], row[i_trigger], row[i_schedule],
            t(row[i_scheduled]), t(row[i_created]), t(row[i_started]), t(row[i_finished]),
            t(row[i_not_before]), row[i_priority], loads_mapping(row[i_params]),
            loads_mapping(row[i_overrides]), row[i_rows], row[i_error], row[i_reason],
            row[i_wait], row[i_owner], t(row[i_until]), row[i_epoch], row[i_attempt],
            row[i_resumes], t(row[i_updated]))
    return make


@dataclass(frozen=True, slots=True)
class StepRunRecord:
    """One attempt of one step (table ``step_runs``)."""

    id: int
    run_id: str
    step: str
    step_type: str
    attempt: int
    state: StepState
    reason: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    rows: int | None
    output: Any
    error: str | None
    error_class: str | None
    updated_at: datetime

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> StepRunRecord:
        m = _m(row)
        return cls(
            id=m["id"],
            run_id=m["run_id"],
            step=m["step"],
            step_type=m["step_type"],
            attempt=m["attempt"],
            state=StepState(m["state"]),
            reason=m["reason"],
            created_at=m["created_at"],
            started_at=m["started_at"],
            finished_at=m["finished_at"],
            rows=m["rows"],
            output=loads(m["output_json"]),
            error=m["error"],
            error_class=m["error_class"],
            updated_at=m["updated_at"],
        )

    @staticmethod
    def from_raw(row: Any) -> StepRunRecord:
        """An attempt from a raw row of every column of ``step_runs`` in table order
        (:meth:`StoreCore._quick_read`: a run's page)."""
        m = dict(zip(_STEP_FIELDS, row, strict=True))
        t = utc_from_raw
        return StepRunRecord(
            m["id"], m["run_id"], m["step"], m["step_type"], m["attempt"],
            StepState(m["state"]), m["reason"], t(m["created_at"]),  # type: ignore[arg-type]
            t(m["started_at"]), t(m["finished_at"]), m["rows"], loads(m["output_json"]),
            m["error"], m["error_class"], t(m["updated_at"]))  # type: ignore[arg-type]


_STEP_FIELDS = tuple(column.name for column in step_runs.c)
STEP_COLUMNS_SQL = ", ".join(f'"{name}"' for name in _STEP_FIELDS)
"""Every column of ``step_runs`` in table order, quoted: the select list of
:meth:`StepRunRecord.from_raw`."""


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """A run's checkpoint (table ``checkpoints``): the step to run next, the outputs of the
    steps done (redacted, each with its ``rows``) and the next step's own saved state."""

    run_id: str
    next_step: str | None
    outputs: dict[str, Any]
    step_state: Any
    updated_at: datetime

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> CheckpointRecord:
        m = _m(row)
        return cls(
            run_id=m["run_id"],
            next_step=m["next_step"],
            outputs=loads_mapping(m["outputs_json"]),
            step_state=loads(m["step_state_json"]),
            updated_at=m["updated_at"],
        )


@dataclass(frozen=True, slots=True)
class ResourceHealthRecord:
    """The last health check of a resource (table ``resource_health``, docs/health-checks.md)."""

    last_checked_at: datetime | None
    latency_ms: float | None
    consecutive_successes: int
    consecutive_failures: int
    recent_timeouts: int
    last_error_type: str | None
    cooldown_until: datetime | None
    score: float | None
    egress_ip: str | None
    egress_region: str | None
    updated_at: datetime


HEALTH_FIELDS = tuple(
    name for name in ResourceHealthRecord.__dataclass_fields__ if name != "updated_at"
)


@dataclass(frozen=True, slots=True)
class ResourceRecord:
    """One pool member (table ``resources``), with its health when it was ever checked."""

    resource_id: str
    pool: str
    kind: str
    state: ResourceState
    lease_owner: str | None
    lease_until: datetime | None
    lease_epoch: int
    route_id: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    health: ResourceHealthRecord | None = None
    lease_step: str | None = None
    """The step whose start leased it (its end releases it); None: held for the run."""

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> ResourceRecord:
        m = _m(row)
        health = None
        if m.get("health_updated_at") is not None:
            health = ResourceHealthRecord(
                **{name: m[name] for name in HEALTH_FIELDS}, updated_at=m["health_updated_at"]
            )
        return cls(
            resource_id=m["resource_id"],
            pool=m["pool"],
            kind=m["kind"],
            state=ResourceState(m["state"]),
            lease_owner=m["lease_owner"],
            lease_until=m["lease_until"],
            lease_epoch=m["lease_epoch"],
            route_id=m["route_id"],
            last_error=m["last_error"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            health=health,
            lease_step=m.get("lease_step"),
        )


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One run log line (table ``run_logs``), already redacted."""

    id: int
    run_id: str
    ts: datetime
    level: str
    step: str | None
    message: str

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> LogRecord:
        m = _m(row)
        return cls(m["id"], m["run_id"], m["ts"], m["level"], m["step"], m["message"])


@dataclass(frozen=True, slots=True)
class LogCursor:
    """Where a reader of a run's log is: the last log line and the last audit event it got
    (the run log merges the two, :meth:`~cadenza.store.events.EventsRepository.run_log`). Its
    text, ``"12.40"``, is the ``id`` of a line of the run page's stream and of the API."""

    line: int = 0
    event: int = 0

    def __str__(self) -> str:
        return f"{self.line}.{self.event}"

    @classmethod
    def parse(cls, text: str | None) -> LogCursor:
        """The cursor of ``"L.E"``; a bare number is a line id (a page opened before
        events were merged in); anything else is the start."""
        line, dot, event = (text or "").strip().partition(".")
        digits = line.isdigit() and len(line) <= 18 and (
            not dot or (event.isdigit() and len(event) <= 18))
        if not digits:
            return cls()
        return cls(int(line), int(event) if dot else 0)


@dataclass(frozen=True, slots=True)
class RunLogEntry:
    """One line of a run's log as a reader sees it: a line the run wrote, or one of its
    audit events (``event``: its type) shown as a line."""

    cursor: LogCursor
    ts: datetime
    level: str
    step: str | None
    message: str
    event: str | None = None

    @property
    def id(self) -> str:
        """The cursor's text: where a reader goes on from after this line."""
        return str(self.cursor)


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One audit event (table ``event_log``), already redacted."""

    event_id: int
    run_id: str | None
    resource_id: str | None
    event_type: str
    level: str
    message: str
    payload: Any
    created_at: datetime
    actor: str

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> EventRecord:
        m = _m(row)
        return cls(
            event_id=m["event_id"],
            run_id=m["run_id"],
            resource_id=m["resource_id"],
            event_type=m["event_type"],
            level=m["level"],
            message=m["message"],
            payload=loads(m["payload_json"]),
            created_at=m["created_at"],
            actor=m["actor"],
        )

    @classmethod
    def from_raw(cls, row: Any) -> EventRecord:
        """An event from a raw row (event_id, run_id, resource_id, event_type, level,
        message, payload_json, created_at, actor), the created_at as the driver gives it."""
        return cls(row[0], row[1], row[2], row[3], row[4], row[5], loads(row[6]),
                   utc_from_raw(row[7]), row[8])  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class UserRecord:
    """One user (table ``users``). ``password_hash`` is left out of ``repr``."""

    username: str
    display_name: str | None
    email: str | None
    roles: tuple[str, ...]
    disabled: bool
    created_at: datetime
    updated_at: datetime
    password_hash: str = field(repr=False, default="")
    language: str | None = None
    """The pages' and e-mails' language (``fr``, ``zh_Hans``); None: the browser's or the
    server's."""
    timezone: str | None = None
    """The IANA zone e-mails show times in; None: the server's or the job's."""

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> UserRecord:
        m = _m(row)
        return cls(
            username=m["username"],
            display_name=m["display_name"],
            email=m["email"],
            roles=tuple(loads(m["roles_json"]) or ()),
            disabled=bool(m["disabled"]),
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            password_hash=m["password_hash"],
            language=m.get("language"),
            timezone=m.get("timezone"),
        )


_make_raw_run = _raw_run_maker()
