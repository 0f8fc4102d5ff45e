"""Loading a home: ``cadenza.toml`` and ``jobs.toml``, validated together.

:func:`load_home` returns the validated configuration or raises
:class:`~cadenza.domain.errors.ConfigError` carrying every problem of both files
(warnings included); :func:`validate_home` only lists the problems. Nothing is applied
partially: a configuration with one error is refused whole.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from cadenza.config.checks_server import check_server_files
from cadenza.config.checks_settings import check_settings, plaintext_secrets
from cadenza.config.crossref import (
    Catalog,
    JobChecker,
    catalog_of,
    check_call_cycles,
    check_rule_targets,
)
from cadenza.config.problems import KeyPath, Problem, Reporter, has_errors, sort_problems
from cadenza.config.reader import ParsedFile, parse_bytes, read_file
from cadenza.config.schema_jobs import JobConfig
from cadenza.config.schema_settings import Settings
from cadenza.config.substitute import SecretResolver, Substitution, no_secrets
from cadenza.config.types import ID_EXPECTED, ID_PATTERN
from cadenza.config.validation import data_path, raw_table, validate_model
from cadenza.domain.errors import ConfigError
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType, registry, registry_errors

SETTINGS_FILE = "cadenza.toml"
JOBS_FILE = "jobs.toml"
FILES = (SETTINGS_FILE, JOBS_FILE)


@dataclass(frozen=True)
class LoadedConfig:
    """A valid configuration: settings, jobs in file order, the warnings, and the values
    that came from secrets (register them for redaction)."""

    home: Path
    settings: Settings
    jobs: dict[str, JobConfig]
    warnings: list[Problem] = field(default_factory=list)
    secret_values: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class LoadedSettings:
    """A valid ``cadenza.toml`` alone, for what needs only the settings and the store
    (reading history): the settings, the problems of ``jobs.toml`` (which did not stop the
    load), and the values that came from secrets (register them for redaction)."""

    home: Path
    settings: Settings
    jobs_problems: list[Problem] = field(default_factory=list)
    secret_values: set[str] = field(default_factory=set)

    @property
    def jobs_errors(self) -> int:
        """How many errors ``jobs.toml`` has (0: the whole configuration would load)."""
        return sum(1 for p in self.jobs_problems if p.is_error)


@dataclass
class _Outcome:
    settings: Settings | None
    jobs: dict[str, JobConfig]
    problems: list[Problem]
    secret_values: set[str]


def load_home(home: Path, *, resolve_secret: SecretResolver = no_secrets,
              environ: Mapping[str, str] = os.environ) -> LoadedConfig:
    """Load and validate both files of ``home``.

    Raises :class:`ConfigError` whose ``problems`` are every problem of both files
    (errors and warnings, sorted by file, line and column) when any error exists.
    """
    home = Path(home).resolve()
    outcome = _check(home, resolve_secret=resolve_secret, environ=environ)
    if outcome.settings is None or has_errors(outcome.problems):
        raise ConfigError([*outcome.problems])
    return LoadedConfig(home, outcome.settings, outcome.jobs,
                        [p for p in outcome.problems if not p.is_error], outcome.secret_values)


def load_settings(home: Path, *, resolve_secret: SecretResolver = no_secrets,
                  environ: Mapping[str, str] = os.environ) -> LoadedSettings:
    """Load and validate ``cadenza.toml`` of ``home``; ``jobs.toml`` may be invalid.

    Raises :class:`ConfigError` with the problems of ``cadenza.toml`` when it has an error;
    the problems of ``jobs.toml`` come back in ``jobs_problems``.
    """
    home = Path(home).resolve()
    outcome = _check(home, resolve_secret=resolve_secret, environ=environ)
    own = [p for p in outcome.problems if p.file == SETTINGS_FILE]
    if outcome.settings is None or has_errors(own):
        raise ConfigError([*own])
    return LoadedSettings(home, outcome.settings,
                          [p for p in outcome.problems if p.file == JOBS_FILE],
                          outcome.secret_values)


def validate_home(home: Path, *, resolve_secret: SecretResolver = no_secrets,
                  environ: Mapping[str, str] = os.environ) -> list[Problem]:
    """Every problem (errors and warnings) of both files of ``home``; never raises for a
    bad configuration."""
    return _check(Path(home).resolve(), resolve_secret=resolve_secret, environ=environ).problems


def validate_jobs_text(home: Path, text: str, *, resolve_secret: SecretResolver = no_secrets,
                       environ: Mapping[str, str] = os.environ) -> list[Problem]:
    """The problems of ``text`` as the new ``jobs.toml`` of ``home`` (checked against the
    current cadenza.toml). Use it as ``write_document``'s ``validate``."""
    outcome = _check(Path(home).resolve(), jobs_text=text, resolve_secret=resolve_secret,
                     environ=environ)
    return [p for p in outcome.problems if p.file == JOBS_FILE]


def validate_settings_text(home: Path, text: str, *,
                           resolve_secret: SecretResolver = no_secrets,
                           environ: Mapping[str, str] = os.environ) -> list[Problem]:
    """The problems of ``text`` as the new ``cadenza.toml`` of ``home``, plus the problems
    it would cause in the current jobs.toml (a removed connection that a job uses)."""
    home = Path(home).resolve()
    before = _check(home, resolve_secret=resolve_secret, environ=environ).problems
    after = _check(home, settings_text=text, resolve_secret=resolve_secret,
                   environ=environ).problems
    old = {(p.line, p.col, p.message) for p in before if p.file == JOBS_FILE}
    return [p for p in after
            if p.file == SETTINGS_FILE or (p.line, p.col, p.message) not in old]


def _parse(home: Path, name: str, text: str | None) -> ParsedFile:
    if text is None:
        return read_file(home / name, name)
    return parse_bytes(text.encode("utf-8", errors="surrogatepass"), name)


def _check(home: Path, *, settings_text: str | None = None, jobs_text: str | None = None,
           resolve_secret: SecretResolver, environ: Mapping[str, str]) -> _Outcome:
    settings_file = _parse(home, SETTINGS_FILE, settings_text)
    jobs_file = _parse(home, JOBS_FILE, jobs_text)
    substitution = Substitution(settings_file.reporter, resolve_secret, environ)
    settings = _settings(settings_file, substitution, home)
    catalog = catalog_of(settings_file.data, home) if settings_file.data is not None \
        else Catalog()
    jobs = _jobs(jobs_file, catalog, home)
    if settings_file.data is not None and jobs_file.data is not None:
        check_rule_targets(settings_file.data, raw_table(jobs_file.data.get("jobs")),
                           settings_file.reporter)
    problems = sort_problems([*settings_file.problems, *jobs_file.problems], FILES)
    return _Outcome(settings, jobs, problems, substitution.secret_values)


def _settings(parsed: ParsedFile, substitution: Substitution, home: Path) -> Settings | None:
    if parsed.data is None:
        return None
    report = parsed.reporter
    validate_model(Settings, parsed.data, report)
    check_settings(parsed.data, report)
    resolved = substitution.resolve(parsed.data)
    check_server_files(resolved, home, report)
    if report.failed:
        return None
    try:
        return Settings.model_validate(resolved)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            path, _ = data_path(tuple(error["loc"]), resolved)
            report.error(path, "this value is invalid once its ${env...}/${secret...} tokens "
                         "are substituted; check the variable or secret (its value is not "
                         "shown)")
        return None


def _jobs(parsed: ParsedFile, catalog: Catalog, home: Path) -> dict[str, JobConfig]:
    data = parsed.data
    if data is None:
        return {}
    report = parsed.reporter
    for key in data:
        if key != "jobs":
            report.error((key,), f"unknown key {key!r}; allowed keys: jobs (each job is a "
                         "[jobs.ID] table)", at="key")
    raw_jobs = data.get("jobs", {})
    if not isinstance(raw_jobs, dict):
        report.error(("jobs",), "expected a table of jobs ([jobs.ID] tables)")
        return {}
    plaintext_secrets(data, (), report, JOBS_FILE)
    step_types = registry()
    for message in registry_errors():
        report.at(1, 1, message, "warning")
    checker = JobChecker(raw_jobs, catalog, report, home, step_types)
    folded: dict[str, str] = {}
    out: dict[str, JobConfig] = {}
    for job_id, raw in raw_jobs.items():
        at: KeyPath = ("jobs", job_id)
        usable = _check_id(job_id, at, folded, report)
        if not isinstance(raw, dict):
            report.error(at, "expected a table: [jobs.ID] with the job's keys")
            continue
        if "id" in raw:
            report.error((*at, "id"), "the job's id is its table name ([jobs.ID]); remove "
                         "this key", at="key")
            usable = False
        fields = {k: v for k, v in raw.items() if k not in ("steps", "id")}
        job = validate_model(JobConfig, fields, report, at,
                             id=job_id if usable else "invalid-id")
        steps = _steps(raw.get("steps"), at, report, step_types)
        checker.check(job_id, raw, JobConfig)
        if job is not None and usable and steps is not None:
            out[job_id] = job.model_copy(update={"steps": steps})
    check_call_cycles(raw_jobs, report)
    return out


def _check_id(job_id: str, at: KeyPath, folded: dict[str, str], report: Reporter) -> bool:
    usable = True
    if not ID_PATTERN.fullmatch(job_id):
        report.error(at, f"invalid job id {job_id!r}: {ID_EXPECTED}", at="key")
        usable = False
    key = job_id.casefold()
    if key in folded:
        line = report.position(("jobs", folded[key]), "key")[0]
        report.error(at, f"job id {job_id!r} differs only in case from {folded[key]!r} (line "
                     f"{line}); job ids must be unique ignoring case", at="key")
        usable = False
    folded.setdefault(key, job_id)
    return usable


def _steps(raw: object, at: KeyPath, report: Reporter,
           step_types: Mapping[str, type[StepType]]) -> list[StepConfig] | None:
    """The job's steps, each validated against its type; None when any is invalid."""
    if not isinstance(raw, list) or not raw:
        shown = "an array of tables" if raw is not None and not isinstance(raw, list) else "one"
        report.error((*at, "steps"), f"a job needs at least one step: expected {shown} "
                     "[[jobs.ID.steps]] with name and type", at="key" if raw else "parent")
        return None
    known = ", ".join(step_types)
    steps: list[StepConfig] = []
    ok = True
    for k, item in enumerate(raw):
        where: KeyPath = (*at, "steps", k)
        step_type = item.get("type") if isinstance(item, dict) else None
        if not isinstance(item, dict):
            report.error(where, "expected a table with at least name and type")
        elif "type" not in item:
            report.error((*where, "type"), f"missing required key 'type': expected one of "
                         f"{known}", at="parent")
        elif not isinstance(step_type, str) or step_type not in step_types:
            report.error((*where, "type"), f"unknown step type {step_type!r}: expected one "
                         f"of {known}")
        else:
            step = validate_model(step_types[step_type].Config, item, report, where)
            if step is not None:
                steps.append(step)
                continue
        ok = False
    return steps if ok else None
