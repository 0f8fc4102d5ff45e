"""``cadenza stats [--since 7d] [--json]``.

For people, the figures as tables (rich tables on a terminal, tab-separated lines under a
header when piped, as every table of the CLI): the overview, the times, the error shares,
the pools and the members cooling down. ``--json`` prints the API's document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json, print_table
from cadenza.services.stats import stats

TIME_COLUMNS = ["times", "count", "mean s", "p95 s", "max s"]


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
    print_figures(figures)


def _share(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.1f} %"


def _times(what: str, durations: Mapping[str, Any]) -> dict[str, Any]:
    return {"times": what, "count": durations.get("count"), "mean s": durations.get("mean"),
            "p95 s": durations.get("p95"), "max s": durations.get("max")}


def print_figures(figures: Mapping[str, Any]) -> None:
    """The ``stats`` document (:meth:`RunStats.as_json`) as tables, one per topic; a topic
    with nothing to show prints no table."""
    by_state = figures["runs_by_state"]
    overview = [
        {"figure": "since", "value": figures["since"]},
        {"figure": "runs", "value": sum(by_state.values())},
        *({"figure": f"runs {name}", "value": count} for name, count in by_state.items()),
        {"figure": "retry rate", "value": _share(figures["retry_rate"])},
        {"figure": "step attempts", "value": figures["step_attempts"]},
    ]
    print_table(overview, ["figure", "value"], title="Runs")
    times = [_times("queue", figures["queue_seconds"]),
             _times("execution", figures["execution_seconds"])]
    times += [_times(f"execution: {job}", d)
              for job, d in sorted(figures["execution_seconds_by_job"].items())]
    times += [_times(f"recovery: {job}", d)
              for job, d in sorted(figures["recovery_seconds_by_job"].items())]
    _gap()
    print_table(times, TIME_COLUMNS, title="Times (seconds)")
    errors = [{"error by": kind, "name": name, "share": _share(share)}
              for kind, key in (("class", "error_share_by_class"),
                                ("step type", "error_share_by_step_type"))
              for name, share in sorted(figures[key].items(), key=lambda item: -item[1])]
    if errors:
        _gap()
        print_table(errors, ["error by", "name", "share"], title="Errors")
    pools = [{"pool": name, "members": use["members"],
              "by state": ", ".join(f"{s} {n}" for s, n in sorted(use["by_state"].items())),
              "leased": _share(use["leased_share"]), "running": _share(use["running_share"])}
             for name, use in sorted(figures["resource_utilization_by_pool"].items())]
    if pools:
        _gap()
        print_table(pools, ["pool", "members", "by state", "leased", "running"],
                    title="Pools")
    cooling = figures["resources_cooling_down"]
    if cooling:
        _gap()
        print_table(cooling, ["resource", "pool", "until"], title="Cooling down")


def _gap() -> None:
    out.print("", markup=False)
