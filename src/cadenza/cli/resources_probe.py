"""``cadenza resources probe ID [--json]``: probe one route now (:mod:`cadenza.services.probe`).

Prints what each phase found (or where it failed), the score and the state change. Exits 0
when the probe passed, 1 when it failed (the route's health is recorded either way). The
proxy's credentials are never printed.

Registered on the ``resources`` sub-app with :func:`register`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json, shown
from cadenza.services.probe import ProbeService


def register(app: typer.Typer) -> None:
    """Add ``probe`` to the ``resources`` sub-app."""
    app.command("probe")(probe_resource)


def probe_resource(
    ctx: typer.Context,
    resource_id: Annotated[str, typer.Argument(metavar="ID", help="A route's id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Probe a route now: TCP connect to its proxy, the probe URL and the IP echo through it."""
    services = state(ctx).configured()
    with handled():
        report = ProbeService(services).probe(resource_id)
    if as_json:
        print_json(report.as_json())
    else:
        if report.ok:
            egress = " ".join(x for x in (report.egress_ip, report.egress_region) if x)
            line = (f"route {report.resource_id}: passed in {report.latency_ms} ms"
                    + (f", egress {egress}" if egress else ""))
        else:
            line = (f"route {report.resource_id}: failed at phase {report.phase} "
                    f"({report.error_type}): {report.error}")
        out.print(shown(line), markup=False)
        move = (f"{report.before.value} -> {report.after.value}"
                if report.after != report.before else report.after.value)
        until = f", cooling down until {report.cooldown_until.isoformat()}" \
            if report.cooldown_until is not None and report.after is report.after.COOLDOWN \
            else ""
        out.print(f"score {report.score}; {move}{until}", markup=False)
    if not report.ok:
        raise typer.Exit(1)
