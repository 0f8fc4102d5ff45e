"""``cadenza resources list | show | enable | disable`` (the health helper adds ``probe``)."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json, print_table
from cadenza.services.errors import NotFound, Refused

app = typer.Typer(help="Pool members: units, routes, credentials (docs/pools.md).",
                  no_args_is_help=True)

_COLUMNS = ["resource_id", "pool", "kind", "state", "score", "latency_ms", "cooldown_until",
            "holder", "egress_region"]


@app.command("list")
def list_resources(
    ctx: typer.Context,
    pool: Annotated[str | None, typer.Option("--pool", help="Only this pool.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Members with their state, score, latency, cooldown end, holder run and region."""
    services = state(ctx).configured()
    with handled(usage=(NotFound,)):
        rows = [view.as_json() for view in services.resources.list(pool)]
    if as_json:
        print_json(rows)
        return
    print_table(rows, _COLUMNS)


@app.command("show")
def show(
    ctx: typer.Context,
    resource_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """One member: state, lease, health figures and its recent history."""
    services = state(ctx).configured()
    with handled(usage=(NotFound,)):
        detail = services.resources.show(resource_id)
    if as_json:
        print_json(detail.as_json())
        return
    view = detail.view.as_json()
    for key in [*_COLUMNS, "route", "proxy", "last_error"]:
        if view.get(key) is not None:
            out.print(f"{key}: {view[key]}", markup=False)
    for key, value in detail.health.items():
        if value is not None:
            out.print(f"health.{key}: {value}", markup=False)
    print_table([line.as_json() for line in detail.history],
                ["at", "event_type", "message", "actor"], title="recent history")


@app.command("enable")
def enable(
    ctx: typer.Context,
    resource_id: Annotated[str, typer.Argument(metavar="ID")],
    reason: Annotated[str | None, typer.Option("--reason")] = None,
) -> None:
    """DISABLED (or FAULT) -> AVAILABLE; an event names you."""
    services = state(ctx).configured()
    with handled(usage=(NotFound, Refused)):
        view = services.resources.enable(resource_id, reason)
    out.print(f"resource {view.resource_id} {view.state.value}", markup=False)


@app.command("disable")
def disable(
    ctx: typer.Context,
    resource_id: Annotated[str, typer.Argument(metavar="ID")],
    reason: Annotated[str | None, typer.Option("--reason")] = None,
) -> None:
    """Any state -> DISABLED: never leased again until enabled; an event names you."""
    services = state(ctx).configured()
    with handled(usage=(NotFound, Refused)):
        view = services.resources.disable(resource_id, reason)
    out.print(f"resource {view.resource_id} {view.state.value}", markup=False)
