"""``cadenza runs cancel RUN [--wait] [--json]``: cancel a run from any process sharing the
store (docs/leases.md "Cancel").

* A QUEUED run is CANCELED at once (a conditional UPDATE; the events name the OS user).
* A RUNNING run gets a cancel request (``cancel_requested_by``, an event): the process that
  holds its lease reads it within about a second, kills the step's process tree (or cancels
  its SQL statement on the server, aborts its HTTP request) and ends the run CANCELED with
  "canceled by <user>" in its log. If that process is gone, the reaper ends the run CANCELED
  once its lease expires.
* Any other state changes nothing and exits 1 with the reason.

``--wait`` follows the run until it ended (at most ``--timeout`` seconds).

Registered on the ``runs`` sub-app by the last lines of :mod:`cadenza.cli.runs`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json, shown


def register(app: typer.Typer) -> None:
    """Add ``cancel`` to the ``runs`` sub-app."""
    app.command("cancel")(cancel_run)


def cancel_run(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ended.")
                    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1,
                                           help="With --wait: give up after SECONDS.")
                       ] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Cancel a queued run now, or ask the worker of a running run to stop it."""
    services = state(ctx).configured()
    with handled():
        outcome = services.runs.cancel(run_id, wait=wait, timeout=timeout)
    if as_json:
        print_json(outcome.as_json())
    else:
        out.print(shown(outcome.message), markup=False)
        if wait and outcome.state is not None:
            out.print(f"run {run_id} is {outcome.state.value}"
                      + (f": {shown(outcome.reason)}" if outcome.reason else ""), markup=False)
    if not outcome.accepted:
        raise typer.Exit(1)
    if wait and not outcome.ended:
        if not as_json:
            out.print(f"run {run_id} has not ended after {timeout:g}s", markup=False)
        raise typer.Exit(1)
