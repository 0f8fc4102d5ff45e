"""``cadenza runs cancel RUN [--wait] [--json]``: cancel a run from any process sharing the
store (SPEC §7 "Timeouts and cancel"; docs/leases.md).

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

import time
from typing import Annotated, Any

import typer

from cadenza.cli.context import state
from cadenza.cli.output import fail, out, print_json
from cadenza.domain.errors import StoreError
from cadenza.domain.states import TERMINAL_RUN_STATES

WAIT_POLL_SECONDS = 0.3


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
    from cadenza.cli.run import os_user

    user = os_user()
    with state(ctx).store() as store:
        try:
            result = store.request_cancel(run_id, user)
        except StoreError as exc:
            fail(str(exc))
        final = store.get_run(run_id)
        if wait and (result.canceled or result.requested):
            deadline = time.monotonic() + timeout
            while final is not None and final.state not in TERMINAL_RUN_STATES \
                    and time.monotonic() < deadline:
                time.sleep(WAIT_POLL_SECONDS)
                final = store.get_run(run_id)
    ok = result.canceled or result.requested
    document: dict[str, Any] = {
        "id": run_id,
        "canceled": result.canceled,
        "requested": result.requested,
        "by": user,
        "state": final.state.value if final is not None else None,
        "reason": final.reason if final is not None else None,
        "message": result.message,
    }
    if as_json:
        print_json(document)
    else:
        out.print(result.message, markup=False)
        if wait and final is not None:
            out.print(f"run {run_id} is {final.state.value}"
                      + (f": {final.reason}" if final.reason else ""), markup=False)
    if not ok:
        raise typer.Exit(1)
    if wait and (final is None or final.state not in TERMINAL_RUN_STATES):
        if not as_json:
            out.print(f"run {run_id} has not ended after {timeout:g}s", markup=False)
        raise typer.Exit(1)
