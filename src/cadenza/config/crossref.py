"""Cross-references of ``jobs.toml``: what a job names must exist, of the right kind.

Each check reads the raw values through the models' annotations (fields marked with
:class:`~cadenza.config.types.Ref` or :class:`~cadenza.config.types.InRoots`), so a step
that failed its schema still gets its references checked, and a third-party step type
gets the same checks by marking its fields the same way.

* ``connection`` fields name a connection of cadenza.toml of the marked type;
* ``requires`` (job and step) and ``via`` name pools (``via``: a route pool), asking no
  more members than the pool has;
* a step's ``channel`` names a channel (without one, some channel must exist);
* ``call_job.job`` names another job (never the job itself, never a cycle), its ``preset``
  is a preset of that job and its ``params`` are declared there;
* ``${...}`` tokens are well placed (:mod:`cadenza.config.tokens`);
* step names are unique; presets name existing steps and declared params, each value of
  the type of the job's (``call_job`` params likewise, of the called job's);
* absolute file paths stay inside ``[files].roots``; a ``python`` callable's module can
  be found (a warning otherwise: it may be installed later).
"""

from __future__ import annotations

import importlib.util
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cadenza.config.problems import KeyPath, Reporter
from cadenza.config.schema_settings import absolute_sqlite_url
from cadenza.config.tokens import StepScope, check_tokens
from cadenza.config.types import InRoots, Ref, without_tokens
from cadenza.config.validation import raw_table, type_tag, union_members
from cadenza.domain.params import ParamTypeError, convert
from cadenza.home_templates import template_problem
from cadenza.plugin_code import callable_problem
from cadenza.private_files import RULE, PrivateFiles

Marker = Ref | InRoots


@dataclass
class Catalog:
    """The names of cadenza.toml that jobs refer to (``known`` is False when that file
    could not be read, and reference checks are then skipped)."""

    known: bool = False
    connections: dict[str, str] = field(default_factory=dict)
    pools: dict[str, tuple[str, int]] = field(default_factory=dict)
    channels: list[str] = field(default_factory=list)
    roots: list[Path] = field(default_factory=list)
    allowed_callables: list[str] = field(default_factory=list)
    store_url: str | None = None
    calendars: list[str] = field(default_factory=list)


def catalog_of(data: Mapping[str, Any] | None, home: Path) -> Catalog:
    """What ``data`` (raw cadenza.toml values, possibly invalid) defines."""
    if data is None:
        return Catalog()
    connections = {name: str(raw_table(c).get("type"))
                   for name, c in raw_table(data.get("connections")).items()}
    pools: dict[str, tuple[str, int]] = {}
    for name, raw in raw_table(data.get("pools")).items():
        members = raw_table(raw).get("members")
        pools[name] = (str(raw_table(raw).get("kind")),
                       len(members) if isinstance(members, list) else 0)
    roots = raw_table(data.get("files")).get("roots", ["data/files"])
    paths = [(home / r).resolve() for r in roots if isinstance(r, str)] \
        if isinstance(roots, list) else []
    allowed = raw_table(data.get("security")).get("allowed_callables")
    store_url = raw_table(data.get("store")).get("url", "sqlite:///data/cadenza.db")
    return Catalog(True, connections, pools, list(raw_table(data.get("channels"))), paths,
                   [a for a in allowed if isinstance(a, str)] if isinstance(allowed, list)
                   else [], store_url if isinstance(store_url, str) else None,
                   list(raw_table(data.get("calendars"))))


def marked(tp: Any, raw: object, path: KeyPath,
           markers: tuple[object, ...] = ()) -> Iterator[tuple[KeyPath, Marker, str, bool]]:
    """Every (path, marker, name, is_key) of ``raw`` whose type ``tp`` carries a marker.

    ``is_key`` is True for the keys of a marked table (``requires = { egress = 1 }``).
    """
    while typing.get_origin(tp) is typing.Annotated:
        tp, *meta = typing.get_args(tp)
        markers = (*markers, *meta)
    found = [m for m in markers if isinstance(m, Ref | InRoots)]
    members = union_members(tp)
    if isinstance(raw, str):
        for m in found:
            yield path, m, raw, False
        for member in members:  # markers inside a union member (``X | None``)
            if typing.get_origin(member) is typing.Annotated:
                yield from marked(member, raw, path)
    elif isinstance(raw, dict):
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        if len(models) > 1:
            models = [m for m in models if type_tag(m) == raw.get("type")]
        if models:
            for name, info in models[0].model_fields.items():
                key = info.alias or name
                if key in raw:
                    yield from marked(info.annotation, raw[key], (*path, key),
                                      tuple(info.metadata))
            return
        for key in raw:
            for m in found:
                if isinstance(key, str):
                    yield (*path, key), m, key, True
        tables = [m for m in members if typing.get_origin(m) is dict]
        if tables:
            value_type = typing.get_args(tables[0])[1]
            for key, item in raw.items():
                yield from marked(value_type, item, (*path, key))
    elif isinstance(raw, list):
        lists = [m for m in members if typing.get_origin(m) is list]
        if lists:
            for k, item in enumerate(raw):
                yield from marked(typing.get_args(lists[0])[0], item, (*path, k))


@dataclass
class JobChecker:
    """Checks one job of ``jobs`` (all raw jobs) against ``catalog``."""

    jobs: Mapping[str, Any]
    catalog: Catalog
    report: Reporter
    home: Path
    step_types: Mapping[str, Any]

    def check(self, job_id: str, raw: Mapping[str, Any], job_model: type[BaseModel]) -> None:
        """Report every cross-reference problem of the job ``job_id``."""
        at: KeyPath = ("jobs", job_id)
        params = set(raw_table(raw.get("params")))
        check_tokens(raw.get("params"), (*at, "params"), self.report, "params")
        steps = [raw_table(s) for s in raw.get("steps", [])] \
            if isinstance(raw.get("steps"), list) else []
        names = [s["name"] if isinstance(s.get("name"), str) else "" for s in steps]
        first: dict[str, int] = {}
        for k, name in enumerate(names):
            if name in first:
                self.report.error((*at, "steps", k, "name"), f"duplicate step name {name!r}: "
                                  f"steps[{first[name]}] has it; step names are unique in a job")
            elif name:
                first[name] = k
        job_fields = {k: v for k, v in raw.items() if k != "steps"}
        self._refs(job_id, marked(job_model, job_fields, at))
        self._counts(raw.get("requires"), (*at, "requires"))
        self._presets(at, raw, params, names)
        check_calendar_keys(raw, raw, at, self.report)
        for name, preset in raw_table(raw.get("presets")).items():
            check_calendar_keys(raw_table(preset), raw, (*at, "presets", name), self.report)
        for k, step in enumerate(steps):
            self._step(job_id, (*at, "steps", k), step, params, names, k)
        alerts = raw_table(raw.get("alerts"))
        if alerts.get("recipients") and alerts.get("on_failure", True) is not False \
                and self.catalog.known and not self.catalog.channels:
            self.report.warning((*at, "alerts"), "alerts have recipients but cadenza.toml "
                                "defines no channel to send them through", at="key")

    def _step(self, job_id: str, at: KeyPath, step: Mapping[str, Any], params: set[str],
              names: list[str], k: int) -> None:
        scope = StepScope(names[:k], names, params, names[k],
                          set(raw_table(step.get("op_kwargs"))))
        for key, value in step.items():
            if key not in ("name", "type"):
                check_tokens(value, (*at, key), self.report, "step", scope)
        type_name = step.get("type")
        step_type = self.step_types.get(type_name) if isinstance(type_name, str) else None
        if step_type is None:
            return
        self._refs(job_id, marked(step_type.Config, dict(step), at))
        self._private_paths(marked(step_type.Config, dict(step), at), names[k])
        self._counts(step.get("requires"), (*at, "requires"))
        if step_type.name == "call_job":
            self._call(job_id, at, step)
        elif step_type.name == "python":
            self._callable(at, step.get("callable"), names[k])
        elif step_type.name == "report":
            self._template(at, step.get("template"), names[k])
        elif step_type.name == "sql_query":
            self._home_file(at, "file", step.get("file"), names[k])
        elif step_type.name == "notify" and "channel" not in step and self.catalog.known \
                and not self.catalog.channels:
            self.report.error((*at, "channel"), "no channel to send through: expected "
                              "channel = NAME, and a [channels.NAME] in cadenza.toml",
                              at="parent")

    def _presets(self, at: KeyPath, raw: Mapping[str, Any], params: set[str],
                 names: list[str]) -> None:
        for name, value in raw_table(raw.get("presets")).items():
            preset = raw_table(value)
            where: KeyPath = (*at, "presets", name)
            check_tokens(preset.get("params"), (*where, "params"), self.report, "params")
            for key, given in raw_table(preset.get("params")).items():
                if key not in params:
                    self.report.error((*where, "params", key), f"parameter {key!r} is not "
                                      f"declared in the job's params (declared: "
                                      f"{', '.join(sorted(params)) or 'none'})", at="key")
                else:
                    self._typed((*where, "params", key), key, given,
                                raw_table(raw.get("params"))[key])
            for step, args in raw_table(preset.get("step_args")).items():
                if step not in names:
                    self.report.error((*where, "step_args", step), _no_step(step, names),
                                      at="key")
                    continue
                k = names.index(step)
                scope = StepScope(names[:k], names, params, step, set(raw_table(args)))
                check_tokens(args, (*where, "step_args", step), self.report, "step", scope)
            disabled = preset.get("disabled_steps")
            for k, step in enumerate(disabled if isinstance(disabled, list) else []):
                if isinstance(step, str) and step not in names:
                    self.report.error((*where, "disabled_steps", k), _no_step(step, names))

    def _refs(self, job_id: str, found: Iterator[tuple[KeyPath, Marker, str, bool]]) -> None:
        for path, marker, name, is_key in found:
            anchor: typing.Literal["key", "value"] = "key" if is_key else "value"
            message = self._ref_problem(job_id, marker, name)
            if message:
                self.report.error(path, message, at=anchor)

    def _ref_problem(self, job_id: str, marker: Marker, name: str) -> str | None:
        if isinstance(marker, InRoots):
            return self._outside_roots(name)
        if marker.kind == "job":
            if name == job_id:
                return "a job cannot call itself (cycles are refused)"
            if name not in self.jobs:
                return f"unknown job {name!r}: expected a job of jobs.toml"
            return None
        if not self.catalog.known:
            return None
        if marker.kind == "connection":
            wanted = marker.subtype
            kinds = self.catalog.connections
            if name not in kinds:
                same = sorted(n for n, t in kinds.items() if wanted in (None, t))
                kind = f"of type {wanted!r} " if wanted else ""
                return (f"unknown connection {name!r}: expected a connection {kind}defined in "
                        f"cadenza.toml ([connections.{name}]); {wanted or 'defined'} "
                        f"connections: {', '.join(same) or 'none'}")
            if wanted and kinds[name] != wanted:
                return (f"connection {name!r} is of type {kinds[name]!r}; expected a "
                        f"connection of type {wanted!r}")
        elif marker.kind == "pool":
            pools = self.catalog.pools
            if name not in pools:
                return (f"unknown pool {name!r}: expected a pool of cadenza.toml "
                        f"(pools: {', '.join(sorted(pools)) or 'none'})")
            if marker.subtype and pools[name][0] != marker.subtype:
                return (f"pool {name!r} is of kind {pools[name][0]!r}; expected a "
                        f"{marker.subtype} pool")
        elif marker.kind == "calendar" and name not in self.catalog.calendars:
            return (f"unknown calendar {name!r}: expected a [calendars.{name}] of cadenza.toml "
                    f"(calendars: {', '.join(self.catalog.calendars) or 'none'})")
        elif marker.kind == "channel" and name not in self.catalog.channels:
            return (f"unknown channel {name!r}: expected a channel of cadenza.toml "
                    f"(channels: {', '.join(self.catalog.channels) or 'none'})")
        return None

    def _outside_roots(self, value: str) -> str | None:
        plain = Path(without_tokens(value))
        if not plain.is_absolute() or not self.catalog.roots:
            return None
        resolved = plain.resolve()
        if any(resolved.is_relative_to(root) for root in self.catalog.roots):
            return None
        roots = ", ".join(str(r) for r in self.catalog.roots)
        return f"path {value!r} is outside [files].roots; expected a path inside {roots}"

    def _counts(self, requires: object, at: KeyPath) -> None:
        for pool, count in raw_table(requires).items():
            known = self.catalog.pools.get(pool)
            if known and isinstance(count, int) and not isinstance(count, bool) \
                    and count > known[1]:
                self.report.error((*at, pool), f"pool {pool!r} has {known[1]} member(s); "
                                  f"{count} can never be leased at once")

    def _call(self, job_id: str, at: KeyPath, step: Mapping[str, Any]) -> None:
        target = step.get("job")
        if not isinstance(target, str) or target == job_id or target not in self.jobs:
            return
        other = raw_table(self.jobs[target])
        preset = step.get("preset")
        if isinstance(preset, str) and preset not in raw_table(other.get("presets")):
            self.report.error((*at, "preset"), f"job {target!r} has no preset {preset!r} "
                              f"(presets: {', '.join(raw_table(other.get('presets'))) or 'none'})")
        declared = set(raw_table(other.get("params")))
        for key, given in raw_table(step.get("params")).items():
            if key not in declared:
                self.report.error((*at, "params", key), f"parameter {key!r} is not declared in "
                                  f"job {target!r}'s params (declared: "
                                  f"{', '.join(sorted(declared)) or 'none'})", at="key")
            else:
                self._typed((*at, "params", key), key, given,
                            raw_table(other.get("params"))[key])

    def _typed(self, at: KeyPath, name: str, value: Any, default: Any) -> None:
        """A value given for a declared parameter must convert to the type of its default
        (a value holding a ``${...}`` token is checked when the run starts)."""
        try:
            convert(name, value, default)
        except ParamTypeError as exc:
            self.report.error(at, str(exc))

    def _private(self) -> PrivateFiles:
        url = self.catalog.store_url
        return PrivateFiles.of(self.home, absolute_sqlite_url(url, self.home) if url else None)

    def _private_paths(self, found: Iterator[tuple[KeyPath, Marker, str, bool]],
                       step: str) -> None:
        """A literal file path (no ``${...}``) naming a private file of the home, under
        any root or as written, is an error (checked again when the step runs)."""
        private: PrivateFiles | None = None
        for path, marker, value, is_key in found:
            if not isinstance(marker, InRoots) or is_key or without_tokens(value) != value:
                continue
            private = private or self._private()
            text = value.replace("\\", "/")
            places = [Path(text)] if Path(text).is_absolute() else \
                [root / text for root in self.catalog.roots]
            for place in places:
                why = private.reason(place)
                if why is not None:
                    self.report.error(path, f"step {step!r}: {path[-1]} {value!r} {RULE} "
                                      f"({why}); no step may read or write it")
                    break

    def _home_file(self, at: KeyPath, key: str, value: object, step: str) -> None:
        """A literal path relative to the home that names a private file is an error."""
        if not isinstance(value, str) or without_tokens(value) != value:
            return
        why = self._private().reason(value.replace("\\", "/"))
        if why is not None:
            self.report.error((*at, key), f"step {step!r}: {key} {value!r} {RULE} ({why}); "
                              "no step may read it")

    def _template(self, at: KeyPath, value: object, step: str) -> None:
        if not isinstance(value, str) or without_tokens(value) != value:
            return
        problem = template_problem(self.home, value, self._private())
        if problem is not None:
            self.report.error((*at, "template"), f"step {step!r}: {problem}")

    def _callable(self, at: KeyPath, value: object, step: str) -> None:
        if not isinstance(value, str) or ":" not in value:
            return
        problem = callable_problem(value, self.home, self.catalog.allowed_callables)
        if problem is not None:
            self.report.error((*at, "callable"), f"step {step!r}: callable {value!r} "
                              f"refused: {problem}")
            return
        top = value.split(":", 1)[0].split(".", 1)[0]
        plugins = self.home / "plugins"
        if (plugins / top).is_dir() or (plugins / f"{top}.py").is_file():
            return
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            self.report.warning((*at, "callable"), f"module {top!r} is neither in plugins/ nor "
                                "installed; the step will fail when it runs")


def check_calendar_keys(owner: Mapping[str, Any], job: Mapping[str, Any], at: KeyPath,
                        report: Reporter) -> None:
    """The business-calendar keys of a job or preset (``owner``; a preset's unset keys are
    its job's) fit together and with the schedule."""
    from cadenza.domain.cron import CronError, parse_cron

    def pick(key: str) -> Any:
        return owner[key] if key in owner else job.get(key)

    mine = [k for k in ("days", "shift", "business_day") if k in owner]
    if not mine and "calendar" not in owner and "schedule" not in owner:
        return
    days, shift, nth = pick("days"), pick("shift"), pick("business_day")
    if pick("calendar") is None and (days == "business" or nth is not None or
                                     shift not in (None, "skip")):
        if mine:
            report.error((*at, mine[0]), f"{mine[0]} needs a business calendar: expected "
                         f"calendar = NAME (a [calendars.NAME] of cadenza.toml)", at="key")
        return
    if nth == 0:
        report.error((*at, "business_day"), "expected 1..23 (the N-th working day of the "
                     "month) or -1..-23 (from its end; -1 is the last), got 0")
    if shift not in (None, "skip") and days != "business" and nth is None:
        report.error((*at, "shift"), 'shift moves a fire that falls on a day off: expected '
                     'days = "business" as well', at="key")
    schedule = owner.get("schedule") if owner is not job or "schedule" in owner else None
    if not isinstance(schedule, str):
        return
    try:
        cron = parse_cron(schedule)
    except CronError:
        return  # the schedule's own error is reported
    if nth is not None and (cron.days_restricted or cron.weekdays_restricted):
        report.error((*at, "schedule"), "with business_day, the schedule gives only the "
                     "time: expected * as the day of month and the day of week, e.g. "
                     "\"0 6 * * *\"")
    elif days == "business" and cron.weekdays_restricted:
        report.warning((*at, "schedule"), 'with days = "business" the calendar chooses the '
                       "days: a make-up working day on a weekend (China's 调休 Saturdays) "
                       "only fires when the day of week is *")


def _no_step(name: str, names: list[str]) -> str:
    return f"no step {name!r} in this job (steps: {', '.join(n for n in names if n) or 'none'})"


def check_call_cycles(jobs: Mapping[str, Any], report: Reporter) -> None:
    """Report each ``call_job`` cycle between jobs once: A calls B calls A, also when a
    preset makes the call (a preset's ``step_args`` setting a call_job step's ``job`` or
    ``preset``, a call_job step's ``preset`` selecting such a preset). The message shows
    the chain, e.g. ``a → b (preset back) → a``. A job appearing twice in a chain is a
    cycle, whatever the presets: the run-time check refuses the same chains
    (:mod:`cadenza.executor.calls`)."""
    edges: dict[tuple[str, str | None], list[tuple[tuple[str, str | None], KeyPath]]] = {}
    for job_id, raw in jobs.items():
        job = raw_table(raw)
        presets = raw_table(job.get("presets"))
        for preset in [None, *(p for p in presets if isinstance(p, str))]:
            edges[(job_id, preset)] = list(_calls(job_id, job, preset, jobs))
    reported: set[frozenset[str]] = set()
    for start in edges:
        stack: list[list[tuple[str, str | None]]] = [[start]]
        while stack:
            trail = stack.pop()
            seen = [job for job, _ in trail]
            for target, path in edges.get(trail[-1], []):
                if target[0] in seen:
                    loop = trail[seen.index(target[0]):]
                    members = frozenset(job for job, _ in loop)
                    if members not in reported:
                        reported.add(members)
                        report.error(path, "call_job cycle: " + " → ".join(
                            [*(_node(n) for n in loop), target[0]]) + "; cycles are refused")
                elif len(trail) < 64:
                    stack.append([*trail, target])


def _calls(job_id: str, job: Mapping[str, Any], preset: str | None,
           jobs: Mapping[str, Any]) -> Iterator[tuple[tuple[str, str | None], KeyPath]]:
    """The calls a run of ``job_id`` with ``preset`` (None: without) makes: the target
    (job, preset) and where the target's name is written."""
    chosen = raw_table(raw_table(job.get("presets")).get(preset)) if preset else {}
    disabled = chosen.get("disabled_steps")
    off = set(disabled) if isinstance(disabled, list) else set()
    steps = job.get("steps")
    for k, raw_step in enumerate(steps if isinstance(steps, list) else []):
        step = raw_table(raw_step)
        name = step.get("name")
        if step.get("type") != "call_job" or name in off:
            continue
        args = raw_table(raw_table(chosen.get("step_args")).get(name)) \
            if isinstance(name, str) else {}
        target = args.get("job", step.get("job"))
        target_preset = args.get("preset", step.get("preset"))
        if not isinstance(target, str) or target not in jobs:
            continue
        if "job" in args:
            path: KeyPath = ("jobs", job_id, "presets", str(preset), "step_args", str(name),
                             "job")
        elif target == job_id:
            continue  # the step calling its own job is reported where its job is written
        elif "preset" in args:
            path = ("jobs", job_id, "presets", str(preset), "step_args", str(name), "preset")
        else:
            path = ("jobs", job_id, "steps", k, "job")
        known = raw_table(raw_table(jobs[target]).get("presets"))
        # An unknown preset is reported where it is named; the call is followed without it.
        yield (target, target_preset if target_preset in known else None), path


def _node(node: tuple[str, str | None]) -> str:
    job, preset = node
    return job if preset is None else f"{job} (preset {preset})"


def check_rule_targets(settings: Mapping[str, Any], jobs: Mapping[str, Any],
                       report: Reporter) -> None:
    """Warn about rules of cadenza.toml naming a job id or a tag no job has."""
    tags = {t for raw in jobs.values() for t in raw_table(raw).get("tags", [])
            if isinstance(t, str)} if jobs else set()
    rules = settings.get("rules")
    for k, raw in enumerate(rules if isinstance(rules, list) else []):
        rule = raw_table(raw)
        patterns = rule.get("jobs")
        for n, pattern in enumerate(patterns if isinstance(patterns, list) else []):
            if isinstance(pattern, str) and not set("*?[") & set(pattern) \
                    and pattern not in jobs:
                report.warning(("rules", k, "jobs", n), f"no job {pattern!r} in jobs.toml")
        rule_tags = rule.get("tags")
        for n, tag in enumerate(rule_tags if isinstance(rule_tags, list) else []):
            if isinstance(tag, str) and tag not in tags:
                report.warning(("rules", k, "tags", n), f"no job has the tag {tag!r}")
