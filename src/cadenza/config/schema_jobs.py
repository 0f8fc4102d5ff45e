"""The schema of ``jobs.toml``: jobs, their retry policy, alerts and presets (see
docs/configuration.md).

Steps are validated one by one against their type's ``Config`` (see
:mod:`cadenza.steps.registry`) and attached to the job afterwards, so that one bad step
never hides the problems of the others.

Each step is serialised by its own class (:data:`Steps`): dumping a job gives every key of
every step, those of its type included, so what the API shows can be saved back whole.

Preset keys (docs/configuration.md): ``description``, ``schedule``, ``timezone``
(default: the job's), ``enabled``, ``params``, ``step_args`` (``{ STEP = { key = value } }``,
the run overrides of one step's arguments, as in the API's ``step_args``), ``disabled_steps``
and ``log_level``. A preset's ``params`` must be declared in the job's ``params``, each value of
the type of the job's (see :func:`cadenza.domain.params.param_type`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field, SerializeAsAny

from cadenza.config.types import (
    CalendarName,
    CronSchedule,
    Deadline,
    Duration,
    Identifier,
    JsonMap,
    LogLevel,
    ParamMap,
    PoolNeeds,
    Recipient,
    RetryPolicy,
    StrictModel,
    Timezone,
    WindowSpec,
)
from cadenza.steps.base import StepConfig

JobId = Identifier

Steps = Annotated[list[SerializeAsAny[StepConfig]], "each step dumped by its own type"]
"""A job's steps: :class:`StepConfig` subclasses, each serialised with its own class.

Why not a discriminated union on ``type``: the step types are plugins (the entry point
group ``cadenza.steps``), known only once the registry has loaded, and may change when it
reloads; a union fixed when this module is imported would know none of them, and one
rebuilt from the registry would make every plugin's ``Config`` declare ``type`` as a
``Literal`` of its own name. The loader already chooses each step's class by its
``type`` (and locates the errors of each step on its own), so serialisation only has to
follow the class of the instance, which ``SerializeAsAny`` does on every pydantic 2
release. Without it pydantic dumps each step as the declared base class, dropping the
keys of its type (a python step's ``callable``, an http step's ``url``).
"""


BusinessDay = Annotated[int, Field(ge=-23, le=23)]
"""The N-th working day of the month, 1..23, or from its end, -1 (the last)..-23; not 0."""


class Alerts(StrictModel):
    """Failure alerts without any rule: on FAILED or NEEDS_REVIEW (``on_failure``), and once
    when a run lasts longer than ``long_run``."""

    recipients: list[Recipient] = Field(default_factory=list, description=(
        "Who is told: e-mail addresses, role:NAME or user:NAME, e.g. role:ops."))
    on_failure: bool = Field(True, description=(
        "Send an alert when a run fails or needs review."))
    long_run: Duration | None = Field(None, description=(
        "Alert once when a run lasts longer than this, e.g. 3h."))


class Preset(StrictModel):
    """A named set of run values, optionally with its own schedule (a second schedule of
    the job, with its own ``enabled``)."""

    description: str = ""
    schedule: CronSchedule | None = None
    timezone: Timezone | None = None
    enabled: bool = True
    params: ParamMap = Field(default_factory=dict)
    step_args: dict[Identifier, JsonMap] = Field(default_factory=dict)
    disabled_steps: list[Identifier] = Field(default_factory=list)
    log_level: LogLevel | None = None
    # The business calendar and deadlines of the preset's schedule; unset: the job's.
    calendar: CalendarName = None
    days: Literal["all", "business"] | None = None
    shift: Literal["skip", "next", "previous"] | None = None
    business_day: BusinessDay | None = None
    start_by: Deadline | None = None
    finish_by: Deadline | None = None


class JobConfig(StrictModel):
    """One job: identity, schedule, params, limits, retry policy, alerts, presets, steps."""

    id: JobId = Field(title="Job ID", description=(
        "1 to 64 characters from A-Z a-z 0-9 _ -, e.g. nightly-sales."))
    description: str = Field("", description="One line saying what the job does.")
    tags: list[Identifier] = Field(default_factory=list, description=(
        "Words to find and group jobs by, e.g. sales."))
    schedule: CronSchedule | None = Field(None, description=(
        "When the job runs, as cron: minute hour day month weekday (0 = Monday), e.g. "
        "0 2 * * * for every day at 02:00. Empty: only run by hand or by another job."))
    timezone: Timezone | None = Field(None, description=(
        "The zone the schedule is read in, e.g. Europe/Paris (default: the server's)."))
    enabled: bool = Field(True, description=(
        "A disabled job is not scheduled; it can still be run by hand."))
    params: ParamMap = Field(default_factory=dict, description=(
        "Values the steps read as ${params.NAME}, one per line, e.g. "
        "period = \"${month.previous}\"."))
    log_level: LogLevel = Field("INFO", description="How much the runs log.")
    timeout: Duration = Field(timedelta(hours=24), description=(
        "A run still going after this is stopped, e.g. 2h."))
    priority: int = Field(0, ge=-1_000_000, le=1_000_000, description=(
        "Higher runs first when runs wait for the same workers or resources, e.g. 10."))
    max_concurrency: int = Field(1, ge=1, le=10_000, description=(
        "How many runs of this job may go at once."))
    on_overlap: Literal["skip", "queue"] = Field("skip", description=(
        "When a fire comes while the job already runs its maximum: skip it or queue it."))
    on_missed: Literal["skip", "run_latest", "run_all"] = Field("skip", description=(
        "Fires missed while the scheduler was down: skip them, run the latest once, or "
        "run each."))
    missed_grace: Duration = Field(timedelta(seconds=60), description=(
        "A fire this late still runs as if on time, e.g. 5m."))
    catchup_max: int = Field(10, ge=0, le=10_000, description=(
        "The most missed fires run after a restart with run_all."))
    windows: list[WindowSpec] = Field(default_factory=list, description=(
        "When runs may start, e.g. Mon-Fri 08:00-18:00; a fire outside waits for the next "
        "window."))
    calendar: CalendarName = Field(None, description=(
        "A business calendar of cadenza.toml the schedule follows, e.g. france."))
    days: Literal["all", "business"] = Field("all", description=(
        "business: fire only on the calendar's working days (make-up working days "
        "included); a fire on a holiday is recorded as skipped, with the holiday's name."))
    shift: Literal["skip", "next", "previous"] = Field("skip", description=(
        "A fire on a day off (with days = business): skip it, or move it to the next or "
        "the previous working day."))
    business_day: BusinessDay | None = Field(None, description=(
        "Fire only on the N-th working day of the month, e.g. 3; -1 is the last. The "
        "schedule gives the time, with * for the day of month and the day of week."))
    start_by: Deadline | None = Field(None, description=(
        "Alert (late) when a scheduled run has not started by then: a time of day like "
        "07:00, or a time after the scheduled one like 2h."))
    finish_by: Deadline | None = Field(None, description=(
        "Alert (late) when a scheduled run is still running then: a time of day like "
        "07:00, or a time after the scheduled one like 4h."))
    jitter: Duration = Field(timedelta(0), description=(
        "A random delay up to this before each scheduled run, e.g. 5m, to spread load."))
    budget_per_hour: int = Field(0, ge=0, le=1_000_000, description=(
        "The most runs started in any hour (0: no limit)."))
    requires: PoolNeeds = Field(default_factory=dict, description=(
        "Resource pools a run leases before it starts, one per line: pool = count, e.g. "
        "egress = 1."))
    retry: RetryPolicy = Field(default_factory=RetryPolicy, title="Retry", description=(
        "How a failed step is tried again; a step may override any of these."))
    alerts: Alerts = Field(default_factory=Alerts, description=(
        "Who is told when a run fails or runs long, without any notification rule."))
    presets: dict[Identifier, Preset] = Field(default_factory=dict, description=(
        "Named sets of run values, each with an optional schedule of its own, e.g. "
        "month-end = { schedule = \"0 6 1 * *\", params = { period = \"last\" } }."))
    steps: Steps = Field(default_factory=list, description=(
        "What a run does, in order."))

    def step(self, name: str) -> StepConfig | None:
        """The step called ``name``, or None."""
        return next((s for s in self.steps if s.name == name), None)

    def retry_for(self, step: StepConfig) -> RetryPolicy:
        """The retry policy of ``step``: its own keys over the job's."""
        return step.retry.merged_over(self.retry) if step.retry else self.retry
