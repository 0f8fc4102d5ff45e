"""Admission: which queued run may start now, and why the others wait (docs/admission.md).

::

    limits = limits_from_config(max_concurrent_runs=16, jobs={"scrape": {"tags": ["scraping"]}},
                                tags={"scraping": {"max_concurrency": 2, "budget_per_hour": 120}})
    decision = admit(candidates, limits, load, now, free_slots=4)
    for run in decision.admitted: ...            # lease resources, then QUEUED -> RUNNING
    for run_id, why in decision.waiting.items(): ...   # why.text, why.until, why.rule

A candidate starts only when every rule holds, checked in this order of kind:

* time rules of its own: ``not_before`` has passed; a window of the job is open (job's zone;
  no windows = always open); the job's and each of its tags' ``budget_per_hour`` has a free
  slot (a rolling hour of starts: a start at ``t`` frees its slot at ``t + 1h``);
* capacity rules of its own: the job's ``max_concurrency``; each tag's ``max_concurrency``;
* global rules: ``max_concurrent_runs`` (RUNNING on every node), then a free worker on this
  node (``free_slots``).

Candidates are taken by priority (higher first), then scheduled time (``queued_at``), then
run id. A run held by a rule of its own job or tags takes nothing from anyone: the runs
after it, of other jobs, are still considered, so a blocked high-priority job never starves
the others. Only the global rules hold every run behind them. Each run admitted counts
toward the limits of the candidates after it in the same decision.

Each run left waiting gets one :class:`WaitReason`: when several rules hold it, the time
rule that clears last is named (it says the earliest the run may start), else the first
capacity rule, else the global one. ``until`` is when that rule clears at the earliest
(aware UTC), or ``None`` when it depends on other runs ending.

Pure: no I/O, no clock reads; ``now`` is an argument.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from types import MappingProxyType
from typing import TypedDict
from zoneinfo import ZoneInfo

from cadenza.domain.windows import Window, next_opening, parse_window

HOUR = timedelta(hours=1)
"""The budget's rolling period."""

_DAY_ABBR = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MINUTE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)


class WaitRule(StrEnum):
    """Which rule holds a run (``WaitReason.rule``); the order of docs/admission.md."""

    NOT_BEFORE = "not_before"
    WINDOW = "window"
    JOB_BUDGET = "job_budget"
    TAG_BUDGET = "tag_budget"
    JOB_CONCURRENCY = "job_concurrency"
    TAG_CONCURRENCY = "tag_concurrency"
    MAX_CONCURRENT_RUNS = "max_concurrent_runs"
    NODE_WORKERS = "node_workers"
    UNKNOWN_JOB = "unknown_job"
    RESOURCES = "resources"
    """Set by the caller when the leases of an admitted run could not be taken."""


@dataclass(frozen=True)
class WaitReason:
    """Why a queued run does not start, in words a person understands, and until when.

    ``text`` names the rule and, when known, the time it may start (job's zone);
    ``until`` is the earliest instant (aware UTC) the rule could clear, ``None`` when that
    depends on other runs ending; ``rule`` is the rule as data (for filters and tests).
    """

    text: str
    until: datetime | None
    rule: WaitRule


@dataclass(frozen=True, slots=True)
class Candidate:
    """A QUEUED run, as admission sees it.

    ``queued_at`` is its scheduled time (``scheduled_for``, or ``created_at`` for a manual
    run): the order among equal priorities. ``attempt`` (retries spent) and ``requeued``
    (it ran before) only shape the wording of a ``not_before`` wait.
    """

    run_id: str
    job_id: str
    queued_at: datetime
    priority: int = 0
    not_before: datetime | None = None
    attempt: int = 0
    requeued: bool = False

    @property
    def order_key(self) -> tuple[int, datetime, str]:
        """Priority (higher first), then scheduled time, then run id."""
        return (-self.priority, self.queued_at, self.run_id)


@dataclass(frozen=True)
class JobLimits:
    """One job's admission settings (docs/admission.md); ``budget_per_hour = 0`` is unlimited."""

    max_concurrency: int = 1
    budget_per_hour: int = 0
    windows: tuple[Window, ...] = ()
    timezone: tzinfo = UTC
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A tag named twice must count once.
        object.__setattr__(self, "tags", tuple(dict.fromkeys(self.tags)))


@dataclass(frozen=True)
class TagLimits:
    """Caps shared by every job carrying a tag (``[limits.tags.NAME]``); ``None``/0 = none."""

    max_concurrency: int | None = None
    budget_per_hour: int = 0


@dataclass(frozen=True)
class Limits:
    """Everything admission reads from the config. Build it with :func:`limits_from_config`."""

    max_concurrent_runs: int
    jobs: Mapping[str, JobLimits] = field(default_factory=dict)
    tags: Mapping[str, TagLimits] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", MappingProxyType(dict(self.jobs)))
        object.__setattr__(self, "tags", MappingProxyType(dict(self.tags)))
        budgeted_tags = {t for t, lim in self.tags.items() if lim.budget_per_hour > 0}
        self._budgeted: frozenset[str]
        object.__setattr__(self, "_budgeted", frozenset(
            job_id for job_id, job in self.jobs.items()
            if job.budget_per_hour > 0 or budgeted_tags.intersection(job.tags)
        ))

    def budgeted_jobs(self) -> frozenset[str]:
        """Jobs whose starts count toward a budget (their own or one of their tags').

        Pass it to the store's ``admission_load(budget_jobs=...)`` so that only these
        jobs' recent starts are read. (Computed once: the limits do not change.)
        """
        return self._budgeted


@dataclass(frozen=True)
class Load:
    """What is already running or started, as read from the store at ``now``.

    ``running_total`` counts RUNNING runs on every node; ``running_by_job`` per job (tags
    are derived from the config's job → tags map); ``starts_by_job`` holds the start times
    of the last hour (older ones are ignored), in any order.
    """

    running_total: int = 0
    running_by_job: Mapping[str, int] = field(default_factory=dict)
    starts_by_job: Mapping[str, Sequence[datetime]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "running_by_job", MappingProxyType(dict(self.running_by_job)))
        object.__setattr__(
            self,
            "starts_by_job",
            MappingProxyType({k: tuple(sorted(v)) for k, v in self.starts_by_job.items()}),
        )

    def with_started(self, job_id: str, at: datetime) -> Load:
        """This load plus one run of ``job_id`` started (and still running) at ``at``."""
        running = dict(self.running_by_job)
        running[job_id] = running.get(job_id, 0) + 1
        starts = dict(self.starts_by_job)
        starts[job_id] = (*starts.get(job_id, ()), at)
        return Load(self.running_total + 1, running, starts)

    def with_finished(self, job_id: str) -> Load:
        """This load minus one running run of ``job_id`` (its start still counts)."""
        if self.running_by_job.get(job_id, 0) <= 0:
            raise ValueError(f"no run of {job_id} is running")
        running = dict(self.running_by_job)
        running[job_id] -= 1
        return Load(self.running_total - 1, running, self.starts_by_job)

    def after(self, decision: Decision, now: datetime) -> Load:
        """This load plus every run ``decision`` admitted, started at ``now``."""
        load = self
        for candidate in decision.admitted:
            load = load.with_started(candidate.job_id, now)
        return load


@dataclass(frozen=True)
class Decision:
    """The outcome of one :func:`admit`: runs to start, in order, and why the others wait."""

    admitted: tuple[Candidate, ...]
    waiting: Mapping[str, WaitReason]

    @property
    def next_check(self) -> datetime | None:
        """The earliest instant a waiting run's time rule clears (when to decide again),
        or ``None`` when every wait depends on other runs ending."""
        times = [w.until for w in self.waiting.values() if w.until is not None]
        return min(times) if times else None

    def wait_texts(self) -> dict[str, str]:
        """``{run_id: text}`` of every waiting run (what the store's ``set_wait_reasons``
        takes)."""
        return {run_id: why.text for run_id, why in self.waiting.items()}


def admit(
    candidates: Iterable[Candidate],
    limits: Limits,
    load: Load,
    now: datetime,
    free_slots: int,
) -> Decision:
    """Decide which of ``candidates`` start now, and give every other one its reason.

    ``candidates`` are QUEUED runs (sorted here by priority, then ``queued_at``, then id,
    whatever order they come in); ``load`` is what runs on every node; ``free_slots`` is the
    number of free workers on this node. ``now`` must be aware. The rules are in the module
    docstring and ``docs/admission.md``.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("admit() needs a timezone-aware now")
    now = now.astimezone(UTC)
    tally = _Tally(limits, load, now, free_slots)
    admitted: list[Candidate] = []
    waiting: dict[str, WaitReason] = {}
    for candidate in sorted(candidates, key=lambda c: c.order_key):
        job = limits.jobs.get(candidate.job_id)
        if job is None:
            waiting[candidate.run_id] = WaitReason(
                f"job {candidate.job_id} is not defined in jobs.toml", None, WaitRule.UNKNOWN_JOB
            )
            continue
        reason = _own_rules(candidate, job, tally) or tally.global_reason()
        if reason is None:
            tally.start(candidate.job_id, job)
            admitted.append(candidate)
        else:
            waiting[candidate.run_id] = reason
    return Decision(tuple(admitted), MappingProxyType(waiting))


def resources_reason(needs: Mapping[str, int], free: Mapping[str, int] | None = None) -> WaitReason:
    """The reason of an admitted run whose leases could not be taken (``requires``).

    ``needs`` is pool → count; ``free`` (optional) pool → free members now.
    """
    parts = []
    for pool, count in sorted(needs.items()):
        have = "" if free is None else f", {free.get(pool, 0)} free"
        parts.append(f"{pool} (needs {count}{have})")
    return WaitReason("waiting for resources: " + ", ".join(parts), None, WaitRule.RESOURCES)


class JobSpec(TypedDict, total=False):
    """One job's admission keys as plain data (the names of ``jobs.toml``)."""

    max_concurrency: int
    budget_per_hour: int
    windows: Sequence[str]
    timezone: str | None
    tags: Sequence[str]


class TagSpec(TypedDict, total=False):
    """One ``[limits.tags.NAME]`` table as plain data."""

    max_concurrency: int | None
    budget_per_hour: int


def limits_from_config(
    *,
    max_concurrent_runs: int,
    jobs: Mapping[str, JobSpec],
    tags: Mapping[str, TagSpec] | None = None,
    default_timezone: tzinfo | str = UTC,
) -> Limits:
    """Build :class:`Limits` from plain mappings shaped like the config files.

    ``jobs`` maps job id → :class:`JobSpec` (missing keys take the documented defaults:
    ``max_concurrency = 1``, no budget, no windows, no tags); a job without ``timezone``
    uses ``default_timezone`` (the server's zone). Raises :class:`ValueError` for a bad
    window, an unknown zone or a limit below its minimum.
    """
    default_tz = ZoneInfo(default_timezone) if isinstance(default_timezone, str) else (
        default_timezone)
    if max_concurrent_runs < 1:
        raise ValueError("max_concurrent_runs must be at least 1")
    job_limits: dict[str, JobLimits] = {}
    for job_id, spec in jobs.items():
        zone = spec.get("timezone")
        job = JobLimits(
            max_concurrency=int(spec.get("max_concurrency", 1)),
            budget_per_hour=int(spec.get("budget_per_hour", 0)),
            windows=tuple(parse_window(text) for text in spec.get("windows", ())),
            timezone=ZoneInfo(zone) if zone else default_tz,
            tags=tuple(spec.get("tags", ())),
        )
        if job.max_concurrency < 1 or job.budget_per_hour < 0:
            raise ValueError(f"job {job_id}: max_concurrency >= 1 and budget_per_hour >= 0")
        job_limits[job_id] = job
    tag_limits: dict[str, TagLimits] = {}
    for tag, tag_spec in (tags or {}).items():
        cap = tag_spec.get("max_concurrency")
        tag_limits[tag] = TagLimits(
            max_concurrency=None if cap is None else int(cap),
            budget_per_hour=int(tag_spec.get("budget_per_hour", 0)),
        )
        if (cap is not None and cap < 1) or tag_limits[tag].budget_per_hour < 0:
            raise ValueError(f"tag {tag}: max_concurrency >= 1 and budget_per_hour >= 0")
    return Limits(max_concurrent_runs, job_limits, tag_limits)


class _Tally:
    """The running counts and recent starts during one decision (mutable, private)."""

    def __init__(self, limits: Limits, load: Load, now: datetime, free_slots: int) -> None:
        self.limits = limits
        self.now = now
        self.horizon = now - HOUR
        self.total = load.running_total
        self.free = free_slots
        self.running_by_job = dict(load.running_by_job)
        self.running_by_tag: dict[str, int] = {}
        self.starts_by_job = {
            job_id: [s for s in starts if s > self.horizon]
            for job_id, starts in load.starts_by_job.items()
        }
        self.starts_by_tag: dict[str, list[datetime]] = {}
        # Only the jobs with runs running or started in the hour count toward their tags:
        # a decision costs nothing per configured job (a node may have thousands).
        for job_id in self.running_by_job.keys() | self.starts_by_job.keys():
            job = limits.jobs.get(job_id)
            if job is None:  # removed from the configuration: counts toward no tag
                continue
            running = self.running_by_job.get(job_id, 0)
            starts = self.starts_by_job.get(job_id, ())
            for tag in job.tags:
                self.running_by_tag[tag] = self.running_by_tag.get(tag, 0) + running
                self.starts_by_tag.setdefault(tag, []).extend(starts)
        for starts in self.starts_by_tag.values():
            starts.sort()
        self._windows: dict[tuple[tuple[Window, ...], tzinfo], WaitReason | None] = {}

    def start(self, job_id: str, job: JobLimits) -> None:
        """Count one run of ``job_id`` started at ``now``."""
        self.total += 1
        self.free -= 1
        self.running_by_job[job_id] = self.running_by_job.get(job_id, 0) + 1
        bisect.insort(self.starts_by_job.setdefault(job_id, []), self.now)
        for tag in job.tags:
            self.running_by_tag[tag] = self.running_by_tag.get(tag, 0) + 1
            bisect.insort(self.starts_by_tag.setdefault(tag, []), self.now)

    def window_reason(self, job: JobLimits) -> WaitReason | None:
        """Why the job's windows hold it now (cached per windows and zone: many jobs share
        the same office hours)."""
        key = (job.windows, job.timezone)
        if key not in self._windows:
            self._windows[key] = _window_reason(job, self.now)
        return self._windows[key]

    def next_slot(self, starts: list[datetime], budget: int) -> datetime | None:
        """``None`` when a start fits in the rolling hour, else when the next slot frees."""
        if budget <= 0:
            return None
        live = len(starts) - bisect.bisect_right(starts, self.horizon)
        if live < budget:
            return None
        return starts[len(starts) - budget] + HOUR

    def global_reason(self) -> WaitReason | None:
        """The rule shared by every run that holds, if any."""
        cap = self.limits.max_concurrent_runs
        if self.total >= cap:
            return WaitReason(
                f"max_concurrent_runs {cap} reached", None, WaitRule.MAX_CONCURRENT_RUNS
            )
        if self.free <= 0:
            return WaitReason("no free worker on this node", None, WaitRule.NODE_WORKERS)
        return None


def _own_rules(candidate: Candidate, job: JobLimits, tally: _Tally) -> WaitReason | None:
    """The reason a rule of the run's own job or tags holds it, or ``None``."""
    now, tz = tally.now, job.timezone
    timed: list[WaitReason] = []
    if candidate.not_before is not None and candidate.not_before > now:
        when = _clock(candidate.not_before, now, tz, seconds=True)
        note = " (retry backoff)" if candidate.attempt > 0 else (
            " (deferred)" if candidate.requeued else "")
        timed.append(WaitReason(f"not before {when}{note}", candidate.not_before,
                                WaitRule.NOT_BEFORE))
    window = tally.window_reason(job)
    if window is not None:
        timed.append(window)
    slot = tally.next_slot(tally.starts_by_job.get(candidate.job_id, []), job.budget_per_hour)
    if slot is not None:
        timed.append(WaitReason(
            f"budget {job.budget_per_hour}/h for job {candidate.job_id} used; "
            f"next slot {_clock(slot, now, tz)}", slot, WaitRule.JOB_BUDGET))
    for tag in job.tags:
        tag_limits = tally.limits.tags.get(tag)
        if tag_limits is None:
            continue
        slot = tally.next_slot(tally.starts_by_tag.get(tag, []), tag_limits.budget_per_hour)
        if slot is not None:
            timed.append(WaitReason(
                f"budget {tag_limits.budget_per_hour}/h for tag {tag} used; "
                f"next slot {_clock(slot, now, tz)}", slot, WaitRule.TAG_BUDGET))
    if timed:
        # The rule that clears last says the earliest the run may start.
        return max(timed, key=lambda w: w.until or now)
    running = tally.running_by_job.get(candidate.job_id, 0)
    if running >= job.max_concurrency:
        return WaitReason(
            f"job {candidate.job_id} already runs {running} of max_concurrency "
            f"{job.max_concurrency}", None, WaitRule.JOB_CONCURRENCY)
    for tag in job.tags:
        tag_limits = tally.limits.tags.get(tag)
        if tag_limits is None or tag_limits.max_concurrency is None:
            continue
        if tally.running_by_tag.get(tag, 0) >= tag_limits.max_concurrency:
            return WaitReason(f"tag {tag} at max_concurrency {tag_limits.max_concurrency}",
                              None, WaitRule.TAG_CONCURRENCY)
    return None


def _window_reason(job: JobLimits, now: datetime) -> WaitReason | None:
    if not job.windows:
        return None
    local = now.astimezone(job.timezone)
    opens = next_opening(job.windows, local)
    if opens == local:
        return None
    opens_utc = opens.astimezone(UTC)
    names = ", ".join(w.describe() for w in job.windows)
    plural = "s" if len(job.windows) > 1 else ""
    return WaitReason(
        f"outside window{plural} {names}; opens {_clock(opens_utc, now, job.timezone, day=True)}",
        opens_utc,
        WaitRule.WINDOW,
    )


def _clock(
    at: datetime, now: datetime, tz: tzinfo, *, seconds: bool = False, day: bool = False
) -> str:
    """``at`` as a person reads it in ``tz``: ``14:07`` today, ``Tue 14:07`` within a week,
    ``2027-04-05 14:07`` later. Rounded up (to the minute, or the second with ``seconds``)
    so that the run never waits past the time shown."""
    step = _SECOND if seconds else _MINUTE
    rest = (at - datetime(2000, 1, 1, tzinfo=UTC)) % step
    if rest:
        at = at + (step - rest)
    local = at.astimezone(tz)
    text = local.strftime("%H:%M:%S" if seconds else "%H:%M")
    days_ahead = (local.date() - now.astimezone(tz).date()).days
    if days_ahead == 0 and not day:
        return text
    if 0 <= days_ahead < 7:
        return f"{_DAY_ABBR[local.weekday()]} {text}"
    return f"{local:%Y-%m-%d} {text}"
