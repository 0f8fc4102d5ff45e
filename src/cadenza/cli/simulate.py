"""``cadenza simulate --from T --to T``: which runs would fire, and what would hold each."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import err, print_json, print_table


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_command)


def simulate_command(
    ctx: typer.Context,
    start: Annotated[str, typer.Option("--from", help="Start (ISO; server zone if no offset).")],
    end: Annotated[str, typer.Option("--to", help="End, excluded (ISO).")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Replay the schedules and admission rules over [--from, --to) on a virtual clock.

    Nothing runs and nothing is written. Each fire is listed with its outcome (run, missed
    by on_overlap = skip, or skipped: it would not start), when it would start, and the
    rule that made it wait. Runs last their job's median duration from history (1 minute
    without history). See docs/scheduling.md.
    """
    with handled():
        fires = state(ctx).services.simulation.simulate(start, end)
    if as_json:
        print_json([fire.as_json() for fire in fires])
        return
    if not fires:
        err.print("no schedule fires in this interval", markup=False)
        return
    rows = []
    for fire in fires:
        item = fire.as_json()
        rows.append({**item, "scheduled_for": item["scheduled_for"][:16].replace("T", " ")
                     + item["scheduled_for"][19:],
                     "start": (item["start"] or "")[:16].replace("T", " ")})
    print_table(rows, ["scheduled_for", "job", "schedule", "outcome", "start", "wait_reason"])
    counts = {o: sum(1 for f in fires if f.outcome == o) for o in ("run", "missed", "skipped")}
    err.print(", ".join(f"{n} {o}" for o, n in counts.items()), markup=False)
