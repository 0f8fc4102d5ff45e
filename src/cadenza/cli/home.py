"""``cadenza init`` and ``cadenza validate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cadenza.cli.context import handled, print_problems, state
from cadenza.cli.output import err, out, print_json
from cadenza.clock import clock_from_env
from cadenza.services import Actor
from cadenza.services.config import init_home


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("validate")(validate)


def init(
    directory: Annotated[Path, typer.Argument(help="Directory to create the home in.")],
    example: Annotated[bool, typer.Option("--example", help="Write the sales-load demo.")] = False,
) -> None:
    """Create a home: cadenza.toml, jobs.toml, plugins/, data/, the store and an admin user."""
    with handled(usage=(ValueError,)):
        created = init_home(directory, example=example, actor=Actor.cli(),
                            clock=clock_from_env())
    out.print(f"Created a Cadenza home in {created.path}"
              + (" with the demo jobs" if example else ""))
    out.print(f"Login: {created.admin}")
    out.print(f"Password (shown once, store it now): {created.password}", markup=False)
    out.print(f"Next: cadenza --home {created.path} validate", markup=False)


def validate(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Check cadenza.toml and jobs.toml; exit 1 with file:line:col messages on any error."""
    services = state(ctx).services
    home = services.home
    problems = services.configuration.validate()
    errors = [p for p in problems if p.severity == "error"]
    from cadenza.services.config import home_mode_warnings

    for line in home_mode_warnings(home.path):
        err.print(line, markup=False)
    if as_json:
        print_json(
            [
                {
                    "file": p.file,
                    "line": p.line,
                    "col": p.col,
                    "severity": p.severity,
                    "path": p.path,
                    "message": p.message,
                }
                for p in problems
            ]
        )
    else:
        print_problems(list(problems))
        if not errors:
            warnings = len(problems)
            err.print(
                f"ok: {home.path} is valid" + (f" ({warnings} warning(s))" if warnings else ""),
                markup=False,
            )
    if errors:
        raise typer.Exit(1)
