"""The schedules of a job: its own and each preset's, with their zones and run values.

A job has up to one schedule of its own (``schedule = "..."``), named ``"job"``, and one per
preset that has a ``schedule``, named ``"preset:NAME"`` (docs/scheduling.md). These names are what
``runs.schedule`` and ``schedule_cursors.schedule`` hold.

Enabled rules: the job's ``enabled = false`` switches off the job's own schedule only; a
preset's schedule has its own ``enabled`` and fires even when the job's schedule is absent or
disabled (docs/scheduling.md "The schedules of a job").

Zones: the preset's ``timezone``, else the job's, else the server's zone
(:func:`server_zone`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cadenza.domain.business_days import CalendarRule, FireNote
from cadenza.domain.calendar import Calendar
from cadenza.domain.cron import CronExpr, parse_cron
from cadenza.domain.params import convert_all

JOB_SCHEDULE = "job"
PRESET_PREFIX = "preset:"


def preset_schedule_name(preset: str) -> str:
    """``"preset:NAME"``, the schedule name of preset ``NAME``."""
    return f"{PRESET_PREFIX}{preset}"


def server_zone() -> ZoneInfo:
    """The server's IANA zone, the zone of a job without ``timezone``: the same answer as
    admission's :func:`~cadenza.config.admission_limits.server_timezone` (``$TZ``, else the
    ``/etc/localtime`` link, else UTC; Windows zone names are not IANA names: UTC)."""
    from cadenza.config.admission_limits import server_timezone

    zone = server_timezone()
    return zone if isinstance(zone, ZoneInfo) else ZoneInfo("UTC")


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule of one job, ready to compute fires.

    ``overrides`` is what a fire's run carries in ``runs.overrides``: empty for the job's own
    schedule; for a preset ``{"preset", "params", "step_args", "disabled_steps",
    "log_level"}`` (the executor may also read the preset by name).
    """

    job_id: str
    name: str
    expression: str
    cron: CronExpr
    zone: ZoneInfo
    enabled: bool
    disabled_because: str | None
    preset: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    rule: CalendarRule | None = None
    """The business calendar the fires follow (``calendar``, ``days``, ``shift``,
    ``business_day``), or None."""

    @property
    def key(self) -> tuple[str, str]:
        """(job_id, schedule name): the cursor's key."""
        return (self.job_id, self.name)

    @property
    def identity(self) -> tuple[Any, ...]:
        """What makes a changed schedule a new one: its expression, zone and calendar."""
        return (self.expression, self.zone.key, self.rule)

    def fires(self, after: datetime) -> Iterator[datetime]:
        """The fires strictly after ``after`` (aware), as aware datetimes in the zone, in
        order; on a calendar, moved ones at their new time and skipped ones included."""
        if self.rule is None:
            return self.cron.fires(after, self.zone)
        return self.rule.fires(self.cron, after, self.zone)

    def note(self, fire: datetime, language: str | None = None) -> FireNote | None:
        """What the calendar did to ``fire`` (skipped, moved, the n-th working day)."""
        if self.rule is None:
            return None
        return self.rule.note(self.cron, fire, self.zone, language)

    def skipped(self, fire: datetime) -> str | None:
        """The reason ``fire`` does not run (its day is off), or None when it runs."""
        note = self.note(fire)
        return note.text() if note is not None and note.kind == "skipped" else None


@dataclass(frozen=True)
class JobPolicy:
    """The job fields the scheduler decides with (docs/configuration.md ``jobs.toml``)."""

    job_id: str
    priority: int = 0
    max_concurrency: int = 1
    on_overlap: str = "skip"
    on_missed: str = "skip"
    missed_grace: timedelta = timedelta(seconds=60)
    catchup_max: int = 10
    jitter: timedelta = timedelta(0)


def policy_of(job: Any) -> JobPolicy:
    """The :class:`JobPolicy` of a ``JobConfig``."""
    return JobPolicy(
        job_id=job.id,
        priority=job.priority,
        max_concurrency=job.max_concurrency,
        on_overlap=job.on_overlap,
        on_missed=job.on_missed,
        missed_grace=job.missed_grace,
        catchup_max=job.catchup_max,
        jitter=job.jitter,
    )


def rule_of(owner: Any, job: Any, calendars: Mapping[str, Calendar]) -> CalendarRule | None:
    """The :class:`CalendarRule` of a job or preset (``owner``; a preset's unset keys are its
    job's), or None without a calendar. A calendar that ``calendars`` lacks (the check of the
    configuration refuses it) is no rule."""
    def pick(key: str) -> Any:
        value = getattr(owner, key, None)
        return getattr(job, key, None) if value is None and owner is not job else value

    name = pick("calendar")
    if name is None or name not in calendars:
        return None
    return CalendarRule(calendars[name], pick("days") or "all", pick("shift") or "skip",
                        pick("business_day"))


def schedules_of(job: Any, default_zone: ZoneInfo | None = None,
                 calendars: Mapping[str, Calendar] | None = None) -> list[ScheduleSpec]:
    """Every schedule of ``job`` (a ``JobConfig``), enabled or not, the job's first, each on
    its business calendar among ``calendars``.

    Disabled ones carry ``disabled_because`` (for previews); the scheduler skips them.
    """
    calendars = calendars or {}
    fallback = default_zone or server_zone()
    job_zone = ZoneInfo(job.timezone) if job.timezone else fallback
    out: list[ScheduleSpec] = []
    if job.schedule:
        out.append(
            ScheduleSpec(
                job_id=job.id,
                name=JOB_SCHEDULE,
                expression=job.schedule,
                cron=parse_cron(job.schedule),
                zone=job_zone,
                enabled=bool(job.enabled),
                disabled_because=None if job.enabled else "the job is disabled (enabled = false)",
                rule=rule_of(job, job, calendars),
            )
        )
    for name, preset in job.presets.items():
        if not preset.schedule:
            continue
        out.append(
            ScheduleSpec(
                job_id=job.id,
                name=preset_schedule_name(name),
                expression=preset.schedule,
                cron=parse_cron(preset.schedule),
                zone=ZoneInfo(preset.timezone) if preset.timezone else job_zone,
                enabled=bool(preset.enabled),
                disabled_because=None
                if preset.enabled
                else f"preset {name!r} is disabled (enabled = false)",
                preset=name,
                overrides=preset_overrides(name, preset, job.params),
                rule=rule_of(preset, job, calendars),
            )
        )
    return out


def preset_overrides(name: str, preset: Any,
                     declared: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``runs.overrides`` of a fire of preset ``name``; its params converted to the
    types of the job's ``declared`` ones, as for a run asked for by hand (the configuration
    check refused a value that does not convert)."""
    params, _ = convert_all(preset.params, declared or {})
    return {
        "preset": name,
        "params": params,
        "step_args": {step: dict(args) for step, args in preset.step_args.items()},
        "disabled_steps": list(preset.disabled_steps),
        "log_level": preset.log_level,
    }


def all_schedules(
    jobs: dict[str, Any], default_zone: ZoneInfo | None = None,
    calendars: Mapping[str, Calendar] | None = None,
) -> dict[tuple[str, str], ScheduleSpec]:
    """Every schedule of every job, keyed by (job_id, schedule name)."""
    zone = default_zone or server_zone()
    return {spec.key: spec for job in jobs.values()
            for spec in schedules_of(job, zone, calendars)}


def calendars_of(config: Any) -> dict[str, Calendar]:
    """The business calendars of a ``LoadedConfig`` (``[calendars]`` of cadenza.toml), built
    once per configuration; none for a bare mapping of jobs."""
    settings = getattr(config, "settings", None)
    if settings is None:
        return {}
    return dict(settings.calendar_objects)
