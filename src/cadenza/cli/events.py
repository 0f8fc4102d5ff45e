"""``cadenza events``: the audit log (needs only cadenza.toml and the store)."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import print_json, print_table
from cadenza.services.history import EventQuery, check_type


def register(app: typer.Typer) -> None:
    app.command("events")(events)


def events(
    ctx: typer.Context,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's events.")] = None,
    resource: Annotated[
        str | None, typer.Option("--resource", help="Only this resource's.")
    ] = None,
    event_type: Annotated[str | None, typer.Option("--type", help="Only this event type.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Age like 1h, 30m, 2d; or an ISO time.")
    ] = None,
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor's: user:ana, token:ci, system.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000)] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Show the audit log, oldest first, filtered."""
    query = EventQuery(run, resource, event_type, since, limit, actor=actor)
    if event_type is not None:
        with handled():
            check_type(event_type)
    history = state(ctx).for_history().history
    with handled():
        records = [event.as_json() for event in history.events(query)]
    if as_json:
        print_json(records)
        return
    print_table(records, ["id", "at", "type", "level", "run", "resource", "actor", "message"])
