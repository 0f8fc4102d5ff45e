"""What the runs pages show, computed from the store's records: the history's filters as
URL chips, a trigger in words, durations, and the actions a reader may take on a run.

Nothing here reads the store: :mod:`cadenza.web.ui.runs` does (one keyset query per
history page, a few reads per run page) and hands the records over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from cadenza.domain.states import TERMINAL_RUN_STATES, RunState

if TYPE_CHECKING:
    from cadenza.services.auth import Principal
    from cadenza.store.records import RunRecord

PAGE_SIZE = 50
"""Runs on one history page."""

STATE_ORDER = ("QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELED",
               "MISSED")
"""The states as the CLI lists them (the chips' order)."""

RANGES = (("1h", "1 h"), ("24h", "24 h"), ("7d", "7 d"), ("30d", "30 d"))
"""The time-range chips: (``since`` value, label)."""

LIVE_STATES = frozenset({RunState.QUEUED, RunState.RUNNING})
"""A run page in these states follows the run through server-sent events."""

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
"""The log level filter's choices (a line shows when at or above the choice)."""

OUTPUT_CHARS = 4000
"""A step output longer than this shows cut (the API and CLI give it whole)."""


@dataclass(frozen=True)
class Filters:
    """The history's filters, as kept in the URL (``?job=&state=A,B&trigger=&since=&until=``)."""

    job: str = ""
    states: tuple[str, ...] = ()
    trigger: str = ""
    since: str = ""
    until: str = ""

    @classmethod
    def of(cls, query: Mapping[str, str]) -> Filters:
        """The filters of a request's query string (unknown states are left to the
        service, which names them)."""
        states = tuple(s.strip().upper() for s in query.get("state", "").split(",")
                       if s.strip())
        return cls(query.get("job", "").strip(), states, query.get("trigger", "").strip(),
                   query.get("since", "").strip(), query.get("until", "").strip())

    @property
    def active(self) -> bool:
        return bool(self.job or self.states or self.trigger or self.since or self.until)

    def params(self, **cursor: str | None) -> dict[str, str]:
        """The query string's values (empty ones left out), with a cursor if given."""
        values = {"job": self.job, "state": ",".join(self.states), "trigger": self.trigger,
                  "since": self.since, "until": self.until}
        values.update({k: v for k, v in cursor.items() if v})
        return {k: v for k, v in values.items() if v}

    def url(self, **cursor: str | None) -> str:
        """``/runs`` with these filters (and a cursor)."""
        params = self.params(**cursor)
        return "/runs" + (f"?{urlencode(params)}" if params else "")

    def toggled(self, state: str) -> str:
        """The URL with ``state`` added to or removed from the state filter."""
        states = tuple(s for s in self.states if s != state) if state in self.states \
            else (*self.states, state)
        return replace(self, states=states).url()

    def with_value(self, *, job: str | None = None, trigger: str | None = None,
                   since: str | None = None, until: str | None = None) -> str:
        """The URL with some filters set (or cleared with ``""``), back to the first page."""
        return replace(self, job=self.job if job is None else job,
                       trigger=self.trigger if trigger is None else trigger,
                       since=self.since if since is None else since,
                       until=self.until if until is None else until).url()

    def chips(self) -> list[tuple[str, str, str]]:
        """The active filters as removable chips: (what, value, URL without it)."""
        out: list[tuple[str, str, str]] = []
        if self.job:
            out.append(("job", self.job, self.with_value(job="")))
        for state in self.states:
            out.append(("state", state, self.toggled(state)))
        if self.trigger:
            out.append(("trigger", self.trigger, self.with_value(trigger="")))
        if self.since:
            out.append(("since", self.since, self.with_value(since="")))
        if self.until:
            out.append(("until", self.until, self.with_value(until="")))
        return out


@dataclass(frozen=True)
class Trigger:
    """A run's trigger in words: its kind, the words, and a link (the parent run)."""

    kind: str
    text: str
    href: str | None = None
    title: str | None = None


def short_id(run_id: str, keep: int = 10) -> str:
    """A run id cut for a line of text (``01JFQ3…``); the full id goes in a title."""
    return run_id if len(run_id) <= keep else run_id[:keep] + "…"


def trigger_of(run: RunRecord, zone: tzinfo | None = None) -> Trigger:
    """``manual: ana``, ``scheduled 02:00 CET`` (in the schedule's zone when known),
    ``call_job: parent@01J…`` (linking to the parent run), else the trigger as stored."""
    raw = run.trigger
    if raw == "scheduled":
        text = "scheduled"
        if run.scheduled_for is not None and zone is not None:
            local = run.scheduled_for.astimezone(zone)
            text += f" {local:%H:%M} {local.tzname() or ''}".rstrip()
        if run.schedule and run.schedule.startswith("preset:"):
            text += f" ({run.schedule})"
        return Trigger("scheduled", text, title=run.schedule)
    kind, _, rest = raw.partition(":")
    if kind == "manual" and rest:
        return Trigger("manual", f"manual: {rest}")
    if kind == "call_job" and "@" in rest:
        job, _, parent = rest.rpartition("@")
        return Trigger("call_job", f"call_job: {job}@{short_id(parent)}", f"/runs/{parent}",
                       title=raw)
    return Trigger(kind or raw, raw)


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """The seconds from ``start`` to ``end`` (None if either is missing)."""
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def note_of(run: RunRecord) -> str | None:
    """The one line a list shows beside a run's state: why a queued run waits, why a run
    failed, was missed or canceled, or what a review is about."""
    if run.state is RunState.QUEUED:
        return run.wait_reason
    text = run.error if run.state in (RunState.FAILED, RunState.NEEDS_REVIEW) else None
    text = text or run.reason
    return text.splitlines()[0][:200] if text else None


def output_text(output: Any) -> str | None:
    """A step's output as indented JSON, cut at :data:`OUTPUT_CHARS`."""
    if output is None:
        return None
    text = json.dumps(output, indent=2, default=str, ensure_ascii=False)
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS] + "\n…"


@dataclass(frozen=True)
class Actions:
    """Which actions a run's page offers its reader: each needs the operator role and a
    state where the service would accept it."""

    cancel: bool = False
    resume: bool = False
    abandon: bool = False
    replay: bool = False

    @property
    def any(self) -> bool:
        return self.cancel or self.resume or self.abandon or self.replay


def actions_for(run: RunRecord, me: Principal) -> Actions:
    """The actions of ``run``'s page for ``me`` (none for a viewer)."""
    if not me.allows("operator"):
        return Actions()
    review = run.state is RunState.NEEDS_REVIEW
    return Actions(cancel=run.state in LIVE_STATES, resume=review, abandon=review,
                   replay=run.state in TERMINAL_RUN_STATES)


def zone_lookup(load: Callable[[], Any]) -> Callable[[RunRecord], tzinfo | None]:
    """A function giving the zone of a scheduled run's schedule, from the configuration
    ``load`` returns (read once, when first needed; None if it cannot be read)."""
    cache: dict[str, Any] = {}

    def zone(run: RunRecord) -> tzinfo | None:
        if run.trigger != "scheduled" or not run.schedule:
            return None
        if "jobs" not in cache:
            try:
                cache["jobs"] = load().jobs
            except Exception:  # an invalid jobs.toml: times stay in UTC
                cache["jobs"] = {}
        job = cache["jobs"].get(run.job_id)
        if job is None:
            return None
        from cadenza.scheduler.schedules import schedules_of

        try:
            specs = schedules_of(job)
        except Exception:
            return None
        for spec in specs:
            if spec.name == run.schedule:
                return spec.zone
        return None

    return zone
