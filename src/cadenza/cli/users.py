"""``cadenza users add | list | passwd | disable | unlock | set``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json, print_table
from cadenza.services.users import NewUser

app = typer.Typer(help="Users of the web UI and API.", no_args_is_help=True)


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
    services = state(ctx).services
    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else None
    user = NewUser(name, role, email=email, display_name=display_name, password=password)
    with handled():
        services.users.check(user)
        services.config()
        added = services.users.add(user)
    out.print(f"Added user {name} with roles {', '.join(added.roles)}", markup=False)
    if added.generated_password is not None:
        out.print(f"Password (shown once): {added.generated_password}", markup=False)


@app.command("list")
def list_users(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List users (never their password hashes)."""
    services = state(ctx).configured()
    with handled():
        rows = [user.as_json() for user in services.users.list()]
    if as_json:
        print_json(rows)
        return
    print_table(rows, ["username", "display_name", "email", "roles", "disabled", "created_at"])


@app.command("passwd")
def passwd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
) -> None:
    """Set a user's password (generated and shown once without --password-stdin); ends
    the user's sessions and revokes their API tokens for good."""
    from cadenza.services.auth import AuthService, new_password

    services = state(ctx).configured()
    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else new_password()
    with handled():
        revoked = AuthService(services.store(), services.clock).passwd(
            name, password, actor=services.actor.id)
    out.print(f"Password of {name} changed; {revoked} session(s) ended", markup=False)
    if not password_stdin:
        out.print(f"Password (shown once): {password}", markup=False)


@app.command("disable")
def disable(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    enable: Annotated[bool, typer.Option("--enable", help="Enable the user again.")] = False,
) -> None:
    """Disable a user: their sessions end and their API tokens are revoked for good
    (enabling them again does not revive the tokens)."""
    from cadenza.services.auth import AuthService

    services = state(ctx).configured()
    with handled():
        revoked = AuthService(services.store(), services.clock).disable(
            name, actor=services.actor.id, disabled=not enable)
    verb = "enabled" if enable else "disabled"
    out.print(f"User {name} {verb}; {revoked} session(s) ended", markup=False)


@app.command("unlock")
def unlock(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME")],
) -> None:
    """Forget a user's failed logins from every address: their login throttling ends now."""
    from cadenza.services.auth import AuthService

    services = state(ctx).configured()
    with handled():
        forgotten = AuthService(services.store(), services.clock).unlock(
            name, actor=services.actor.id)
    out.print(f"User {name} unlocked; {forgotten} failed login(s) forgotten", markup=False)


@app.command("set")
def set_preferences(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME")],
    language: Annotated[str | None, typer.Option(
        "--language", help="en | fr | zh_Hans, for the pages and the user's e-mails; "
                           "'' for the browser's or the server's.")] = None,
    timezone: Annotated[str | None, typer.Option(
        "--timezone", help="An IANA zone (Asia/Shanghai) for times in the user's e-mails; "
                           "'' for the job's.")] = None,
) -> None:
    """Set a user's language and time zone (the command line itself stays in English)."""
    services = state(ctx).configured()
    with handled():
        services.users.set_preferences(name, language=language, timezone=timezone)
    out.print(f"User {name}: language {language if language is not None else 'unchanged'}"
              f", time zone {timezone if timezone is not None else 'unchanged'}",
              markup=False)
