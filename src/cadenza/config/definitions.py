"""A job's definition as JSON values, and saving such a definition back without rewriting
what it does not change.

The definition (:func:`definition`) is what ``GET /api/jobs/{id}`` shows: every key of the
job and of each of its steps, those of the step's own type included (the ``type`` picks
the step's ``Config`` class, see :mod:`cadenza.steps.registry`), with their defaults,
written as in TOML (aliases such as an http step's ``json``, durations like ``"2h"``).

A definition says what a job means, not how jobs.toml spells it: a default the file leaves
out is shown, ``key = "id"`` is shown as ``["id"]``, a secret is shown redacted. So that an
editor saving what it loaded changes nothing, :func:`keep_written` gives back, for each key
whose value shows the same as the file's, the value as the file writes it (and leaves out
a default the file leaves out); only what changed is written as sent (a date the file
wrote as a TOML date stays one). Steps are matched by name, tables key by key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime, time
from typing import Any

from pydantic import ValidationError

from cadenza.config.schema_jobs import JobConfig
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import registry

_ABSENT = object()


def definition(job: JobConfig) -> dict[str, Any]:
    """Every key of ``job`` and of its steps as JSON values, by their TOML names; keys
    without a value (``None``) are left out."""
    return job.model_dump(mode="json", by_alias=True, exclude_none=True)


def table_definition(job_id: str, table: Mapping[str, Any]) -> dict[str, Any] | None:
    """The :func:`definition` of a job's table (plain TOML values, as written in
    ``[jobs.ID]``, or as sent by an editor), or None when the table or one of its steps is
    not valid (the configuration check then says why)."""
    fields = {k: v for k, v in table.items() if k != "steps"}
    fields.setdefault("id", job_id)
    raw_steps = table.get("steps", [])
    if not isinstance(raw_steps, Sequence) or isinstance(raw_steps, str):
        return None
    types = registry()
    steps: list[StepConfig] = []
    try:
        job = JobConfig.model_validate(fields)
        for raw in raw_steps:
            kind = raw.get("type") if isinstance(raw, Mapping) else None
            if not isinstance(kind, str) or kind not in types:
                return None
            steps.append(types[kind].Config.model_validate(raw))
    except ValidationError:
        return None
    return definition(job.model_copy(update={"steps": steps}))


def keep_written(written: Mapping[str, Any], shown: Mapping[str, Any] | None,
                 sent: Mapping[str, Any], sent_shown: Mapping[str, Any] | None,
                 ) -> dict[str, Any]:
    """The job table to write for ``sent``: for each of its keys whose definition
    (``sent_shown``) equals the file's as shown (``shown``: the definition of
    ``written``, redacted as it was shown), the file's own value, or nothing when the
    file leaves the key out; every other key as sent. Keys missing from ``sent`` are left
    out (a save replaces the job). Without both definitions (an invalid table), ``sent``
    is written as it is."""
    if shown is None or sent_shown is None:
        return dict(sent)
    out: dict[str, Any] = {}
    for key, value in sent.items():
        before, after = shown.get(key, _ABSENT), sent_shown.get(key, _ABSENT)
        old = written.get(key, _ABSENT)
        if before == after:
            if old is not _ABSENT:
                out[key] = old
        elif key == "steps" and _tables(old) and _tables(value) and _tables(before) \
                and _tables(after):
            out[key] = _keep_steps(old, before, value, after)
        elif isinstance(value, Mapping) and isinstance(old, Mapping) \
                and isinstance(before, Mapping) and isinstance(after, Mapping):
            out[key] = keep_written(old, before, value, after)
        else:
            out[key] = _as_written_type(old, value)
    return out


def _as_written_type(old: object, value: Any) -> Any:
    """``value``, a date or time again when the file wrote one and the definition (JSON,
    which has none) sends its ISO text: a date parameter stays a date."""
    if not isinstance(value, str):
        return value
    for kind in (datetime, date, time):  # datetime first: it is also a date
        if isinstance(old, kind):
            try:
                return kind.fromisoformat(value)
            except ValueError:
                return value
    return value


def _keep_steps(written: Sequence[Mapping[str, Any]], shown: Sequence[Mapping[str, Any]],
                sent: Sequence[Mapping[str, Any]], sent_shown: Sequence[Mapping[str, Any]],
                ) -> list[dict[str, Any]]:
    """Each sent step against the file's step of the same name (a renamed or new step is
    written as sent)."""
    by_name = {step.get("name"): (step, seen)
               for step, seen in zip(written, shown, strict=True)}
    out: list[dict[str, Any]] = []
    for step, seen in zip(sent, sent_shown, strict=True):
        match = by_name.get(step.get("name"))
        out.append(keep_written(match[0], match[1], step, seen) if match else dict(step))
    return out


def _tables(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) \
        and all(isinstance(v, Mapping) for v in value)
