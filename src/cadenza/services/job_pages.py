"""What the jobs pages show and do (docs/ui.md "Pages: jobs"): the catalogue, a job's page,
the "Run with parameters" form, the enable switch and "Save as preset".

Operations::

    catalogue(q=None, tags=()) -> Catalogue             one row per job, few queries
    job_page(job_id) -> JobPage                         NotFound for an unknown job
    run_form(job_id, preset=None) -> RunForm            values and where they come from
    submitted(form, fields) -> RunRequestInput          the run a filled form asks for
    preset_values(form, fields) -> dict                 what "Save as preset" writes
    set_enabled(job_id, enabled) -> JobsFile            jobs.toml, comments kept

Reads go through the store's bulk queries (:mod:`cadenza.store.recent`): the catalogue's
strips are one statement whatever the number of jobs, a job page's runs × steps grid one
more. Writes go through :class:`~cadenza.services.jobs.JobService` (validated, atomic,
comments and order kept, a stale base refused).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cadenza.domain.cron_words import describe
from cadenza.domain.params import ParamTypeError, as_json, convert_to, param_type
from cadenza.domain.states import RunState
from cadenza.services.errors import InvalidRequest
from cadenza.services.history import RunView
from cadenza.services.runs import RunRequestInput

if TYPE_CHECKING:
    from cadenza.config import JobConfig
    from cadenza.scheduler.fires import UpcomingFire
    from cadenza.services.context import Services
    from cadenza.services.jobs import JobsFile, JobSummary, ScheduleView
    from cadenza.store.recent import RecentRun

STRIP_RUNS = 14
"""Runs in a catalogue row's strip."""
GRID_RUNS = 30
"""Runs (columns) of a job page's grid."""
CHART_RUNS = 100
"""Runs behind a job page's charts."""
CHART_DAYS = 14
"""Days of the success chart (ending on the day of the last finished run)."""
DAY = 86400
LOG_LEVELS = ("WARNING", "INFO", "DEBUG")
DEFAULT_LOG_LEVEL = "INFO"


@dataclass(frozen=True)
class CatalogueRow:
    """One job of the catalogue: its summary, schedule in words, next fire, last runs."""

    job: JobSummary
    schedule_words: str | None
    next_fire: UpcomingFire | None
    runs: tuple[RecentRun, ...]
    """Newest first, at most :data:`STRIP_RUNS`."""

    @property
    def last(self) -> RecentRun | None:
        return self.runs[0] if self.runs else None

    @property
    def strip(self) -> tuple[RecentRun, ...]:
        """The runs oldest first (the strip reads left to right, the newest at the end)."""
        return tuple(reversed(self.runs))


@dataclass(frozen=True)
class Catalogue:
    """The rows that match, every tag of the catalogue, and how many jobs there are."""

    rows: tuple[CatalogueRow, ...]
    tags: tuple[str, ...]
    total: int
    q: str
    selected: tuple[str, ...]


@dataclass(frozen=True)
class GridCell:
    """One step of one run: its last attempt's state (None: the step did not run)."""

    run_id: str
    state: str | None
    attempts: int


@dataclass(frozen=True)
class PresetView:
    """A preset of a job with its schedule in words."""

    name: str
    description: str
    schedule: str | None
    schedule_words: str | None
    enabled: bool
    values: dict[str, Any]


@dataclass(frozen=True)
class JobPage:
    """Everything a job page shows."""

    job: JobConfig
    summary: JobSummary
    toml: str
    hash: str
    schedules: tuple[tuple[ScheduleView, str], ...]
    fires: tuple[UpcomingFire, ...]
    presets: tuple[PresetView, ...]
    runs: tuple[RunView, ...]
    """The grid's runs, oldest first."""
    grid: tuple[tuple[str, tuple[GridCell, ...]], ...]
    """One row per step: its name and one cell per run of :attr:`runs`."""
    duration_chart: dict[str, Any] | None
    success_chart: dict[str, Any] | None


@dataclass(frozen=True)
class FormValue:
    """One value of the "Run with parameters" form: what it is now and where it comes from
    (``job``: jobs.toml, ``preset``: the picked preset, ``default``: nobody set it)."""

    name: str
    text: str
    origin: str
    typed: bool = False
    """The value is not a string (a number, a list ...): it is read back as JSON."""
    kind: str = ""
    """A parameter's type (:func:`cadenza.domain.params.param_type`: integer, date ...),
    shown next to its name; its value is converted to it."""
    error: str | None = None
    """Why the value given for it was refused (a form sent back to be corrected)."""


class FormProblems(InvalidRequest):
    """Values of the form that do not convert to their parameters' types: ``fields`` maps
    each field's name (``param:NAME``) to its problem; the message lists them all."""

    def __init__(self, fields: Mapping[str, str]) -> None:
        super().__init__("; ".join(fields.values()))
        self.fields = dict(fields)


@dataclass(frozen=True)
class StepForm:
    """One step of the form: whether it runs, and its arguments."""

    name: str
    type: str
    enabled: bool
    origin: str
    args: tuple[FormValue, ...]


@dataclass(frozen=True)
class RunForm:
    """The "Run with parameters" form of a job, from the job and the picked preset."""

    job_id: str
    description: str
    preset: str | None
    presets: tuple[str, ...]
    params: tuple[FormValue, ...]
    steps: tuple[StepForm, ...]
    log_level: FormValue
    levels: tuple[str, ...] = LOG_LEVELS
    hash: str = ""
    problems: tuple[str, ...] = field(default_factory=tuple)


def _text(value: Any) -> tuple[str, bool]:
    if isinstance(value, str):
        return value, False
    return json.dumps(value, ensure_ascii=False), True


def _read(text: str, typed: bool) -> Any:
    if not typed:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _param(value: FormValue, text: str) -> Any:
    """The text of a parameter's field as its typed value (a value the job's own form
    shows that does not convert, such as a preset's ``${...}`` token, is kept as it is)."""
    if value.kind in ("", "string", "any"):
        return text
    if text == value.text:
        try:
            return convert_to(value.name, text, value.kind)
        except ParamTypeError:
            return _read(text, value.typed)
    return convert_to(value.name, text, value.kind)


def refilled(form: RunForm, fields: Mapping[str, Any], problems: Mapping[str, str]) -> RunForm:
    """``form`` with the values a person submitted, and each refused value's problem under
    its field (the form sent back to be corrected)."""
    params = tuple(replace(p, text=str(fields.get(f"param:{p.name}", p.text)),
                           error=problems.get(f"param:{p.name}"))
                   for p in form.params)
    return replace(form, params=params)


def matches(job: JobSummary, q: str, tags: Sequence[str]) -> bool:
    """Whether ``job`` is found by the search ``q`` (in its id, description, tags and steps,
    any case) and carries every tag of ``tags``."""
    if any(tag not in job.tags for tag in tags):
        return False
    if not q:
        return True
    needle = q.casefold()
    haystack = [job.id, job.description or "", *job.tags, *job.steps]
    return any(needle in part.casefold() for part in haystack)


def job_toml(text: str, job_id: str) -> str:
    """The part of jobs.toml that defines ``job_id``: its tables (with the comment lines
    just above its first header), as written; empty when not found."""
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    own = f"jobs.{job_id}"
    lines = text.splitlines()
    start: int | None = None
    end = len(lines)
    for index, line in enumerate(lines):
        found = header.match(line)
        if found is None:
            continue
        key = found.group(1).replace('"', "").replace("'", "").replace(" ", "")
        mine = key == own or key.startswith(own + ".")
        if mine and start is None:
            start = index
        elif not mine and start is not None:
            end = index
            break
    if start is None:
        return ""
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    chunk = lines[start:end]
    if end < len(lines):  # the comments above the next header introduce the next job
        while chunk and (not chunk[-1].strip() or chunk[-1].lstrip().startswith("#")):
            chunk.pop()
    while chunk and not chunk[-1].strip():
        chunk.pop()
    return "\n".join(chunk) + "\n"


def schedule_in_words(schedule: str | None, timezone: str | None) -> str | None:
    """A job's schedule in words with the zone it fires in (the job's, else the server's),
    e.g. ``every day at 02:00, Europe/Paris``; None without a schedule."""
    if not schedule:
        return None
    from cadenza.scheduler.schedules import server_zone

    return describe(schedule, timezone or server_zone().key)


def _epoch(value: datetime) -> int:
    moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    return int(moment.timestamp())


def charts(runs: Sequence[RunView]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The ``data-chart`` specs of a job page (static/cadenza.js draws them): the duration
    of each finished run (from two runs on), and the runs that succeeded or failed per day
    over :data:`CHART_DAYS` days."""
    timed = sorted((r for r in runs if r.started_at and r.finished_at),
                   key=lambda r: r.started_at or r.finished_at)  # type: ignore[arg-type,return-value]
    duration = None
    if len(timed) >= 2:
        duration = {"x": [_epoch(r.started_at) for r in timed],  # type: ignore[arg-type]
                    "series": [{"label": "seconds", "values": [
                        round((r.finished_at - r.started_at).total_seconds(), 3)  # type: ignore[operator]
                        for r in timed]}],
                    "ylabel": "seconds"}
    success = None
    days: dict[int, Counter[str]] = {}
    for run in runs:
        when = run.finished_at or run.started_at
        if run.state in (RunState.SUCCEEDED, RunState.FAILED) and when is not None:
            days.setdefault(_epoch(when) // DAY * DAY, Counter())[run.state.value] += 1
    if days:
        last = max(days)
        ordered = [last - DAY * back for back in range(CHART_DAYS - 1, -1, -1)]
        success = {"x": ordered, "bars": True, "ylabel": "runs",
                   "series": [{"label": "succeeded",
                               "values": [days.get(d, Counter())["SUCCEEDED"] for d in ordered]},
                              {"label": "failed",
                               "values": [days.get(d, Counter())["FAILED"] for d in ordered]}]}
    return duration, success


class JobPagesService:
    """The jobs pages' reads and writes (see the module docstring)."""

    def __init__(self, services: Services, language: str = "en") -> None:
        self.services = services
        self.language = language
        """The page's language: schedules in words are said in it."""

    def words(self, expression: str | None, zone: str | None) -> str | None:
        """A schedule in words in the page's language (None without a schedule)."""
        if not expression:
            return None
        if self.language == "en":
            return describe(expression, zone)
        from cadenza.domain.cron_words_i18n import describe_in

        return describe_in(self.language, expression, zone)

    # --- the catalogue -----------------------------------------------------------------

    def catalogue(self, q: str | None = None, tags: Sequence[str] = ()) -> Catalogue:
        """The jobs found by ``q`` and carrying every tag of ``tags``, in file order."""
        from cadenza.store.recent import RecentRuns

        jobs = self.services.jobs
        summaries = jobs.list()
        every_tag = tuple(sorted({tag for job in summaries for tag in job.tags}))
        chosen = tuple(dict.fromkeys(t for t in tags if t))
        shown = [job for job in summaries if matches(job, (q or "").strip(), chosen)]
        recent = RecentRuns(self.services.store()).by_job([j.id for j in shown], STRIP_RUNS)
        rows = []
        for job in shown:
            preview = jobs.next_fires(job.id, 1)
            own = next((s for s in preview.schedules if s.name == "job"), None)
            words = self.words(own.expression, own.zone) if own is not None else None
            rows.append(CatalogueRow(job, words, preview.fires[0] if preview.fires else None,
                                     tuple(recent[job.id])))
        return Catalogue(tuple(rows), every_tag, len(summaries), (q or "").strip(), chosen)

    # --- a job's page ------------------------------------------------------------------

    def job_page(self, job_id: str) -> JobPage:
        """The job's definition, next fires, presets, recent runs grid and charts."""
        from cadenza.store.recent import RecentRuns

        jobs = self.services.jobs
        text, digest = self._jobs_file()
        job = jobs.get(job_id)
        summary = next(s for s in jobs.list() if s.id == job_id)
        preview = jobs.next_fires(job_id, 10, language=self.language)
        schedules = tuple((s, self.words(s.expression, s.zone) or "")
                          for s in preview.schedules)
        presets = tuple(
            PresetView(name, preset.description, preset.schedule,
                       self.words(preset.schedule, _zone_of(preview.schedules, name)),
                       preset.enabled,
                       preset.model_dump(mode="json", exclude_none=True,
                                         exclude={"description", "schedule", "timezone",
                                                  "enabled"}, exclude_defaults=True))
            for name, preset in job.presets.items())
        store = self.services.store()
        recent = [RunView.of(r) for r in store.list_runs(job=job_id, limit=CHART_RUNS)]
        shown = list(reversed(recent[:GRID_RUNS]))
        attempts = RecentRuns(store).steps_of([r.id for r in shown])
        names = [step.name for step in job.steps]
        for run in shown:
            for step in attempts[run.id]:
                if step.step not in names:
                    names.append(step.step)  # a step removed since: its history stays
        grid = []
        for name in names:
            cells = []
            for run in shown:
                tries = [s for s in attempts[run.id] if s.step == name]
                cells.append(GridCell(run.id, tries[-1].state.value if tries else None,
                                      len(tries)))
            grid.append((name, tuple(cells)))
        duration, success = charts(recent)
        return JobPage(job, summary, job_toml(text, job_id), digest,
                       schedules, preview.fires, presets, tuple(shown), tuple(grid),
                       duration, success)

    def _jobs_file(self) -> tuple[str, str]:
        """The text of jobs.toml and the hash a write based on it gives back, read before
        the configuration (a change in between makes that write stale, never lost)."""
        from cadenza.config.writer import file_hash

        raw = self.services.home.jobs_file.read_bytes()
        return raw.decode("utf-8", errors="replace"), file_hash(raw)

    # --- run with parameters -------------------------------------------------------------

    def run_form(self, job_id: str, preset: str | None = None) -> RunForm:
        """The form's values for ``job_id`` with the preset ``preset`` picked (NotFound /
        InvalidRequest for an unknown job or preset)."""
        jobs = self.services.jobs
        _, digest = self._jobs_file()
        job = jobs.get(job_id)
        picked = None
        if preset:
            picked = job.presets.get(preset)
            if picked is None:
                raise InvalidRequest(f"job {job_id!r} has no preset {preset!r} (presets: "
                                     f"{', '.join(job.presets) or 'none'})")
        params = []
        names = list(job.params) + [n for n in (picked.params if picked else {})
                                    if n not in job.params]
        for name in names:
            if picked is not None and name in picked.params:
                value, origin = picked.params[name], "preset"
            else:
                value, origin = job.params[name], "job"
            kind = param_type(job.params.get(name))
            text, typed = _text(as_json(value))
            params.append(FormValue(name, text, origin, typed and kind != "string", kind))
        steps = []
        disabled = set(picked.disabled_steps) if picked else set()
        for step in job.steps:
            args = []
            below = picked.step_args.get(step.name, {}) if picked else {}
            for key, value in {**_settings(step), **step.op_kwargs}.items():
                origin = "job"
                if key in below:
                    value, origin = below[key], "preset"
                text, typed = _text(value)
                args.append(FormValue(key, text, origin, typed))
            for key, value in below.items():
                if key not in step.op_kwargs:
                    text, typed = _text(value)
                    args.append(FormValue(key, text, "preset", typed))
            steps.append(StepForm(step.name, step.type, step.name not in disabled,
                                  "preset" if step.name in disabled else "job", tuple(args)))
        if picked is not None and picked.log_level:
            level = FormValue("log_level", picked.log_level, "preset")
        elif "log_level" in job.model_fields_set:
            level = FormValue("log_level", job.log_level, "job")
        else:
            level = FormValue("log_level", DEFAULT_LOG_LEVEL, "default")
        return RunForm(job_id, job.description, preset or None, tuple(job.presets),
                       tuple(params), tuple(steps), level, hash=digest)

    def _filled(self, form: RunForm, fields: Mapping[str, Any]
                ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[str], str]:
        """The values of a submitted form (a missing field keeps the form's value): params,
        step args (those shown and the extra ``STEP.NAME=VALUE`` lines), disabled steps,
        log level."""
        from cadenza.executor.request import RequestError, parse_step_assignment

        params: dict[str, Any] = {}
        wrong: dict[str, str] = {}
        for p in form.params:
            text = str(fields.get(f"param:{p.name}", p.text))
            try:
                params[p.name] = _param(p, text)
            except ParamTypeError as exc:
                wrong[f"param:{p.name}"] = str(exc)
        if wrong:
            raise FormProblems(wrong)
        step_args: dict[str, dict[str, Any]] = {}
        for step in form.steps:
            for arg in step.args:
                raw = fields.get(f"arg:{step.name}:{arg.name}", arg.text)
                step_args.setdefault(step.name, {})[arg.name] = _read(str(raw), arg.typed)
        for line in str(fields.get("more_args", "")).splitlines():
            if not line.strip():
                continue
            try:
                name, key, value = parse_step_assignment(line.strip())
            except RequestError as exc:
                raise InvalidRequest(str(exc)) from None
            step_args.setdefault(name, {})[key] = value
        listed = "steps_shown" in fields
        running = set(fields.get("run_steps", ())) if listed else \
            {s.name for s in form.steps if s.enabled}
        disabled = [s.name for s in form.steps if s.name not in running]
        level = str(fields.get("log_level", form.log_level.text)).upper()
        if level not in LOG_LEVELS:
            raise InvalidRequest(f"unknown log level {level!r}; expected one of "
                                 f"{', '.join(LOG_LEVELS)}")
        return params, step_args, disabled, level

    def submitted(self, form: RunForm, fields: Mapping[str, Any]) -> RunRequestInput:
        """The run a filled form asks for: the picked preset, and on top of it only what
        the person changed (so the run's overrides say what was asked)."""
        params, step_args, disabled, level = self._filled(form, fields)
        shown_params = {p.name: _param(p, p.text) for p in form.params}
        shown_args = {s.name: {a.name: _read(a.text, a.typed) for a in s.args}
                      for s in form.steps}
        changed_args: dict[str, dict[str, Any]] = {}
        for step, args in step_args.items():
            for key, value in args.items():
                if shown_args.get(step, {}).get(key, _MISSING) != value:
                    changed_args.setdefault(step, {})[key] = value
        return RunRequestInput(
            form.job_id,
            {k: v for k, v in params.items() if shown_params.get(k, _MISSING) != v},
            form.preset, changed_args, tuple(disabled),
            level if level != form.log_level.text else None)

    def preset_values(self, form: RunForm, fields: Mapping[str, Any],
                      name: str) -> dict[str, Any]:
        """What "Save as preset" writes as the preset ``name``: the filled values that
        differ from the job's own; an existing preset of that name keeps its schedule,
        zone, description and switch."""
        job = self.services.jobs.get(form.job_id)
        params, step_args, disabled, level = self._filled(form, fields)
        values: dict[str, Any] = {}
        existing = job.presets.get(name)
        if existing is not None:
            values.update(existing.model_dump(
                mode="json", exclude_none=True, exclude_defaults=True,
                include={"description", "schedule", "timezone", "enabled"}))
        own_params = {k: v for k, v in params.items()
                      if as_json(job.params.get(k, _MISSING)) != v}
        if own_params:
            values["params"] = own_params
        own_args: dict[str, dict[str, Any]] = {}
        for step_name, args in step_args.items():
            step = job.step(step_name)
            base = {**_settings(step), **step.op_kwargs} if step is not None else {}
            for key, value in args.items():
                if base.get(key, _MISSING) != value:
                    own_args.setdefault(step_name, {})[key] = value
        if own_args:
            values["step_args"] = own_args
        if disabled:
            values["disabled_steps"] = disabled
        job_level = job.log_level if "log_level" in job.model_fields_set else None
        if level != (job_level or DEFAULT_LOG_LEVEL):
            values["log_level"] = level
        return values

    # --- writes ----------------------------------------------------------------------------

    def set_enabled(self, job_id: str, enabled: bool) -> JobsFile:
        """Write ``enabled`` of the job in jobs.toml (every other line and comment kept).
        The switch says what it wants, not what it saw: it is applied to the current file,
        so no base hash can be stale."""
        import tomlkit

        jobs = self.services.jobs
        jobs.get(job_id)
        document = jobs.document()
        table = dict(tomlkit.parse(document.text)["jobs"][job_id].unwrap())
        if table.get("enabled", True) == enabled:
            return document
        table["enabled"] = enabled
        return jobs.edit(job_id, table, document.hash)


_MISSING = object()


def _probe(value: Any) -> Any:
    """Another value of the same kind (to ask whether changing ``value`` is allowed)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    return f"{value}-x"


def _settings(step: Any) -> dict[str, Any]:
    """The plain settings of ``step`` (text, number, switch) written in jobs.toml that a run
    may change: not what names a connection, job or pool, nor SQL text (those are
    :func:`~cadenza.executor.plan.locked`); ``python`` steps have arguments only."""
    from cadenza.executor.plan import locked, settable_fields
    from cadenza.steps.registry import registry

    if step.type == "python":
        return {}
    data = step.model_dump(mode="json", by_alias=True, exclude_unset=True)
    fields = set(settable_fields(type(step)))
    plain = {k: v for k, v in data.items()
             if k in fields and isinstance(v, str | int | float | bool)}
    step_type = registry().get(step.type)
    refused = {key for key, value in plain.items()
               if locked(step_type, step, {key: _probe(value)})}
    return {k: v for k, v in plain.items() if k not in refused}


def preset_diff(current_text: str, job_id: str, name: str, values: Mapping[str, Any]) -> str:
    """The diff from ``current_text`` to it with the preset saved (a stale save's 409)."""
    import difflib

    import tomlkit

    from cadenza.config.tomlbody import kept_spacing
    from cadenza.config.tomledit import set_preset

    doc = tomlkit.parse(current_text)
    try:
        set_preset(doc, job_id, name, values)
    except (ValueError, KeyError) as exc:
        return f"(the preset does not apply to the current file: {exc})"
    return "".join(difflib.unified_diff(
        current_text.splitlines(keepends=True),
        kept_spacing(current_text, doc.as_string()).splitlines(keepends=True),
        fromfile="jobs.toml (current)", tofile="jobs.toml (with your preset)"))


def _zone_of(schedules: Sequence[ScheduleView], preset: str) -> str | None:
    return next((s.zone for s in schedules if s.name == f"preset:{preset}"), None)
