"""``cadenza notify test CHANNEL [--to X]`` and ``cadenza notifications list``."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import err, out, print_json, print_table

app = typer.Typer(help="Notification channels.", no_args_is_help=True)
log_app = typer.Typer(help="Notifications sent (the delivery log).", no_args_is_help=True)


@app.command("test")
def test(
    ctx: typer.Context,
    channel: Annotated[str, typer.Argument(metavar="CHANNEL")],
    to: Annotated[
        list[str] | None,
        typer.Option("--to", help="An address, user:NAME or role:NAME; repeatable."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Send a test message through CHANNEL now; exit 1 when a delivery failed."""
    services = state(ctx).configured()
    with handled():
        results = services.notifications.test(channel, to or [])
    if as_json:
        print_json([r.as_json() for r in results])
    else:
        for r in results:
            if r.state == "SENT":
                out.print(f"sent to {r.recipient} through {r.channel}", markup=False)
            else:
                err.print(f"FAILED to {r.recipient} through {r.channel}: {r.error}",
                          markup=False)
    if any(r.state != "SENT" for r in results):
        raise typer.Exit(1)


@log_app.command("list")
def list_notifications(
    ctx: typer.Context,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's.")] = None,
    state_: Annotated[
        str | None, typer.Option("--state", help="SENT or FAILED.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000)] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List deliveries, newest first (needs only cadenza.toml and the store)."""
    services = state(ctx).for_history()
    with handled():
        rows = [r.as_json() for r in services.notifications.list(run=run, state=state_,
                                                                   limit=limit)]
    if as_json:
        print_json(rows)
        return
    print_table(rows, ["id", "updated_at", "event", "run_id", "channel", "recipient", "state",
                       "attempts", "error"])
