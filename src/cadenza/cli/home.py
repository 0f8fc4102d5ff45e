"""``cadenza init`` and ``cadenza validate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cadenza.cli.context import print_problems, state
from cadenza.cli.output import err, fail, out, print_json
from cadenza.domain.errors import CadenzaError
from cadenza.home import create_home
from cadenza.security import generate_password, hash_password


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("validate")(validate)


def init(
    directory: Annotated[Path, typer.Argument(help="Directory to create the home in.")],
    example: Annotated[bool, typer.Option("--example", help="Write the sales-load demo.")] = False,
) -> None:
    """Create a home: cadenza.toml, jobs.toml, plugins/, data/, the store and an admin user."""
    try:
        home = create_home(directory, example=example)
    except FileExistsError as exc:
        fail(str(exc))
    try:
        config = home.load_config()
        store = home.open_store(config)
    except CadenzaError as exc:
        fail(f"the new home does not load: {exc}")
    password = generate_password()
    try:
        store.add_user(
            "admin",
            hash_password(password),
            ["admin"],
            display_name="Administrator",
            actor="cadenza init",
        )
    finally:
        store.close()
    out.print(f"Created a Cadenza home in {home.path}" + (" with the demo jobs" if example else ""))
    out.print("Login: admin")
    out.print(f"Password (shown once, store it now): {password}", markup=False)
    out.print(f"Next: cadenza --home {home.path} validate", markup=False)


def validate(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Check cadenza.toml and jobs.toml; exit 1 with file:line:col messages on any error."""
    from cadenza.config import validate_home

    home = state(ctx).home
    problems = validate_home(home.path, resolve_secret=home.secrets.get)
    errors = [p for p in problems if p.severity == "error"]
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
