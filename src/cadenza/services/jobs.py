"""The job catalogue: read it, preview schedules, and edit ``jobs.toml``.

Operations::

    list() -> list[JobSummary]                      jobs in file order
    get(job_id) -> JobConfig                        NotFound listing the known jobs
    show(job_id) -> JobDefinition                   secrets redacted; NotFound
    next_fires(job_id, count=10, start=None) -> NextFires
    document() -> JobsFile                          the text of jobs.toml and its hash
    create(job_id, table, base_hash) -> JobsFile    InvalidRequest if it exists
    edit(job_id, table, base_hash) -> JobsFile      NotFound if it does not
    save_text(job_id, text, base_hash, creating=...) -> JobsFile   the job's TOML as typed
    edit_definition(job_id, sent, base_hash) -> JobsFile   as show() gives it; spelling kept
    delete(job_id, base_hash) -> JobsFile
    save_preset(job_id, name, values, base_hash) -> JobsFile

Every write goes through :mod:`cadenza.config.writer`: comments and order are kept, the new
file is validated first (ConfigError with located problems, nothing written), a write based
on an older version of the file is refused (StaleConfigError), and the write is atomic.
After a write, the ``on_change`` callable given to the service (a running node's
``reload``) is called; a CONFIG_CHANGED event names the actor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cadenza.domain.business_days import CalendarRule, ordinal
from cadenza.domain.errors import ConfigError
from cadenza.domain.events import EventType, Level
from cadenza.services.errors import InvalidRequest, NotFound
from cadenza.services.timeparse import parse_instant

if TYPE_CHECKING:
    from tomlkit.toml_document import TOMLDocument

    from cadenza.config import JobConfig
    from cadenza.scheduler.fires import UpcomingFire
    from cadenza.services.context import Services


@dataclass(frozen=True)
class JobSummary:
    """One job in the catalogue list."""

    id: str
    enabled: bool
    schedule: str | None
    timezone: str | None
    tags: tuple[str, ...]
    steps: tuple[str, ...]
    presets: tuple[str, ...]
    description: str | None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "enabled": self.enabled, "schedule": self.schedule,
                "timezone": self.timezone, "tags": list(self.tags), "steps": list(self.steps),
                "presets": list(self.presets), "description": self.description}


@dataclass(frozen=True)
class JobDefinition:
    """A job's whole definition as JSON values, secrets redacted."""

    id: str
    description: str | None
    definition: dict[str, Any]


@dataclass(frozen=True)
class ScheduleView:
    """One schedule of a job (its own, or a preset's) for a preview."""

    name: str
    expression: str
    zone: str
    words: str
    """The schedule in words with its zone (``monthly on day 1 at 06:00, UTC``)."""
    enabled: bool
    disabled_because: str | None
    rule: CalendarRule | None = None
    """The business calendar its fires follow, or None."""

    @property
    def calendar_words(self) -> str | None:
        """``on the working days of calendar france, a fire on a day off skipped``."""
        rule = self.rule
        if rule is None:
            return None
        name = rule.calendar.name
        if rule.business_day is not None:
            return f"only on the {ordinal(rule.business_day)} working day of the month " \
                   f"(calendar {name})"
        if rule.days == "all":
            return None
        shift = {"skip": "a fire on a day off is skipped",
                 "next": "a fire on a day off moves to the next working day",
                 "previous": "a fire on a day off moves to the previous working day"}
        return f"on the working days of calendar {name}; {shift[rule.shift]}"


@dataclass(frozen=True)
class NextFires:
    """A job's schedules and their next fires in time order."""

    job_id: str
    schedules: tuple[ScheduleView, ...]
    fires: tuple[UpcomingFire, ...]


@dataclass(frozen=True)
class JobsFile:
    """The text of ``jobs.toml`` and the hash to give back with a write based on it; after
    a write, also whether the reload applied it (None: nothing to reload)."""

    text: str
    hash: str
    reloaded: bool | None = None


class JobService:
    """The operations on the job catalogue (see the module docstring)."""

    def __init__(self, services: Services,
                 on_change: Callable[[], object] | None = None) -> None:
        self.services = services
        self.on_change = on_change

    def get(self, job_id: str) -> JobConfig:
        """The job ``job_id`` of the valid configuration; NotFound listing the known ones."""
        config = self.services.config()
        job = config.jobs.get(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r}; known jobs: "
                           f"{', '.join(config.jobs) or '(none)'}")
        return job

    def list(self) -> list[JobSummary]:
        return [JobSummary(job_id, job.enabled, job.schedule, job.timezone, tuple(job.tags),
                           tuple(s.name for s in job.steps), tuple(job.presets),
                           job.description)
                for job_id, job in self.services.config().jobs.items()]

    def show(self, job_id: str) -> JobDefinition:
        """The job's definition: every key of the job and of each step (those of the
        step's type included), secrets redacted (see :mod:`cadenza.config.definitions`)."""
        from cadenza.config.definitions import definition

        job = self.get(job_id)
        shown = self.services.home.redactor.redact_value(definition(job))
        return JobDefinition(job_id, job.description, shown)

    def next_fires(self, job_id: str, count: int = 10, start: str | None = None,
                   language: str | None = None) -> NextFires:
        """The next ``count`` fires of the job's enabled schedules (job and presets), from
        ``start`` (an ISO time, server zone without offset) or now; the days a business
        calendar skips or moves a fire from are named in ``language`` (None: the
        calendar's own)."""
        from cadenza.domain.cron_words import describe
        from cadenza.scheduler.fires import upcoming
        from cadenza.scheduler.schedules import schedules_of, server_zone

        job = self.get(job_id)
        after = parse_instant(start, "--from", "an ISO time like 2027-10-30T12:00:00+02:00") \
            if start else self.services.clock.now()
        calendars = self.services.config().settings.calendar_objects
        specs = schedules_of(job, server_zone(), calendars)
        views = tuple(ScheduleView(spec.name, spec.expression, spec.zone.key,
                                   describe(spec.cron, spec.zone.key), spec.enabled,
                                   spec.disabled_because, spec.rule) for spec in specs)
        return NextFires(job_id, views, tuple(upcoming(specs, after, count, language)))

    # --- writes ------------------------------------------------------------------------

    def document(self) -> JobsFile:
        from cadenza.config.writer import read_document, rendered

        doc, digest = read_document(self.services.home.jobs_file)
        return JobsFile(rendered(self.services.home.jobs_file, doc), digest)

    def create(self, job_id: str, table: Mapping[str, Any], base_hash: str) -> JobsFile:
        """Add the job ``job_id`` (its keys and steps as plain TOML values)."""
        def change(doc: TOMLDocument) -> None:
            from cadenza.config.writer import set_job

            if job_id in doc.get("jobs", {}):
                raise InvalidRequest(f"job {job_id!r} exists; edit it instead")
            set_job(doc, job_id, table)

        return self._write(change, base_hash, f"job {job_id} created")

    def edit(self, job_id: str, table: Mapping[str, Any], base_hash: str) -> JobsFile:
        """Replace the job ``job_id``'s keys, keeping the comments of what is unchanged."""
        def change(doc: TOMLDocument) -> None:
            from cadenza.config.writer import set_job

            self._require(doc, job_id)
            set_job(doc, job_id, table)

        return self._write(change, base_hash, f"job {job_id} edited")

    def edit_definition(self, job_id: str, sent: Mapping[str, Any],
                        base_hash: str) -> JobsFile:
        """Replace the job ``job_id``'s keys with a definition as :meth:`show` gives it:
        a key whose value shows as the file's does keeps the file's spelling (a default
        the file leaves out stays out, a redacted secret stays as written), so saving
        what was shown changes nothing; what changed is written as sent."""
        def change(doc: TOMLDocument) -> None:
            from cadenza.config.definitions import keep_written, table_definition
            from cadenza.config.writer import set_job

            self._require(doc, job_id)
            written = doc["jobs"][job_id].unwrap()
            shown = table_definition(job_id, written)
            table = keep_written(
                written, self.services.home.redactor.redact_value(shown), sent,
                table_definition(job_id, sent))
            set_job(doc, job_id, table)

        return self._write(change, base_hash, f"job {job_id} edited")

    def save_text(self, job_id: str, text: str, base_hash: str, *,
                  creating: bool) -> JobsFile:
        """Put ``text``, the job's TOML as a person typed it (``[jobs.ID]`` and its
        sub-tables, comments included), in place of the job's lines of jobs.toml, or after
        them when ``creating``: what was typed is written as typed. InvalidRequest when the
        text is not that one job; NotFound when the job has no table of its own to replace
        (then :meth:`edit` its table instead)."""
        from cadenza.services.job_drafts import parse_job_text, splice_text

        parse_job_text(job_id, text)
        if not creating:
            self._require_id(job_id)
        new, _ = splice_text(self.document().text, job_id, text, creating=creating)
        verb = "created" if creating else "edited"
        return self._write_text(new, base_hash, f"job {job_id} {verb}")

    def _require_id(self, job_id: str) -> None:
        from cadenza.config.writer import read_document

        doc, _ = read_document(self.services.home.jobs_file)
        self._require(doc, job_id)

    def delete(self, job_id: str, base_hash: str) -> JobsFile:
        """Remove the job ``job_id`` (its runs stay in the history)."""
        def change(doc: TOMLDocument) -> None:
            from cadenza.config.writer import delete_job

            self._require(doc, job_id)
            delete_job(doc, job_id)

        return self._write(change, base_hash, f"job {job_id} deleted")

    def save_preset(self, job_id: str, name: str, values: Mapping[str, Any],
                    base_hash: str) -> JobsFile:
        """Save "run with parameters" values (params, step_args, disabled_steps, log_level,
        schedule ...) as the preset ``name`` of the job."""
        def change(doc: TOMLDocument) -> None:
            from cadenza.config.writer import set_preset

            self._require(doc, job_id)
            set_preset(doc, job_id, name, values)

        return self._write(change, base_hash, f"preset {name} of job {job_id} saved")

    @staticmethod
    def _require(doc: TOMLDocument, job_id: str) -> None:
        if job_id not in doc.get("jobs", {}):
            raise NotFound(f"no job {job_id!r} in jobs.toml")

    def _write(self, change: Callable[[TOMLDocument], None], base_hash: str,
               what: str) -> JobsFile:
        from cadenza.config.writer import read_document, rendered

        self.services.require_home()
        doc, _ = read_document(self.services.home.jobs_file)
        try:
            change(doc)
        except ValueError as exc:  # an invalid id or value (tomledit)
            raise InvalidRequest(str(exc)) from None
        return self._write_text(rendered(self.services.home.jobs_file, doc), base_hash, what)

    def _record_refusal(self, error: ConfigError, what: str) -> None:
        """A CONFIG_REFUSED event (level WARNING, with the actor) when the save broke a
        security rule (docs/security.md); other invalid saves leave no event."""
        from cadenza.plugin_code import RULE as CODE_RULE
        from cadenza.private_files import RULE as FILE_RULE

        broken = [str(p) for p in error.problems
                  if getattr(p, "severity", "error") == "error"
                  and (CODE_RULE in str(p) or FILE_RULE in str(p))]
        if not broken:
            return
        self.services.store().append_event(
            EventType.CONFIG_REFUSED, f"{what} in jobs.toml refused: {broken[0]}",
            level=Level.WARNING, payload={"file": "jobs.toml", "problems": broken},
            actor=self.services.actor.id)

    def _write_text(self, text: str, base_hash: str, what: str) -> JobsFile:
        from cadenza.config import validate_jobs_text
        from cadenza.config.writer import write_document

        home = self.services.home
        self.services.require_home()
        try:
            digest = write_document(
                home.jobs_file, text, base_hash=base_hash, clock=self.services.clock,
                validate=lambda new: validate_jobs_text(home.path, new,
                                                        resolve_secret=home.secrets.get))
        except ConfigError as exc:
            self._record_refusal(exc, what)
            raise
        self.services.store().append_event(EventType.CONFIG_CHANGED, f"{what} in jobs.toml",
                                           payload={"file": "jobs.toml"},
                                           actor=self.services.actor.id)
        reloaded = None
        if self.on_change is not None:
            reloaded = bool(self.on_change())
        return JobsFile(text, digest, reloaded)

