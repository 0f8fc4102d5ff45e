"""``cadenza calendars list | show NAME [--year Y] [--language L] [--json]``: the business
calendars of cadenza.toml and the days off and extra working days of a year, named in the
reader's language."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import err, print_json, print_table
from cadenza.services.calendars import KIND_WORDS

app = typer.Typer(help="Business calendars: working days, holidays, make-up days.",
                  no_args_is_help=True)

_LOCALES = {"fr": "fr", "zh": "zh_Hans", "en": "en"}


def reader_language(given: str | None, server: str | None) -> str | None:
    """``--language``, else the language of ``$LC_ALL``/``$LC_MESSAGES``/``$LANG``
    (``fr_FR.UTF-8`` → ``fr``, ``zh_CN`` → ``zh_Hans``), else ``[server] language``, else
    None (each calendar's own)."""
    if given:
        return given
    for variable in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(variable, "")
        prefix = value.split("_", 1)[0].split(".", 1)[0].lower()
        if prefix in _LOCALES:
            return _LOCALES[prefix]
    return server


@app.command("list")
def list_calendars(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List the calendars of cadenza.toml."""
    services = state(ctx).services
    with handled():
        rows = [c.as_json() for c in services.calendars.list()]
    if as_json:
        print_json(rows)
        return
    if not rows:
        err.print("No calendar: add a [calendars.NAME] table to cadenza.toml, e.g. "
                  "country = \"FR\"", markup=False)
        return
    print_table([{**r, "weekend": " ".join(r["weekend"])} for r in rows],
                ["name", "country", "subdivision", "weekend", "days_off", "working_days"])


@app.command("show")
def show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    year: Annotated[int | None, typer.Option("--year", help="The year, e.g. 2027 "
                                             "(default: this year).")] = None,
    language: Annotated[str | None, typer.Option(
        "--language", help="en | fr | zh_Hans: the language of the days' names (default: "
        "$LANG, else [server] language, else the country's own).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """The days off and the extra working days of a year, with their names."""
    services = state(ctx).services
    with handled():
        server = services.settings().settings.server.language
        shown = services.calendars.show(name, year or services.clock.now().year,
                                        reader_language(language, server))
    if as_json:
        print_json(shown.as_json())
        return
    rows = [{"date": d.day.isoformat(), "day": d.day.strftime("%a"),
             "kind": KIND_WORDS[d.kind], "name": d.name or ""} for d in shown.days]
    print_table(rows, ["date", "day", "kind", "name"],
                title=f"Calendar {shown.name}, {shown.year}")
