"""Drafts of one job in the web editor: what its form is generated from, the job's TOML
table as text, and the problems a draft would have as the new ``jobs.toml``.

Operations (each takes the :class:`~cadenza.services.context.Services` it acts with)::

    job_schema() -> dict                       JSON schema of a job (JobConfig)
    step_schemas() -> dict[str, dict]          JSON schema of each registered step type
    reference_names(services) -> dict          connections/pools/jobs/channels by kind
    job_table(services, job_id) -> dict        the job's table as written (plain values)
    job_text(services, job_id) -> JobText      the job's lines of jobs.toml, comments kept
    table_text(job_id, table) -> str           a table as the writer would write it
    parse_job_text(job_id, text) -> dict       the table of ``[jobs.ID]`` in a TOML text
    splice_text(current, job_id, text, creating=...) -> (str, int)   jobs.toml with it
    check_table(services, job_id, table, creating=...) -> list[Problem]
    check_text(services, job_id, text, creating=...) -> list[LocatedProblem]

The schemas are pydantic's ``model_json_schema()`` of the config models, with two
additions the form needs: ``x-ref`` on a field naming something defined elsewhere
(``connection:sql``, ``pool``, ``job``, ``channel``: the names to pick from, and where a
secret lives — a job references a connection, never a secret's value), ``x-secret`` on
a key that looks like it holds a secret (the form asks for a ``${secret.NAME}`` reference)
and ``x-kind: duration`` on a duration (``"90m"``; pydantic's schema says nothing of it).
Problems are those of ``cadenza validate`` (:func:`cadenza.config.validate_jobs_text`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

from cadenza.services.errors import InvalidRequest, NotFound

if TYPE_CHECKING:
    from pydantic import BaseModel

    from cadenza.config.problems import Problem
    from cadenza.services.context import Services

_HEADER = re.compile(r"^\s*\[\[?\s*jobs\s*\.\s*(\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+)")


@dataclass(frozen=True)
class JobText:
    """A job's lines of jobs.toml (``first_line``: where they start, 1-based; 0 when the
    job is not in the file) and the hash of the file they were read from."""

    text: str
    first_line: int
    hash: str


@dataclass(frozen=True)
class LocatedProblem:
    """A problem of a TOML draft: the problem as ``cadenza validate`` words it, and its
    line and column within the draft (None when it lies elsewhere in jobs.toml)."""

    problem: Problem
    line: int | None
    col: int | None


# --- schemas -------------------------------------------------------------------------

@cache
def job_schema() -> dict[str, Any]:
    """The JSON schema of a job (pydantic's, with ``x-ref``/``x-secret`` marks)."""
    from cadenza.config.schema_jobs import JobConfig

    return _marked(JobConfig)


@cache
def step_schemas() -> dict[str, dict[str, Any]]:
    """The JSON schema of each registered step type's ``Config``, by type name (sorted):
    a step type added by a plugin gets its form from this without any UI code."""
    from cadenza.steps.registry import registry

    return {name: _marked(kind.Config) for name, kind in sorted(registry().items())}


def common_step_keys() -> tuple[str, ...]:
    """The keys every step has (name, type, enabled, timeout, retry, ...)."""
    from cadenza.steps.base import StepConfig

    return tuple(StepConfig.model_fields)


def _marked(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    _mark(model, schema, defs, set())
    return schema


def _mark(model: type[BaseModel], schema: dict[str, Any], defs: dict[str, Any],
          seen: set[str]) -> None:
    from pydantic import BaseModel

    from cadenza.audit import is_secret_key
    from cadenza.config.durations import format_duration
    from cadenza.config.types import Ref

    props = schema.get("properties", {})
    for key, info in model.model_fields.items():
        prop = props.get(key)
        if prop is None:
            continue
        refs = [m for m in info.metadata if isinstance(m, Ref)]
        refs += [m for a in get_args(info.annotation) for m in getattr(a, "__metadata__", ())
                 if isinstance(m, Ref)]
        if refs:
            prop["x-ref"] = refs[0].kind + (f":{refs[0].subtype}" if refs[0].subtype else "")
        if is_secret_key(key):
            prop["x-secret"] = True
        if isinstance(info.default, timedelta):
            prop["default"] = format_duration(info.default)
        if timedelta in (info.annotation, *get_args(info.annotation)):
            prop["x-kind"] = "duration"
        for inner in _models_in(info.annotation):
            if issubclass(inner, BaseModel) and inner.__name__ in defs \
                    and inner.__name__ not in seen:
                seen.add(inner.__name__)
                _mark(inner, defs[inner.__name__], defs, seen)


def _models_in(annotation: Any) -> list[type]:
    if isinstance(annotation, type):
        return [annotation]
    if get_origin(annotation) in (Union, list, dict) or type(annotation).__name__ == "UnionType":
        return [m for a in get_args(annotation) for m in _models_in(a)]
    return []


def reference_names(services: Services) -> dict[str, list[str]]:
    """The names a referencing field may take, by ``x-ref`` (``connection:sql``,
    ``connection``, ``pool``, ``pool:route``, ``job``, ``channel``). Empty lists when
    cadenza.toml does not load: the form still works, without suggestions."""
    names: dict[str, list[str]] = {"job": [], "channel": [], "pool": [], "connection": []}
    try:
        settings = services.settings().settings
    except Exception:  # a broken cadenza.toml: no suggestions, the validation says why
        return names
    for name, connection in settings.connections.items():
        names["connection"].append(name)
        names.setdefault(f"connection:{connection.type}", []).append(name)
    for name, pool in settings.pools.items():
        names["pool"].append(name)
        names.setdefault(f"pool:{getattr(pool, 'kind', '')}", []).append(name)
    names["channel"] = list(settings.channels)
    try:
        names["job"] = [job.id for job in services.jobs.list()]
    except Exception:  # jobs.toml is broken right now
        names["job"] = []
    return names


# --- the job as written --------------------------------------------------------------

def _document(services: Services) -> tuple[Any, str, str]:
    import tomlkit

    current = services.jobs.document()
    return tomlkit.parse(current.text), current.text, current.hash


def job_table(services: Services, job_id: str) -> dict[str, Any]:
    """The job's table as written in jobs.toml (plain values, defaults not filled in)."""
    doc, _, _ = _document(services)
    jobs = doc.get("jobs", {})
    if job_id not in jobs:
        raise NotFound(f"no job {job_id!r} in jobs.toml; known jobs: "
                       f"{', '.join(jobs) or '(none)'}")
    table: dict[str, Any] = jobs[job_id].unwrap()
    return table


def _span(lines: list[str], job_id: str) -> tuple[int, int] | None:
    """The 0-based [start, end) lines of the job's tables (without the comment lines that
    introduce the next job), or None when its tables have no header of their own."""
    start = end = None
    for number, line in enumerate(lines):
        match = _HEADER.match(line)
        if match is None:
            continue
        if match.group(1).strip("\"'") == job_id:
            start = number if start is None else start
            end = None
        elif start is not None and end is None:
            end = number
    if start is None:
        return None
    end = len(lines) if end is None else end
    while end > start + 1 and (not lines[end - 1].strip()
                               or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return start, end


def job_text(services: Services, job_id: str) -> JobText:
    """The job's lines as they stand in jobs.toml (its comments too); when its tables
    cannot be cut out of the file, the table as the writer would write it."""
    _, text, digest = _document(services)
    lines = text.splitlines(keepends=True)
    span = _span(lines, job_id)
    if span is None:
        return JobText(table_text(job_id, job_table(services, job_id)), 0, digest)
    body = "".join(lines[span[0]:span[1]])
    return JobText(body if body.endswith("\n") else body + "\n", span[0] + 1, digest)


def table_text(job_id: str, table: Mapping[str, Any]) -> str:
    """``[jobs.ID]`` with ``table`` as the config writer writes it (a new job's text)."""
    import tomlkit

    from cadenza.config.tomledit import set_job

    doc = tomlkit.document()
    try:
        set_job(doc, job_id, table)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    return doc.as_string().lstrip("\n")


def parse_job_text(job_id: str, text: str) -> dict[str, Any]:
    """The table of ``[jobs.ID]`` written in ``text``: InvalidRequest when the text is not
    TOML or defines anything else than that one job."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"the TOML does not parse: {exc}") from None
    jobs = data.get("jobs")
    if set(data) != {"jobs"} or not isinstance(jobs, dict) or list(jobs) != [job_id]:
        found = ", ".join(f"jobs.{k}" for k in jobs) if isinstance(jobs, dict) else ""
        raise InvalidRequest(f"the text must define the one table [jobs.{job_id}] (and its "
                             f"sub-tables), found: {found or ', '.join(data) or 'nothing'}")
    table: dict[str, Any] = jobs[job_id]
    return table


# --- checks --------------------------------------------------------------------------

def _validate(services: Services, text: str) -> list[Problem]:
    from cadenza.config import validate_jobs_text

    home = services.home
    services.require_home()
    return validate_jobs_text(home.path, text, resolve_secret=home.secrets.get)


def _ours(problem: Problem, job_id: str) -> bool:
    path = problem.path
    return not path or path == "jobs" or path == f"jobs.{job_id}" \
        or path.startswith((f"jobs.{job_id}.", f"jobs.{job_id}["))


def check_table(services: Services, job_id: str, table: Mapping[str, Any], *,
                creating: bool) -> list[Problem]:
    """The problems (errors and warnings) that saving ``table`` as the job ``job_id`` would
    have, in the words of ``cadenza validate``; InvalidRequest for an id that cannot be a
    job's, or (``creating``) the id of a job that exists."""
    from cadenza.config.tomledit import set_job

    doc, _, _ = _document(services)
    if creating and job_id in doc.get("jobs", {}):
        raise InvalidRequest(f"job {job_id!r} exists; edit it instead")
    try:
        set_job(doc, job_id, table)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    return [p for p in _validate(services, doc.as_string()) if _ours(p, job_id)]


def splice_text(current: str, job_id: str, text: str, *, creating: bool) -> tuple[str, int]:
    """``current`` (jobs.toml) with the job's lines replaced by ``text`` as typed, its
    comments included (appended after a blank line when ``creating``); and the line of
    the new file where ``text`` starts (1-based). InvalidRequest when ``creating`` a job
    that exists; NotFound when the job has no ``[jobs.ID]`` table of its own to replace."""
    lines = current.splitlines(keepends=True)
    draft = text if text.endswith("\n") else text + "\n"
    if creating:
        if job_id in tomllib.loads(current).get("jobs", {}):
            raise InvalidRequest(f"job {job_id!r} exists; edit it instead")
        before = current if current.endswith("\n") or not current else current + "\n"
        return before + "\n" + draft, len(before.splitlines()) + 2
    span = _span(lines, job_id)
    if span is None:
        raise NotFound(f"no job {job_id!r} with its own [jobs.{job_id}] table in jobs.toml")
    return "".join(lines[:span[0]]) + draft + "".join(lines[span[1]:]), span[0] + 1


def check_text(services: Services, job_id: str, text: str, *,
               creating: bool) -> list[LocatedProblem]:
    """The problems of ``text`` (the job's TOML) put in place of the job in jobs.toml
    (appended when ``creating``), each located in ``text`` where it lies there."""
    _, current, _ = _document(services)
    candidate, start = splice_text(current, job_id, text, creating=creating)
    count = len(text.splitlines()) or 1
    out: list[LocatedProblem] = []
    for problem in _validate(services, candidate):
        inside = start <= problem.line < start + count
        if inside or _ours(problem, job_id):
            out.append(LocatedProblem(problem, problem.line - start + 1 if inside else None,
                                      problem.col if inside else None))
    return out


@cache
def step_base_schema() -> dict[str, Any]:
    """The JSON schema of the keys every step has (for a step whose type is unknown)."""
    from cadenza.steps.base import StepConfig

    return _marked(StepConfig)
