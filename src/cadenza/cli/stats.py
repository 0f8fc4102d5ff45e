"""``cadenza stats [--since 7d] [--json]``."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json
from cadenza.services.stats import stats


def stats_command(
    ctx: typer.Context,
    since: Annotated[str | None, typer.Option("--since", help="An age (7d, 12h) or ISO time.")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Queue and execution times, retry rate, error shares, time to recovery, pool
    utilization and resources cooling down (the dashboard's figures, docs/ui.md)."""
    services = state(ctx).services
    with handled():
        figures = stats(services.store(), services.clock, since).as_json()
    if as_json:
        print_json(figures)
        return
    for key, value in figures.items():
        out.print(f"{key}: {value}", markup=False, soft_wrap=True)
