"""Fires of schedules and what becomes of them: pure functions, ``now`` always an argument.

* :func:`fires_between` — the fires of one schedule in ``(after, until]``, as UTC instants;
  :class:`FireStream` answers the same (and :func:`next_fire`) from one live iterator.
* :func:`upcoming` — the next fires of several schedules merged in time order, each with its
  local time, UTC time, schedule name and DST mark (``cadenza jobs next``, the UI preview).
* :class:`TickResult` / :class:`CreatedRun` — what a tick of the service wrote.
* :func:`plan_job` — the runs one tick writes for one job's due fires (docs/scheduling.md):

  - a fire older than ``missed_grace`` at the tick (``now - scheduled_for > missed_grace``)
    was missed (the scheduler was down, or its clock jumped forward). Every missed fire is a
    MISSED run with a reason, except those ``on_missed`` picks to run anyway, per schedule:
    ``skip`` none, ``run_latest`` the latest one, ``run_all`` the ``catchup_max`` most recent
    ones (the freshest are the useful ones, and ``run_latest`` is ``run_all`` with 1). A
    picked catch-up fire is QUEUED whatever ``on_overlap`` says: the user asked for it, and
    admission still keeps the job under ``max_concurrency``;
  - a fire within grace is on time: QUEUED, unless the job already has ``max_concurrency``
    runs QUEUED or RUNNING (counting runs queued earlier in the same tick) and
    ``on_overlap = "skip"``, which records it MISSED with a reason starting "overlap";
  - a QUEUED fire gets ``not_before = scheduled_for + U(0, jitter)`` (``scheduled_for`` never
    moves); with no jitter, ``not_before`` stays unset.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cadenza.config.durations import format_duration
from cadenza.domain.business_days import FireNote
from cadenza.domain.cron import DAY_NAMES, DstMark
from cadenza.domain.states import RunState
from cadenza.scheduler.schedules import JobPolicy, ScheduleSpec

log = logging.getLogger("cadenza.scheduler")


def fires_between(spec: ScheduleSpec, after: datetime, until: datetime) -> list[datetime]:
    """Fires of ``spec`` with ``after < fire <= until``, as aware UTC datetimes, in order."""
    after_utc, until_utc = after.astimezone(UTC), until.astimezone(UTC)
    out: list[datetime] = []
    if until_utc <= after_utc:
        return out
    for fire in spec.fires(after_utc):
        fire_utc = fire.astimezone(UTC)
        if fire_utc > until_utc:
            break
        out.append(fire_utc)
    return out


def next_fire(spec: ScheduleSpec, after: datetime) -> datetime | None:
    """The first fire of ``spec`` strictly after ``after`` (UTC), or None if it never fires."""
    for fire in spec.fires(after.astimezone(UTC)):
        return fire.astimezone(UTC)
    return None


class FireStream:
    """The fires of one schedule after an instant, computed lazily and kept between ticks.

    Answers :func:`fires_between` and :func:`next_fire` for any ``after`` at or past its
    ``base`` from one live :meth:`~cadenza.domain.cron.CronExpr.fires` iterator, instead of
    starting a new one per question (the scheduler asks both about every due schedule on
    every tick, and starting one costs more than the rest of the tick's work for that
    schedule). An earlier ``after`` restarts it there. :meth:`forget` drops the fires a
    cursor has passed. Not thread-safe (the scheduler holds its lock).
    """

    __slots__ = ("_ahead", "_fires", "_more", "base", "spec")

    def __init__(self, spec: ScheduleSpec, after: datetime) -> None:
        self.spec = spec
        self._restart(after.astimezone(UTC))

    def _restart(self, after: datetime) -> None:
        self.base = after
        self._fires = self.spec.fires(after)
        self._ahead: list[datetime] = []  # fires after base already computed, ascending
        self._more = True

    def _until_past(self, when: datetime) -> None:
        """Compute fires until one lies after ``when`` (or there are no more)."""
        if when < self.base:
            self._restart(when)
        while self._more and (not self._ahead or self._ahead[-1] <= when):
            fire = next(self._fires, None)
            if fire is None:
                self._more = False
            else:
                self._ahead.append(fire.astimezone(UTC))

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """What :func:`fires_between` answers: fires with ``after < fire <= until`` (UTC)."""
        after_utc, until_utc = after.astimezone(UTC), until.astimezone(UTC)
        if until_utc <= after_utc:
            return []
        self._until_past(after_utc)
        self._until_past(until_utc)
        start = bisect.bisect_right(self._ahead, after_utc)
        return self._ahead[start : bisect.bisect_right(self._ahead, until_utc, lo=start)]

    def first_after(self, after: datetime) -> datetime | None:
        """What :func:`next_fire` answers: the first fire strictly after ``after`` (UTC)."""
        after_utc = after.astimezone(UTC)
        self._until_past(after_utc)
        k = bisect.bisect_right(self._ahead, after_utc)
        return self._ahead[k] if k < len(self._ahead) else None

    def forget(self, upto: datetime) -> None:
        """Drop the fires at or before ``upto`` (the schedule's cursor moved there)."""
        upto_utc = upto.astimezone(UTC)
        if upto_utc > self.base:
            del self._ahead[: bisect.bisect_right(self._ahead, upto_utc)]
            self.base = upto_utc


@dataclass(frozen=True)
class UpcomingFire:
    """One previewed fire."""

    local: datetime
    utc: datetime
    schedule: str
    dst: DstMark | None
    calendar: FireNote | None = None
    """What the business calendar did: skipped (the fire is recorded, not run), moved, or
    the n-th working day."""

    @property
    def day_name(self) -> str:
        """The local weekday in words (0 = Monday)."""
        return DAY_NAMES[self.local.weekday()]

    @property
    def skipped(self) -> bool:
        """Whether the fire falls on a day off and does not run (it is recorded)."""
        return self.calendar is not None and self.calendar.kind == "skipped"

    def as_json(self) -> dict[str, Any]:
        """``{"at", "utc", "schedule", "dst", "calendar"}`` as ``cadenza jobs next --json``
        prints it; ``calendar`` is None or ``{"kind", "note", "days": [{"date", "name"}]}``."""
        note = self.calendar
        return {
            "at": self.local.isoformat(),
            "utc": self.utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "schedule": self.schedule,
            "dst": self.dst,
            "calendar": None if note is None else {
                "kind": note.kind, "note": note.text(),
                "days": [{"date": d.day.isoformat(), "name": d.name} for d in note.days]},
        }


def _preview(spec: ScheduleSpec, after: datetime, language: str | None
             ) -> Iterator[tuple[datetime, int, UpcomingFire]]:
    order = 0
    for fire in spec.fires(after):
        utc = fire.astimezone(UTC)
        order += 1
        yield utc, order, UpcomingFire(fire, utc, spec.name, spec.cron.dst_mark(fire, spec.zone),
                                       spec.note(fire, language))


def upcoming(specs: Iterable[ScheduleSpec], after: datetime, n: int,
             language: str | None = None) -> list[UpcomingFire]:
    """The next ``n`` fires after ``after`` of the enabled ``specs``, merged in time order
    (ties: the order of ``specs``); calendar notes name days in ``language`` (None: each
    calendar's own)."""
    streams = [_preview(spec, after.astimezone(UTC), language)
               for spec in specs if spec.enabled]
    out: list[UpcomingFire] = []
    for _utc, _order, item in heapq.merge(*streams, key=lambda t: (t[0], t[1])):
        out.append(item)
        if len(out) >= n:
            break
    return out


@dataclass(frozen=True)
class PlannedRun:
    """One fire's run as the tick will write it."""

    schedule: ScheduleSpec
    scheduled_for: datetime
    state: RunState
    reason: str | None
    not_before: datetime | None = None
    catch_up: bool = False
    quiet: bool = False
    """A MISSED fire nobody needs to be alerted of: it fell on a day off of its calendar, or
    scheduling was paused by a person; its reason says which."""

    @property
    def overrides(self) -> dict[str, Any]:
        """What the run's ``overrides`` column gets (the preset's values, or nothing)."""
        return dict(self.schedule.overrides)


@dataclass
class DueFires:
    """The fires of one schedule in one tick (``fires`` in UTC, ascending)."""

    schedule: ScheduleSpec
    fires: Sequence[datetime]


def _local_text(spec: ScheduleSpec, when: datetime) -> str:
    local = when.astimezone(spec.zone)
    return f"{local:%H:%M} {spec.zone.key} on {local:%Y-%m-%d}"


def missed_reason(policy: JobPolicy, spec: ScheduleSpec, when: datetime, tail: str) -> str:
    """The reason of a fire missed because nothing fired it within ``missed_grace``."""
    grace = format_duration(policy.missed_grace)
    return (
        f"scheduler was not running at {_local_text(spec, when)} (downtime, or the clock "
        f"jumped; not fired within missed_grace {grace}); {tail}"
    )


def _missed_plan(policy: JobPolicy, due: DueFires, missed: Sequence[datetime]) -> list[PlannedRun]:
    """The missed fires of one schedule: which run (``catch_up``) and which stay MISSED."""
    spec = due.schedule
    if policy.on_missed == "run_latest":
        keep = 1
    elif policy.on_missed == "run_all":
        keep = policy.catchup_max
    else:
        keep = 0
    picked = set(missed[len(missed) - keep :]) if keep > 0 else set()
    out: list[PlannedRun] = []
    for when in missed:
        if when in picked:
            reason = f"catch-up of a fire missed during downtime (on_missed = {policy.on_missed})"
            out.append(PlannedRun(spec, when, RunState.QUEUED, reason, catch_up=True))
            continue
        if policy.on_missed == "skip":
            tail = "on_missed = skip"
        elif policy.on_missed == "run_latest":
            latest = _local_text(spec, missed[-1])
            tail = f"on_missed = run_latest runs only the latest missed fire ({latest})"
        else:
            tail = (
                f"on_missed = run_all runs only the {policy.catchup_max} most recent missed "
                f"fires (catchup_max = {policy.catchup_max})"
            )
        out.append(PlannedRun(spec, when, RunState.MISSED, missed_reason(policy, spec, when, tail)))
    return out


def plan_job(
    policy: JobPolicy,
    due: Sequence[DueFires],
    now: datetime,
    active: int,
    rng: random.Random,
) -> list[PlannedRun]:
    """The runs for every due fire of one job, in time order (see the module doc).

    ``active`` is the number of the job's runs QUEUED or RUNNING before this tick.
    """
    boundary = now.astimezone(UTC) - policy.missed_grace
    planned: list[PlannedRun] = []
    for item in due:
        spec = item.schedule
        notes = {when: spec.note(when) for when in item.fires} if spec.rule else {}
        off = {when for when, note in notes.items() if note and note.kind == "skipped"}
        for when, note in notes.items():
            if when in off and note is not None:
                planned.append(PlannedRun(spec, when, RunState.MISSED, note.text(), quiet=True))
        missed = [f for f in item.fires if f < boundary and f not in off]
        planned.extend(_missed_plan(policy, item, missed))
        for when in item.fires:
            if when >= boundary and when not in off:
                note = notes.get(when)
                reason = note.text() if note is not None and note.kind == "moved" else None
                planned.append(PlannedRun(spec, when, RunState.QUEUED, reason))
    planned.sort(key=lambda p: (p.scheduled_for, p.schedule.name))
    out: list[PlannedRun] = []
    for run in planned:
        if run.state is RunState.QUEUED and not run.catch_up:
            run = _overlap(policy, run, active)
        if run.state is RunState.QUEUED:
            active += 1
            run = _with_jitter(policy, run, rng)
        out.append(run)
    return out


def _overlap(policy: JobPolicy, run: PlannedRun, active: int) -> PlannedRun:
    if active < policy.max_concurrency:
        return run
    runs = "run" if active == 1 else "runs"
    detail = (
        f"{active} {runs} of {policy.job_id} already queued or running "
        f"(max_concurrency = {policy.max_concurrency}"
    )
    if policy.on_overlap == "queue":
        return PlannedRun(
            run.schedule,
            run.scheduled_for,
            RunState.QUEUED,
            f"queued behind {detail}, on_overlap = queue)",
        )
    return PlannedRun(
        run.schedule,
        run.scheduled_for,
        RunState.MISSED,
        f"overlap: {detail}, on_overlap = skip)",
    )


def _with_jitter(policy: JobPolicy, run: PlannedRun, rng: random.Random) -> PlannedRun:
    if policy.jitter <= timedelta(0):
        return run
    delay = timedelta(seconds=rng.uniform(0, policy.jitter.total_seconds()))
    return PlannedRun(
        run.schedule,
        run.scheduled_for,
        run.state,
        run.reason,
        not_before=run.scheduled_for + delay,
        catch_up=run.catch_up,
    )


@dataclass(frozen=True)
class CreatedRun:
    """A run one tick wrote."""

    run_id: str
    job_id: str
    schedule: str
    scheduled_for: datetime
    state: RunState
    reason: str | None
    not_before: datetime | None


@dataclass(frozen=True)
class TickResult:
    """What one tick did."""

    now: datetime
    created: tuple[CreatedRun, ...]
    already_recorded: int
    """Fires another scheduler had recorded first (their inserts were no-ops)."""
    next_wakeup: datetime | None

    @property
    def queued(self) -> list[CreatedRun]:
        """The runs created QUEUED."""
        return [c for c in self.created if c.state is RunState.QUEUED]

    @property
    def missed(self) -> list[CreatedRun]:
        """The runs created MISSED (missed fires, overlap)."""
        return [c for c in self.created if c.state is RunState.MISSED]


def jobs_of(config: Any) -> Mapping[str, Any]:
    """The jobs of a ``LoadedConfig``, or the mapping itself."""
    jobs = getattr(config, "jobs", config)
    if not isinstance(jobs, Mapping):
        raise TypeError("Scheduler needs a LoadedConfig or a mapping of job id to JobConfig")
    return jobs


QUEUED_PER_LINE = 50
"""Fires of one due time named per INFO line (a crowded minute: a line per 50 runs, not a
logging record per run on the way to their due time)."""


def log_result(result: TickResult) -> None:
    """Log what a tick did: a warning per missed fire; per due time, the queued ones
    (``J S queued for T`` for one, ``N runs queued for T: J1 (S1), J2 (S2), ...``)."""
    queued: dict[datetime, list[CreatedRun]] = {}
    for run in result.created:
        if run.state is RunState.MISSED:
            log.warning("%s %s missed %s: %s", run.job_id, run.schedule,
                        run.scheduled_for.isoformat(), run.reason)
        else:
            queued.setdefault(run.scheduled_for, []).append(run)
    if not log.isEnabledFor(logging.INFO):
        return
    for due, runs in queued.items():
        for k in range(0, len(runs), QUEUED_PER_LINE):
            part = runs[k:k + QUEUED_PER_LINE]
            if len(part) == 1:
                log.info("%s %s queued for %s", part[0].job_id, part[0].schedule,
                         due.isoformat())
            else:
                log.info("%d runs queued for %s: %s", len(part), due.isoformat(),
                         ", ".join(f"{r.job_id} ({r.schedule})" for r in part))
