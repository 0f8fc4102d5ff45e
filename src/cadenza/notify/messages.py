"""Messages: what a notification says, rendered from Jinja2 templates (docs/notifications.md).

A message names the job, the run, the event and the run's state, its trigger, its scheduled
time in the job's zone (``2027-01-05 02:00 CET (Europe/Paris)``; ``2026-12-04 20:22 UTC``),
the failing step and its error, the reason, and a link to the run page
(``[server].base_url`` + ``/runs/{id}``).

Templates are files: ``subject.txt``, ``body.txt`` and ``body.html`` in
``cadenza/notify/templates/``. A home overrides any of them with a file of the same name in
``HOME/templates/notify/`` (read at each message, so an edit applies without a restart).
Every rendered text then goes through the home's redactor: a secret that reached a run's
error (or a user's template) never leaves in a subject, a body or a webhook's JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2

from cadenza.config.loader import LoadedConfig
from cadenza.domain.states import StepState
from cadenza.home_templates import HomeTemplateLoader
from cadenza.notify.channels import Message
from cadenza.store.core import Redactor
from cadenza.store.records import RunRecord, StepRunRecord

TEMPLATE_DIR = Path(__file__).parent / "templates"
OVERRIDE_DIR = Path("templates") / "notify"
"""Where a home's own templates live, relative to the home."""
TEMPLATES = ("subject.txt", "body.txt", "body.html")

def N_(message: str) -> str:
    """Marks ``message`` for the catalogue; translated where it is shown."""
    return message


TITLES = {
    "failed": N_("failed"), "needs_review": N_("needs review"), "succeeded": N_("succeeded"),
    "canceled": N_("was canceled"), "missed": N_("missed its scheduled run"),
    "long_run": N_("is still running"), "recovered": N_("recovered"),
    "stalled": N_("did not fire"), "test": N_("test message"), "late": N_("is late"),
    "reminder": N_("is still failing"), "resolved": N_("recovered"),
}
"""What follows the job's name in a subject and a heading (in the message's language)."""


@dataclass(frozen=True)
class Facts:
    """What a message is about, before rendering."""

    event: str
    job: str | None
    run: RunRecord | None = None
    steps: tuple[StepRunRecord, ...] = ()
    scheduled_for: datetime | None = None
    extra: dict[str, Any] | None = None


class Renderer:
    """Renders :class:`Facts` into a :class:`~cadenza.notify.channels.Message` with the
    home's templates (falling back to the built-in ones) and redacts the result.

    A message is written in a language (``en``, ``fr``, ``zh_Hans``: the catalogue of the
    pages) and shows its times in a zone: the recipient's when the recipient is a user who
    chose them, else ``[server] language`` and the job's zone."""

    def __init__(self, home: Path, redactor: Redactor) -> None:
        self.redactor = redactor
        self._loader = jinja2.ChoiceLoader([
            HomeTemplateLoader(home, home / OVERRIDE_DIR),  # never outside templates/
            jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        ])
        self._environments: dict[tuple[str, bool], jinja2.Environment] = {}

    def environment(self, lang: str, html: bool) -> jinja2.Environment:
        """The text (``html`` False) or HTML environment of ``lang``, made once."""
        key = (lang, html)
        env = self._environments.get(key)
        if env is None:
            from cadenza.web.ui.render import translations

            env = jinja2.Environment(loader=self._loader, autoescape=html,
                                     keep_trailing_newline=not html, auto_reload=True,
                                     extensions=["jinja2.ext.i18n"])
            env.install_gettext_translations(  # type: ignore[attr-defined]
                translations(lang), newstyle=True)
            self._environments[key] = env
        return env

    def render(self, facts: Facts, config: LoadedConfig, *, lang: str | None = None,
               zone: str | None = None) -> Message:
        """The message for ``facts`` in ``lang`` (default ``[server] language``, else
        English) with times in ``zone`` (default: the job's); raises
        ``jinja2.TemplateError`` for a broken template (the sender records it as the
        delivery's error)."""
        from cadenza.web.ui.render import HTML_LANG, LANGUAGES, state_words

        lang = lang if lang in LANGUAGES else (config.settings.server.language or "en")
        context = self.context(facts, config, zone=zone)
        state = context["state"]
        context |= {"lang": lang, "html_lang": HTML_LANG[lang],
                    "state_word": state_words(lang).get(state, state) if state else state}
        text_env, html_env = self.environment(lang, False), self.environment(lang, True)
        subject = " ".join(text_env.get_template("subject.txt").render(context).split())
        text = text_env.get_template("body.txt").render(context)
        html = html_env.get_template("body.html").render(context)
        redact = self.redactor.redact_text
        fields = {k: context[k] for k in ("event", "job", "run_id", "state", "trigger",
                                          "scheduled", "failing_step", "error", "reason",
                                          "link")}
        return Message(redact(subject), redact(text), redact(html),
                       fields=self.redactor.redact_value(fields))

    def context(self, facts: Facts, config: LoadedConfig, *,
                zone: str | None = None) -> dict[str, Any]:
        """The template variables (listed in docs/notifications.md); times in ``zone``
        (default: the job's, else the server's)."""
        run = facts.run
        job = config.jobs.get(facts.job or "")
        shown_zone = _zone(zone or (job.timezone if job is not None else None))
        when = facts.scheduled_for or (run.scheduled_for if run is not None else None)
        failing = next((s for s in reversed(facts.steps) if s.state is StepState.FAILED), None)
        base = config.settings.server.base_url
        link = f"{base.rstrip('/')}/runs/{run.id}" if base and run is not None else None
        return {
            "event": facts.event,
            "title": TITLES.get(facts.event, facts.event),
            "job": facts.job,
            "run_id": run.id if run is not None else None,
            "state": str(run.state) if run is not None else None,
            "trigger": run.trigger if run is not None else None,
            "scheduled": _shown(when, shown_zone),
            "started": _shown(run.started_at, shown_zone) if run is not None else None,
            "finished": _shown(run.finished_at, shown_zone) if run is not None else None,
            "zone": shown_zone.key,
            "failing_step": failing.step if failing is not None else None,
            "error": (failing.error if failing is not None and failing.error
                      else run.error if run is not None else None),
            "reason": run.reason if run is not None else None,
            "attempt": run.attempt if run is not None else None,
            "link": link,
            **(facts.extra or {}),
        }


def _zone(name: str | None) -> ZoneInfo:
    if name:
        return ZoneInfo(name)
    from cadenza.scheduler.schedules import server_zone

    return server_zone()


def _shown(when: datetime | None, zone: ZoneInfo) -> str | None:
    """``2027-01-05 02:00 CET (Europe/Paris)``; a zone whose abbreviation is its name says
    it once (``2026-12-04 20:22 UTC``, not ``UTC (UTC)``)."""
    if when is None:
        return None
    local = when.astimezone(zone)
    abbreviation = local.tzname() or zone.key
    named = abbreviation if abbreviation == zone.key else f"{abbreviation} ({zone.key})"
    return f"{local:%Y-%m-%d %H:%M} {named}"
