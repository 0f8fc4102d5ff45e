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
    CronSchedule,
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



class Alerts(StrictModel):
    """Failure alerts without any rule: on FAILED or NEEDS_REVIEW (``on_failure``), and once
    when a run lasts longer than ``long_run``."""

    recipients: list[Recipient] = Field(default_factory=list)
    on_failure: bool = True
    long_run: Duration | None = None


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


class JobConfig(StrictModel):
    """One job: identity, schedule, params, limits, retry policy, alerts, presets, steps."""

    id: JobId
    description: str = ""
    tags: list[Identifier] = Field(default_factory=list)
    schedule: CronSchedule | None = None
    timezone: Timezone | None = None
    enabled: bool = True
    params: ParamMap = Field(default_factory=dict)
    log_level: LogLevel = "INFO"
    timeout: Duration = timedelta(hours=24)
    priority: int = Field(0, ge=-1_000_000, le=1_000_000)
    max_concurrency: int = Field(1, ge=1, le=10_000)
    on_overlap: Literal["skip", "queue"] = "skip"
    on_missed: Literal["skip", "run_latest", "run_all"] = "skip"
    missed_grace: Duration = timedelta(seconds=60)
    catchup_max: int = Field(10, ge=0, le=10_000)
    windows: list[WindowSpec] = Field(default_factory=list)
    jitter: Duration = timedelta(0)
    budget_per_hour: int = Field(0, ge=0, le=1_000_000)
    requires: PoolNeeds = Field(default_factory=dict)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    alerts: Alerts = Field(default_factory=Alerts)
    presets: dict[Identifier, Preset] = Field(default_factory=dict)
    steps: Steps = Field(default_factory=list)

    def step(self, name: str) -> StepConfig | None:
        """The step called ``name``, or None."""
        return next((s for s in self.steps if s.name == name), None)

    def retry_for(self, step: StepConfig) -> RetryPolicy:
        """The retry policy of ``step``: its own keys over the job's."""
        return step.retry.merged_over(self.retry) if step.retry else self.retry
