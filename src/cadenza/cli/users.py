"""``cadenza users add | list``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cadenza.cli.context import state
from cadenza.cli.output import fail, out, print_json, print_table
from cadenza.domain.errors import StoreError
from cadenza.security import generate_password, hash_password, validate_username

app = typer.Typer(help="Users of the web UI and API.", no_args_is_help=True)

BUILTIN_ROLES = ("viewer", "operator", "editor", "admin")


@app.command("add")
def add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    role: Annotated[
        list[str],
        typer.Option(
            "--role", help="viewer | operator | editor | admin, or a group like ops; repeatable."
        ),
    ],
    email: Annotated[str | None, typer.Option("--email")] = None,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
) -> None:
    """Add a user (argon2id). Without --password-stdin, a password is generated, shown once."""
    try:
        validate_username(name)
    except ValueError as exc:
        fail(str(exc), 2)
    roles = sorted({r.strip() for r in role if r.strip()})
    if not roles:
        fail("give at least one --role", 2)
    if email is not None and "@" not in email:
        fail(f"--email {email!r} is not an e-mail address", 2)
    generated = not password_stdin
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if len(password) < 8:
            fail("the password must have at least 8 characters", 2)
    else:
        password = generate_password()
    with state(ctx).store() as store:
        try:
            store.add_user(
                name,
                hash_password(password),
                roles,
                email=email,
                display_name=display_name,
                actor="cli",
            )
        except StoreError as exc:
            fail(str(exc))
    out.print(f"Added user {name} with roles {', '.join(roles)}", markup=False)
    if generated:
        out.print(f"Password (shown once): {password}", markup=False)


@app.command("list")
def list_users(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List users (never their password hashes)."""
    with state(ctx).store() as store:
        users = store.list_users()
    rows = [
        {
            "username": u.username,
            "display_name": u.display_name,
            "email": u.email,
            "roles": list(u.roles),
            "disabled": u.disabled,
            "created_at": u.created_at,
        }
        for u in users
    ]
    if as_json:
        print_json(rows)
        return
    print_table(rows, ["username", "display_name", "email", "roles", "disabled", "created_at"])
