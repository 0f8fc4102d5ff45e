"""A request to run a job now (CLI ``cadenza run``, later the API's ``POST /runs``).

A :class:`RunRequest` is checked against the job (:func:`check_request`: unknown preset,
step, parameter or log level are usage errors, each message listing what exists; so is a
parameter or step argument whose value does not convert to the type of its declared
default, :func:`typed_params`; a step
arg that names no setting or argument of its step, or a value its step's config refuses, is
one too: see :mod:`cadenza.executor.plan`) and then
stored with the run as its ``overrides``, in the same shape as a preset's scheduled fire
(see :func:`cadenza.scheduler.schedules.preset_overrides`)::

    {"preset": NAME | None, "params": {...}, "step_args": {STEP: {...}},
     "disabled_steps": [...], "log_level": LEVEL | None}

The preset's values are copied in when the run is created, with the request's own values on
top (later wins): the run does what was asked at that moment even if the preset is edited
while it waits in the queue. The executor reads nothing else of the preset but its zone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cadenza.config.schema_jobs import JobConfig
from cadenza.domain.params import ParamTypeError, convert, convert_all, merge
from cadenza.executor.plan import check_step_args, split_step_args
from cadenza.steps.registry import registry
from cadenza.store.boundary import NewRun

RUN_LOG_LEVELS = ("WARNING", "INFO", "DEBUG")


class RequestError(ValueError):
    """The request does not fit the job (a usage error: the CLI exits 2)."""


@dataclass(frozen=True)
class RunRequest:
    """What a person asks for when running a job: parameter values (``-p``), a preset, step
    arguments (``--arg STEP.k=v``), steps to skip (``--disable``) and a log level."""

    params: Mapping[str, Any] = field(default_factory=dict)
    preset: str | None = None
    step_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    disabled_steps: Sequence[str] = ()
    log_level: str | None = None
    replayed: bool = False
    """A recorded run's request again: its step args (a preset's among them) were accepted
    when it was created, so only their steps are checked."""


def _known(names: Sequence[str]) -> str:
    return ", ".join(names) or "none"


def check_request(job: JobConfig, request: RunRequest) -> None:
    """Raise :class:`RequestError` naming every problem of ``request`` for ``job``."""
    problems: list[str] = []
    steps = [step.name for step in job.steps]
    declared = sorted(job.params)
    if request.preset is not None and request.preset not in job.presets:
        problems.append(f"job {job.id!r} has no preset {request.preset!r} "
                        f"(presets: {_known(list(job.presets))})")
    for name in request.params:
        if name not in job.params:
            problems.append(f"parameter {name!r} is not declared in job {job.id!r}'s params "
                            f"(declared: {_known(declared)})")
    preset = job.presets.get(request.preset) if request.preset is not None else None
    problems += typed_params(job, request)[1]
    for step, args in request.step_args.items():
        config = job.step(step)
        if config is None:
            problems.append(f"--arg: job {job.id!r} has no step {step!r} "
                            f"(steps: {_known(steps)})")
            continue
        if not request.replayed:
            below = preset.step_args.get(step) if preset is not None else None
            problems += check_step_args(job, config, args, registry().get(config.type), below)
        problems += typed_step_args(job, step, args)[1]
    for step in request.disabled_steps:
        if step not in steps:
            problems.append(f"--disable: job {job.id!r} has no step {step!r} "
                            f"(steps: {_known(steps)})")
    level = request.log_level
    if level is not None and level.upper() not in RUN_LOG_LEVELS:
        problems.append(f"unknown log level {level!r}; expected one of "
                        f"{', '.join(RUN_LOG_LEVELS)}")
    if problems:
        raise RequestError("; ".join(problems))


def typed_params(job: JobConfig, request: RunRequest) -> tuple[dict[str, Any], list[str]]:
    """The run's parameter values, the preset's with the request's on top, each converted
    to the type of the job's declared default (:func:`cadenza.domain.params.convert`); and
    the values that do not convert, each named with its parameter and expected type."""
    preset = job.presets.get(request.preset) if request.preset else None
    below, problems = convert_all(preset.params if preset is not None else {}, job.params)
    problems = [f"preset {request.preset}: {problem}" for problem in problems]
    given, wrong = convert_all(request.params, job.params)
    return merge(below, given), problems + wrong


def typed_step_args(job: JobConfig, step: str, args: Mapping[str, Any]
                    ) -> tuple[dict[str, Any], list[str]]:
    """A run's step args for ``step`` with each argument (a key of the step's ``op_kwargs``
    or of the job's ``params``) converted to the type of its declared default, the step's
    own first (an argument declared nowhere stays as given); settings are left to the
    step's config. And the values that do not convert."""
    config = job.step(step)
    if config is None:
        return dict(args), []
    _, arguments, _ = split_step_args(job, config, args)
    out = dict(args)
    problems: list[str] = []
    for key in arguments:
        default = config.op_kwargs[key] if key in config.op_kwargs else job.params.get(key)
        try:
            out[key] = convert(key, args[key], default, label=f"--arg {step}.{key}")
        except ParamTypeError as exc:
            problems.append(str(exc))
    return out, problems


def overrides_of(job: JobConfig, request: RunRequest) -> dict[str, Any]:
    """The run's ``overrides``: the preset's values (if any) with the request's on top,
    parameters and step arguments converted to their declared types."""
    preset = job.presets.get(request.preset) if request.preset else None
    step_args: dict[str, dict[str, Any]] = {}
    if preset is not None:
        for step, preset_args in preset.step_args.items():
            step_args[step] = typed_step_args(job, step, preset_args)[0]
    for step, run_args in request.step_args.items():
        step_args[step] = merge(step_args.get(step), typed_step_args(job, step, run_args)[0])
    disabled = list(preset.disabled_steps) if preset is not None else []
    disabled += [step for step in request.disabled_steps if step not in disabled]
    level = request.log_level or (preset.log_level if preset is not None else None)
    return {
        "preset": request.preset,
        "params": typed_params(job, request)[0],
        "step_args": step_args,
        "disabled_steps": disabled,
        "log_level": level.upper() if level else None,
    }


def new_run(
    job: JobConfig,
    request: RunRequest,
    trigger: str,
    *,
    now: datetime,
    actor: str = "system",
    priority: int | None = None,
) -> NewRun:
    """The QUEUED run to create for ``request`` (checked first).

    A manual run's scheduled time is its creation time ``now``: date tokens such as
    ``${month.current}`` mean the month in which the person asked for the run."""
    check_request(job, request)
    overrides = overrides_of(job, request)
    return NewRun(
        job_id=job.id,
        trigger=trigger,
        scheduled_for=now,
        params=dict(overrides["params"]),
        overrides=overrides,
        priority=job.priority if priority is None else priority,
        actor=actor,
    )


def parse_assignment(text: str, *, what: str = "-p") -> tuple[str, str]:
    """``"k=v"`` → ``("k", "v")``; :class:`RequestError` for anything else."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise RequestError(f"{what} {text!r}: expected NAME=VALUE")
    return key.strip(), value


def parse_step_assignment(text: str) -> tuple[str, str, str]:
    """``"STEP.k=v"`` → ``("STEP", "k", "v")``; :class:`RequestError` for anything else."""
    target, value = parse_assignment(text, what="--arg")
    step, dot, key = target.partition(".")
    if not dot or not step or not key:
        raise RequestError(f"--arg {text!r}: expected STEP.NAME=VALUE")
    return step, key, value


def request_from_cli(
    params: Sequence[str],
    args: Sequence[str],
    *,
    preset: str | None = None,
    disabled: Sequence[str] = (),
    log_level: str | None = None,
) -> RunRequest:
    """A :class:`RunRequest` from the CLI's repeated ``-p k=v`` and ``--arg STEP.k=v``
    (values are the texts given, converted to their parameters' types when the run is
    created; the last of repeated names wins)."""
    values: dict[str, Any] = {}
    for text in params:
        key, value = parse_assignment(text)
        values[key] = value
    step_args: dict[str, dict[str, Any]] = {}
    for text in args:
        step, key, value = parse_step_assignment(text)
        step_args.setdefault(step, {})[key] = value
    return RunRequest(
        params=values,
        preset=preset,
        step_args=step_args,
        disabled_steps=list(dict.fromkeys(disabled)),
        log_level=log_level,
    )
