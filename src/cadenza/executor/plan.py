"""What a run will do: its resolved parameters, and each step's arguments and config
(SPEC §5), computed with :mod:`cadenza.domain.params` (no other token parser).

Precedence, later wins:

* the run's parameters: the job's ``params`` → the run's ``params`` (as created: a preset's
  values and the ``-p`` overrides) → ``overrides.params``; each value's ``${...}`` tokens are
  resolved against the run's facts and its dates;
* one step's parameters: the run's parameters → the step's ``op_kwargs`` →
  ``overrides.step_args[STEP]`` (a preset's step args, then ``--arg``), whose tokens are
  resolved with the step scope (``${params.X}`` sees the run's parameters and the step's own
  arguments, ``${steps.S.F}`` the outputs of earlier steps).

Dates (``${today}``, ``${month.previous}``...) come from the run's scheduled time (a manual
run's is its creation time) in the preset's zone, else the job's, else the server's.

A step's config is rendered with the step scope, every field except its type's
``raw_fields`` (``sql_query.query`` renders its tokens into bind parameters itself), then
validated again by its type's ``Config``: a value that no longer fits is a fatal error naming
the step and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import ValidationError

from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.errors import Fatal
from cadenza.domain.params import ParamError, Scope, merge, render
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType
from cadenza.store.records import RunRecord

_FIXED = ("name", "type", "op_kwargs")


class PlanError(Fatal):
    """The run's parameters or a step's config cannot be resolved (names the token)."""


@dataclass(frozen=True)
class RunPlan:
    """A run's resolved values: parameters, log level, disabled steps, step arguments."""

    job: JobConfig
    run: RunRecord
    params: dict[str, Any]
    log_level: str
    disabled: frozenset[str]
    step_args: dict[str, dict[str, Any]]
    timezone: str
    scheduled_for: datetime

    def scope(self, params: Mapping[str, Any] | None = None,
              steps: Mapping[str, Mapping[str, Any]] | None = None) -> Scope:
        """The token scope of this run (with step parameters and earlier outputs)."""
        return Scope(
            params=self.params if params is None else params,
            steps=steps or {},
            run_id=self.run.id,
            trigger=self.run.trigger,
            job_id=self.job.id,
            scheduled_for=self.scheduled_for,
            timezone=self.timezone,
        )

    def is_disabled(self, step: StepConfig) -> bool:
        """Disabled in jobs.toml (``enabled = false``) or by the run (``--disable``/preset)."""
        return not step.enabled or step.name in self.disabled


def plan_run(job: JobConfig, run: RunRecord, default_zone: ZoneInfo) -> RunPlan:
    """Resolve ``run``'s values for ``job``; :class:`PlanError` names the parameter and token."""
    overrides = run.overrides
    preset = job.presets.get(overrides.get("preset") or "")
    zone = (preset.timezone if preset is not None else None) or job.timezone or default_zone.key
    level = overrides.get("log_level") or job.log_level
    step_args = {
        str(step): dict(args)
        for step, args in (overrides.get("step_args") or {}).items()
        if isinstance(args, Mapping)
    }
    plan = RunPlan(
        job=job,
        run=run,
        params={},
        log_level=str(level).upper(),
        disabled=frozenset(str(s) for s in overrides.get("disabled_steps") or ()),
        step_args=step_args,
        timezone=zone,
        scheduled_for=run.scheduled_for or run.created_at,
    )
    raw = merge(job.params, run.params, overrides.get("params"))
    scope = plan.scope(params={})
    resolved: dict[str, Any] = {}
    for name, value in raw.items():
        try:
            resolved[name] = render(value, scope)
        except ParamError as exc:
            raise PlanError(f"parameter {name!r}: {exc}") from None
    plan.params.update(resolved)
    return plan


@dataclass(frozen=True)
class StepPlan:
    """One step, ready to run: its merged parameters, its own arguments (``op_kwargs`` and
    the run's step args, rendered) and its rendered, re-validated config."""

    params: dict[str, Any]
    args: dict[str, Any]
    config: StepConfig
    scope: Scope


class ConfigCache:
    """Each step config dumped once (to a JSON-mode dict), not once per run, with whether
    any of its rendered fields holds a ``${...}`` token at all."""

    def __init__(self) -> None:
        self._dumped: dict[int, tuple[StepConfig, dict[str, Any], bool]] = {}

    def dump(self, config: StepConfig, raw_fields: frozenset[str] = frozenset()
             ) -> tuple[dict[str, Any], bool]:
        """``config`` as the fields that were set, by alias, in JSON mode; and whether a
        field other than ``raw_fields`` holds a token."""
        hit = self._dumped.get(id(config))
        if hit is not None and hit[0] is config:
            return hit[1], hit[2]
        data = config.model_dump(mode="json", by_alias=True, exclude_unset=True)
        tokens = any(_has_token(v) for k, v in data.items()
                     if k not in raw_fields and k not in ("name", "type"))
        self._dumped[id(config)] = (config, data, tokens)
        return data, tokens


def _has_token(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(_has_token(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_token(v) for v in value)
    return False


def plan_step(
    plan: RunPlan,
    step: StepConfig,
    step_type: type[StepType],
    outputs: Mapping[str, Mapping[str, Any]],
    cache: ConfigCache,
) -> StepPlan:
    """Merge and render ``step``'s parameters and config (see the module docstring).

    :class:`PlanError` (fatal) names the step and the token or field at fault."""
    own = dict(step.op_kwargs)
    extra = plan.step_args.get(step.name, {})
    first = plan.scope(params=merge(plan.params, own, extra), steps=outputs)
    try:
        args = merge(render(own, first), render(extra, first))
    except ParamError as exc:
        raise PlanError(f"step {step.name!r}: op_kwargs: {exc}") from None
    params = merge(plan.params, args)
    scope = plan.scope(params=params, steps=outputs)
    data, tokens = cache.dump(step, step_type.raw_fields)
    if not tokens and args == step.op_kwargs:
        return StepPlan(params=params, args=args, config=step, scope=scope)  # as validated
    rendered: dict[str, Any] = {}
    for key, value in data.items():
        if key in _FIXED or key in step_type.raw_fields:
            rendered[key] = value
            continue
        try:
            rendered[key] = render(value, scope)
        except ParamError as exc:
            raise PlanError(f"step {step.name!r}: {key}: {exc}") from None
    rendered["op_kwargs"] = args
    try:
        config = step_type.Config.model_validate(rendered)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'config'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise PlanError(f"step {step.name!r}: after substitution, {problems}") from None
    return StepPlan(params=params, args=args, config=config, scope=scope)
