"""``cadenza tokens create | list | revoke``: bearer tokens of the API."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json, print_table
from cadenza.services.tokens import TokenService

app = typer.Typer(help="API tokens (Authorization: Bearer ...).", no_args_is_help=True)


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    role: Annotated[str, typer.Option("--role", help="viewer | operator | editor | admin")]
    = "viewer",
    user: Annotated[str | None, typer.Option(
        "--user", help="The user the token acts as (it never exceeds the user's role).")]
    = None,
) -> None:
    """Create a token and print it once (only its SHA-256 is stored)."""
    services = state(ctx).configured()
    with handled():
        new = TokenService(services.store()).create(name, role, username=user,
                                                    actor=services.actor.id)
    out.print(f"Token {new.name} (role {new.role}), shown once:", markup=False)
    out.print(new.token, markup=False, soft_wrap=True)


@app.command("list")
def list_tokens(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List every token (never the tokens themselves)."""
    services = state(ctx).configured()
    with handled():
        rows = [t.as_json() for t in TokenService(services.store()).list(every=True)]
    if as_json:
        print_json(rows)
        return
    print_table(rows, ["name", "user", "roles", "created_at", "last_used_at", "revoked_at"])


@app.command("revoke")
def revoke(ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="NAME")]) -> None:
    """Revoke a token: refused from the next request on."""
    services = state(ctx).configured()
    with handled():
        TokenService(services.store()).revoke(name, every=True, actor=services.actor.id)
    out.print(f"Revoked token {name}", markup=False)
