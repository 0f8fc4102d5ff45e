"""``cadenza scheduling status | pause | resume [--json]``: pause every schedule of the home at
once (fires due meanwhile are recorded MISSED with who paused them) and resume."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json
from cadenza.services.scheduling import Pause

app = typer.Typer(help="Pause or resume scheduling for the whole home.", no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Machine output.")]


def _said(pause: Pause | None) -> dict[str, Any]:
    return pause.as_json() if pause is not None else {"paused": False}


def _tell(pause: Pause | None, as_json: bool) -> None:
    if as_json:
        print_json(_said(pause))
    elif pause is None:
        out.print("Scheduling runs.", markup=False)
    else:
        out.print(f"Scheduling is paused since {pause.since.isoformat(timespec='seconds')} "
                  f"by {pause.by}: due fires are recorded MISSED; "
                  "runs started by hand still run.", markup=False)


@app.command("status")
def status(ctx: typer.Context, as_json: AsJson = False) -> None:
    """Say whether scheduling is paused, since when and by whom."""
    with handled():
        _tell(state(ctx).services.scheduling.status(), as_json)


@app.command("pause")
def pause(ctx: typer.Context, as_json: AsJson = False) -> None:
    """Pause scheduling: fires due while paused are recorded MISSED (no missed alert)."""
    with handled():
        _tell(state(ctx).services.scheduling.pause(), as_json)


@app.command("resume")
def resume(ctx: typer.Context, as_json: AsJson = False) -> None:
    """Resume scheduling: the next due fires run."""
    with handled():
        state(ctx).services.scheduling.resume()
        _tell(None, as_json)
