"""``cadenza secrets set | list``: values are read, never echoed."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import err, out, print_json, print_table

app = typer.Typer(
    help="Encrypted secrets, referenced as ${secret.NAME} in cadenza.toml.", no_args_is_help=True
)


@app.command("set")
def set_secret(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    value_stdin: Annotated[
        bool, typer.Option("--value-stdin", help="Read the value from stdin.")
    ] = False,
    allow_short: Annotated[
        bool, typer.Option("--allow-short",
                           help="Store a value shorter than 8 characters anyway (warns).")
    ] = False,
) -> None:
    """Store a secret (AES-GCM, key in data/secret.key). The value is prompted for, hidden."""
    secrets = state(ctx).services.secrets
    with handled():
        secrets.require_directory()
    if value_stdin or not sys.stdin.isatty():
        value = sys.stdin.read().rstrip("\r\n")
    else:
        value = typer.prompt(f"Value of {name}", hide_input=True, confirmation_prompt=True)
    with handled():
        warning = secrets.set(name, value, allow_short=allow_short)
    if warning is not None:
        err.print(f"warning: {warning}", markup=False)
    out.print(f"Stored secret {name}", markup=False)


@app.command("list")
def list_secrets(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List secret names (never values)."""
    with handled():
        names = state(ctx).services.secrets.names()
    if as_json:
        print_json([{"name": n} for n in names])
        return
    print_table([{"name": n} for n in names], ["name"])
