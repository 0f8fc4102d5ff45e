"""Rendering pages: one Jinja2 environment per language, strings through the Babel
catalogue, every page's HTML through the home's redactor (docs/ui.md).

Templates live in ``cadenza/web/templates/ui/``; they escape everything (autoescape) and
never mark user data ``|safe``. A page gets, besides its own values:

* ``me`` — the :class:`~cadenza.services.auth.Principal` (None on the login page),
* ``can(role)`` — whether ``me`` has ``role`` or above: a page shows only the actions its
  reader may take,
* ``static(path)`` — the URL of a file under ``/static`` (with the version for caching),
* ``nav`` — which top-bar entry is current, ``lang`` — the page's language,
* ``_``/``gettext``/``ngettext`` — the catalogue (``{{ _("Run now") }}``),
* ``|translated`` — a text that comes from elsewhere (a config model's field label or help,
  :mod:`cadenza.config.labels`) looked up in the catalogue as is, without ``%`` formatting,
* ``|said`` — a message of the services (a problem under a field, a refusal in a flash)
  in the page's language (:mod:`cadenza.web.ui.said`),
* ``|num``, ``|share``, ``|duration`` — numbers as the language writes them
  (:mod:`cadenza.web.ui.formats`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import NullTranslations, Translations
from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

import cadenza
from cadenza.web.ui import formats

if TYPE_CHECKING:
    from cadenza.services.auth import Principal

WEB = Path(__file__).resolve().parent.parent
TEMPLATES = WEB / "templates"
STATIC = WEB / "static"
LOCALE_DIR = WEB / "locale"
LANGUAGES = ("en", "fr", "zh_Hans")
"""The page languages: English (the source strings) first, French, Simplified Chinese
(docs/ui.md "Languages and translations")."""
LANGUAGE_NAMES = {"en": "English", "fr": "Français", "zh_Hans": "简体中文"}
"""Each language in its own words: the header's switch."""
HTML_LANG = {"en": "en", "fr": "fr", "zh_Hans": "zh-Hans"}
"""The BCP 47 tag of each language, for ``<html lang>`` (fonts and line breaking)."""
LANG_COOKIE = "cadenza_lang"
"""The cookie that keeps the switch's choice before login (and for a token's pages)."""

def N_(message: str) -> str:
    """Marks ``message`` for the catalogue where it is written; the page translates it
    where it shows it (``{{ message|translated }}``)."""
    return message


STATE_CODES = ("PENDING", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELED", "MISSED",
               "SKIPPED", "NEEDS_REVIEW", "AVAILABLE", "LEASED", "COOLDOWN", "FAULT", "DISABLED")
"""The states of runs, steps and resources: English pages show the code itself (what the
CLI and the API say); the other languages their word for it (message context ``state``)."""


def _state_msgids(pgettext: Any) -> None:
    """Never called: the literal calls put each state into the catalogue."""
    pgettext("state", "PENDING"), pgettext("state", "QUEUED"), pgettext("state", "RUNNING")
    pgettext("state", "SUCCEEDED"), pgettext("state", "FAILED"), pgettext("state", "CANCELED")
    pgettext("state", "MISSED"), pgettext("state", "SKIPPED"), pgettext("state", "NEEDS_REVIEW")
    pgettext("state", "AVAILABLE"), pgettext("state", "LEASED"), pgettext("state", "COOLDOWN")
    pgettext("state", "FAULT"), pgettext("state", "DISABLED")


@cache
def state_words(lang: str) -> dict[str, str]:
    """Each state's word in ``lang`` (the code itself in English)."""
    if lang == "en":
        return {code: code for code in STATE_CODES}
    catalogue = translations(lang)
    return {code: str(catalogue.pgettext("state", code)) for code in STATE_CODES}


def _chart_msgids(pgettext: Any) -> None:
    """Never called: the words of the pages' charts (series names and axes, message
    context ``chart``), said in the page's language by :func:`chart_in`."""
    pgettext("chart", "succeeded"), pgettext("chart", "failed"), pgettext("chart", "seconds")
    pgettext("chart", "runs"), pgettext("chart", "queue time (mean)")
    pgettext("chart", "execution time (mean)"), pgettext("chart", "score")
    pgettext("chart", "latency ms")


def chart_in(lang: str, chart: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``chart`` with its series names and axis label in ``lang``; each series keeps its
    English name as ``state`` (the colour of a succeeded or failed series)."""
    if chart is None:
        return None
    catalogue = translations(lang)

    def say(word: str) -> str:
        return str(catalogue.pgettext("chart", word))

    out = dict(chart)
    if isinstance(out.get("ylabel"), str):
        out["ylabel"] = say(out["ylabel"])
    out["series"] = [{**series, "state": series.get("state", series.get("label")),
                      "label": say(series["label"]) if isinstance(series.get("label"), str)
                      else series.get("label")} for series in chart.get("series", [])]
    return out


NAV = (("jobs", "/jobs", "viewer"), ("runs", "/runs", "viewer"),
       ("resources", "/resources", "viewer"), ("audit", "/audit", "viewer"),
       ("dashboard", "/dashboard", "viewer"), ("admin", "/admin", "admin"))
"""The top bar: (key, path, role needed to see it)."""


@cache
def translations(lang: str) -> NullTranslations:
    """The catalogue of ``lang``, compiled from its ``.po`` in memory (no build step)."""
    po = LOCALE_DIR / lang / "LC_MESSAGES" / "messages.po"
    if lang == "en" or not po.is_file():
        return NullTranslations()
    with po.open("rb") as source:
        catalog = read_po(source, locale=lang)
    compiled = io.BytesIO()
    write_mo(compiled, catalog)
    compiled.seek(0)
    return Translations(compiled)


@cache
def environment(lang: str) -> Environment:
    """The template environment of ``lang`` (autoescaping, i18n extension)."""
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)),
                      autoescape=select_autoescape(["html", "xml"], default=True),
                      extensions=["jinja2.ext.i18n"], trim_blocks=True, lstrip_blocks=True,
                      auto_reload=False)  # installed files: no stat per template per page
    env.install_gettext_translations(translations(lang), newstyle=True)  # type: ignore[attr-defined]
    env.globals["static"] = static_url
    env.filters["translated"] = translations(lang).gettext
    env.filters["isoutc"] = iso_utc
    env.filters["utctext"] = utc_text
    env.globals["version"] = cadenza.__version__
    env.globals["state_words"] = state_words(lang)
    env.filters["chart"] = lambda chart: chart_in(lang, chart)
    env.filters["weekday"] = lambda when: weekday(lang, when)
    env.filters["num"] = lambda value, decimals=0: formats.number(lang, value, decimals)
    env.filters["share"] = lambda fraction, decimals=1: formats.share(lang, fraction, decimals)
    env.filters["duration"] = lambda seconds: formats.duration(lang, seconds)
    env.globals["duration_units"] = formats.units(lang)
    from cadenza.web.ui.runs_rows import ascii_html, rows_html
    from cadenza.web.ui.said import say

    env.filters["said"] = lambda message: say(lang, str(message))

    env.globals["runs_rows"] = rows_html  # the runs table's rows (runs_rows.py)
    env.filters["ascii"] = ascii_html
    return env


def _utc(value: datetime | str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def weekday(lang: str, when: datetime) -> str:
    """The abbreviated day of the week of ``when`` in ``lang`` (Sun, dim., 周日), by Babel."""
    from babel import Locale
    from babel.dates import format_date

    return format_date(when, "EEE", locale=Locale.parse(lang))


def iso_utc(value: datetime | str) -> str:
    """An instant as ISO 8601 in UTC with ``Z`` (a naive value is taken as UTC, which is
    how the store keeps them): the ``datetime`` of a ``<time>``."""
    return _utc(value).isoformat().replace("+00:00", "Z")


def utc_text(value: datetime | str) -> str:
    """An instant as ``2026-12-01 20:15:03 UTC``: what a page shows before its script
    puts it in the browser's zone (and what it shows without script)."""
    return _utc(value).strftime("%Y-%m-%d %H:%M:%S UTC")


def static_url(path: str) -> str:
    """``/static/<path>?v=<version>``: the version busts browser caches on upgrade."""
    return f"/static/{path}?v={cadenza.__version__}"


def browser_language(header: str) -> str | None:
    """The best of :data:`LANGUAGES` for an ``Accept-Language`` header, or None.

    Every Chinese tag (``zh``, ``zh-CN``, ``zh-Hans``, ``zh-SG``, and ``zh-TW``/``zh-HK``,
    which Cadenza has no Traditional catalogue for) reads as Simplified Chinese."""
    wanted: list[tuple[float, int, str]] = []
    for order, part in enumerate(header.split(",")[:20]):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        wanted.append((-quality, order, tag.strip().lower().replace("_", "-")))
    for negative_quality, _, tag in sorted(wanted):
        if negative_quality >= 0:
            break
        primary = tag.split("-", 1)[0]
        if primary == "zh":
            return "zh_Hans"
        if primary in LANGUAGES:
            return primary
    return None


def known_language(value: str | None) -> str | None:
    """``value`` when it is one of :data:`LANGUAGES`, else None (a cookie is user input)."""
    return value if value in LANGUAGES else None


def choose_language(request: Request, me: Principal | None = None) -> str:
    """The page's language: the signed-in user's choice, else the switch's cookie, else
    ``[server] language``, else the browser's ``Accept-Language``, else English."""
    web = getattr(request.app.state, "cadenza", None)
    return (known_language(me.language if me is not None else None)
            or known_language(request.cookies.get(LANG_COOKIE))
            or known_language(getattr(web, "language", None))
            or browser_language(request.headers.get("accept-language", ""))
            or "en")


def render(request: Request, template: str, values: Mapping[str, Any] | None = None, *,
           me: Principal | None = None, nav: str | None = None, status: int = 200,
           headers: Mapping[str, str] | None = None) -> HTMLResponse:
    """``template`` rendered for this request, redacted, as an HTML response."""
    lang = choose_language(request, me)
    page = environment(lang).get_template(template)
    html = page.render(
        me=me, can=(lambda role: me is not None and me.allows(role)), nav=nav, lang=lang,
        html_lang=HTML_LANG[lang], languages=LANGUAGE_NAMES,
        nav_items=NAV, request=request, path=request.url.path, **dict(values or {}))
    return HTMLResponse(redact_html(request, html), status_code=status,
                        headers=dict(headers or {}))


def redact_html(request: Request, html: str) -> str:
    """``html`` through the home's redactor: the pages' last line of defence for secrets
    (known secret values, URL user-info, secret-looking ``key=value``)."""
    web = getattr(request.app.state, "cadenza", None)
    home = getattr(web, "home", None)
    return home.redactor.redact_text(html) if home is not None else html


def is_htmx(request: Request) -> bool:
    """True for a request made by htmx (it answers with a fragment, not a page)."""
    return request.headers.get("hx-request") == "true"
