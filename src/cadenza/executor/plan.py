"""What a run will do: its resolved parameters, and each step's arguments and config
(docs/configuration.md), computed with :mod:`cadenza.domain.params` (no other token parser).

Precedence, later wins:

* the run's parameters: the job's ``params`` → the run's ``params`` (as created: a preset's
  values and the ``-p`` overrides) → ``overrides.params``; each value's ``${...}`` tokens are
  resolved against the run's facts and its dates;
* one step's parameters: the run's parameters → the step's ``op_kwargs`` →
  ``overrides.step_args[STEP]`` (a preset's step args, then ``--arg``), whose tokens are
  resolved with the step scope (``${params.X}`` sees the run's parameters and the step's own
  arguments, ``${steps.S.F}`` the outputs of earlier steps).

Where a run's step arg goes (:func:`split_step_args`): every key of a ``python`` step is an
argument of its function. For the other types, a key of the step's ``op_kwargs`` or a job
parameter's name is an argument (the step's ``${params.KEY}``); else a key naming a field
of the type's config (``mode``, ``batch_size``, ``csv.delimiter`` for a nested table; not
the fields every step has, such as ``timeout``) sets that field for this run; any other key
is refused when the run is requested (:func:`check_step_args`) and, in a run created
before that check existed, kept as an argument.

Dates (``${today}``, ``${month.previous}``...) come from the run's scheduled time (a manual
run's is its creation time) in the preset's zone, else the job's, else the server's.

A step's config is rendered with the step scope, every field except its type's
``raw_fields`` (``sql_query.query`` renders its tokens into bind parameters itself), then
validated again by its type's ``Config``: a value that no longer fits is a fatal error naming
the step and the field. Fields set by step args are validated in lax mode (``"5000"`` is an
integer, ``"false"`` a boolean): a CLI value is always text.
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
from cadenza.domain.params import ParamError, Scope, as_json, merge, render
from cadenza.steps.base import StepConfig, is_run_tunable
from cadenza.steps.registry import StepType
from cadenza.store.records import RunRecord

_FIXED = ("name", "type", "op_kwargs")
_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Values of a step's ``op_kwargs`` that a run may share with the next one: rendering
copies the others (a list a step appends to must not grow in the job's config)."""
_COMMON = frozenset(StepConfig.model_fields)
_ARGUMENTS_ONLY = frozenset({"python"})
"""Step types whose step args are all arguments of the step's code (never its settings)."""


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
    defaults = {name: as_json(value) for name, value in job.params.items()}
    raw = merge(defaults, run.params, overrides.get("params"))
    if not raw:
        return plan
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
    settings, extra, unknown = split_step_args(plan.job, step,
                                               plan.step_args.get(step.name, {}))
    extra.update(unknown)  # a run created before its step args were checked: as before
    args: dict[str, Any] = {}
    data, tokens = cache.dump(step, step_type.raw_fields)
    if (own and not extra and not tokens and "op_kwargs" not in step_type.raw_fields
            and all(type(v) in _SCALARS for v in own.values())):
        args = own  # no token anywhere in the step, and nothing a step could change in place
    elif own or extra:  # (nothing to render: no scope to make for it)
        first = plan.scope(params=merge(plan.params, own, extra), steps=outputs)
        try:
            args = merge(render(own, first), render(extra, first))
        except ParamError as exc:
            raise PlanError(f"step {step.name!r}: op_kwargs: {exc}") from None
    params = merge(plan.params, args)
    scope = plan.scope(params=params, steps=outputs)
    if not tokens and not settings and args == step.op_kwargs:
        return StepPlan(params=params, args=args, config=step, scope=scope)  # as validated
    rendered: dict[str, Any] = {}
    for key, value in with_settings(data, settings).items():
        if key in _FIXED or key in step_type.raw_fields:
            rendered[key] = value
            continue
        try:
            rendered[key] = render(value, scope)
        except ParamError as exc:
            raise PlanError(f"step {step.name!r}: {key}: {exc}") from None
    rendered["op_kwargs"] = args
    try:
        config = step_type.Config.model_validate(rendered, strict=False if settings else None)
    except ValidationError as exc:
        raise PlanError(f"step {step.name!r}: after substitution, "
                        f"{_problems(exc)}") from None
    return StepPlan(params=params, args=args, config=config, scope=scope)


# --- step args that set a step's config ------------------------------------------------------

def settable_fields(config_type: type[StepConfig]) -> list[str]:
    """The config keys (by alias) of a step type that a run's step args may name: its own
    fields, not those every step has (some of them are then refused: :func:`locked`)."""
    return [field.alias or name for name, field in config_type.model_fields.items()
            if name not in _COMMON]


def split_step_args(job: JobConfig, step: StepConfig, args: Mapping[str, Any]
                    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A run's step args for ``step`` as (config settings, arguments, unknown keys); see
    the module docstring. A setting's key may be dotted (``csv.delimiter``)."""
    if not args:
        return {}, {}, {}
    if step.type in _ARGUMENTS_ONLY:
        return {}, dict(args), {}
    fields = set(settable_fields(type(step)))
    settings: dict[str, Any] = {}
    arguments: dict[str, Any] = {}
    unknown: dict[str, Any] = {}
    for key, value in args.items():
        if key in step.op_kwargs or key in job.params:
            arguments[key] = value  # as it always was: seen by ${params.KEY}
        elif key.split(".", 1)[0] in fields:
            settings[key] = value
        else:
            unknown[key] = value
    return settings, arguments, unknown


def with_settings(data: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the dumped config ``data`` with ``settings`` set (a dotted key sets a key
    of a nested table, made when missing); ``data`` itself is not changed."""
    out = dict(data)
    for key, value in settings.items():
        *parents, last = key.split(".")
        table = out
        for part in parents:
            inner = table.get(part)
            table[part] = dict(inner) if isinstance(inner, Mapping) else {}
            table = table[part]
        table[last] = value
    return out


def locked(step_type: type[StepType] | None, step: StepConfig,
           settings: Mapping[str, Any]) -> list[str]:
    """The settings that a run may not change: every field its step type does not mark
    run-tunable (:func:`cadenza.steps.base.is_run_tunable`), at any depth. What reads or
    writes a file, where data goes, whose credentials act and what code or SQL runs is never
    marked: running a job with parameters must not become editing it."""
    del step_type  # the rule is the config model's marks, nothing else
    return [key for key in settings if not is_run_tunable(type(step), key)]


_FILE_KEYS = frozenset({"path", "file", "template", "attach", "attachments", "output",
                        "output_dir"})
_DESTINATION_KEYS = frozenset({"to", "channel", "url", "connection", "table", "target",
                               "source", "via", "base", "job", "headers"})
_CODE_FIELDS = frozenset({"callable", "query", "isolation", "sections", "filter", "mapping"})


def refused_values(job: JobConfig, step_args: Mapping[str, Mapping[str, Any]]
                   ) -> list[tuple[str, str]]:
    """Every (step, field) of a run's ``step_args`` that a run may not set (:func:`locked`);
    steps the job does not have are left to the request's other checks."""
    out: list[tuple[str, str]] = []
    for name, args in step_args.items():
        step = job.step(name)
        if step is not None:
            settings, _, _ = split_step_args(job, step, args)
            out += [(name, key) for key in locked(None, step, settings)]
    return out


def refusal_reason(key: str) -> str:
    """Why a run may not set the config field ``key`` (a dotted key: its first part)."""
    first = key.split(".", 1)[0]
    if first in _FILE_KEYS:
        return "it chooses a file to read or write"
    if first in _DESTINATION_KEYS:
        return "it chooses where data goes or comes from"
    if first in _CODE_FIELDS:
        return "it chooses the code, SQL or data that runs"
    return "its step type does not mark it run-tunable"


def refusal(step: str, key: str) -> str:
    """The message of a refused run value: the step, the field and the rule."""
    return (f"step {step}: field {key} cannot be set by a run ({refusal_reason(key)}); "
            f"an editor can change it in jobs.toml")


def check_step_args(job: JobConfig, step: StepConfig, args: Mapping[str, Any],
                    step_type: type[StepType] | None = None,
                    below: Mapping[str, Any] | None = None) -> list[str]:
    """What is wrong with a run's step args ``args`` for ``step`` (``below``: a preset's
    step args under them): keys that are neither a setting nor an argument, settings a run
    may not change (:func:`locked`), and settings that do not fit the step's config (a
    value holding a ``${...}`` token is checked when the run starts). Each problem names
    the step and the key."""
    where = f"step {step.name!r} ({step.type})"
    settings, _arguments, unknown = split_step_args(job, step, args)
    problems: list[str] = []
    for key in unknown:
        own = ", ".join(step.op_kwargs) or "none"
        problems.append(f"--arg {step.name}.{key}: {where} has no setting or argument "
                        f"{key!r} (settings: {', '.join(settable_fields(type(step)))}; "
                        f"arguments (op_kwargs): {own})")
    for key in locked(step_type, step, settings):
        problems.append(refusal(step.name, key))
    if problems:
        return problems
    lower, _, _ = split_step_args(job, step, below or {})
    checked = {k: v for k, v in {**lower, **settings}.items() if not _has_token(v)}
    if not settings or not checked:
        return problems
    data = step.model_dump(mode="json", by_alias=True, exclude_unset=True)
    try:
        type(step).model_validate(with_settings(data, checked), strict=False)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in error["loc"])
            hit = next((k for k in settings if loc == k or loc.startswith(k + ".")
                        or k.startswith(loc + ".")), None) if loc else None
            name = hit if hit is not None else "{" + ",".join(settings) + "}"
            detail = f"{loc}: " if loc and loc != hit else ""
            problems.append(f"--arg {step.name}.{name}: {where}: {detail}{error['msg']}")
    return problems


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'config'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    )
