"""``cadenza secrets set | list``: values are read, never echoed."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cadenza.cli.context import state
from cadenza.cli.output import fail, out, print_json, print_table
from cadenza.domain.errors import SecretError

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
) -> None:
    """Store a secret (AES-GCM, key in data/secret.key). The value is prompted for, hidden."""
    home = state(ctx).home
    if not home.path.is_dir():
        fail(f"{home.path} is not a directory")
    if value_stdin or not sys.stdin.isatty():
        value = sys.stdin.read().rstrip("\r\n")
    else:
        value = typer.prompt(f"Value of {name}", hide_input=True, confirmation_prompt=True)
    if not value:
        fail("empty value; nothing stored", 2)
    try:
        home.secrets.set(name, value)
    except (SecretError, ValueError) as exc:
        fail(str(exc), 2 if isinstance(exc, ValueError) else 1)
    out.print(f"Stored secret {name}", markup=False)


@app.command("list")
def list_secrets(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List secret names (never values)."""
    try:
        names = state(ctx).home.secrets.names()
    except SecretError as exc:
        fail(str(exc))
    if as_json:
        print_json([{"name": n} for n in names])
        return
    print_table([{"name": n} for n in names], ["name"])
