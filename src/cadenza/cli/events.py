"""``cadenza events``: the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from cadenza.cli.context import state
from cadenza.cli.output import fail, print_json, print_table


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
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000)] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Show the audit log, oldest first, filtered."""
    from cadenza.domain.events import EventType

    if event_type is not None and event_type.upper() not in EventType.__members__:
        fail(f"unknown event type {event_type!r}; known: {', '.join(EventType.__members__)}", 2)
    st = state(ctx)
    with st.store() as store:
        since_at = _since(since, store.clock.now()) if since else None
        rows = store.list_events(
            run_id=run,
            resource_id=resource,
            event_type=event_type.upper() if event_type else None,
            since=since_at,
            limit=limit,
        )
    records = [
        {
            "id": e.event_id,
            "at": e.created_at,
            "type": e.event_type,
            "level": e.level,
            "run": e.run_id,
            "resource": e.resource_id,
            "actor": e.actor,
            "message": e.message,
            "payload": e.payload,
        }
        for e in rows
    ]
    if as_json:
        print_json(records)
        return
    print_table(records, ["id", "at", "type", "level", "run", "resource", "actor", "message"])


def _since(text: str, now: datetime) -> datetime:
    from cadenza.config import parse_duration

    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        fail(f"--since {text!r}: expected an age like 90s, 30m, 1h, 2d or an ISO time", 2)
    if when.tzinfo is None:
        when = when.astimezone()
    return when
