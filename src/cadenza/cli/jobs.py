"""``cadenza jobs list | show ID | next ID``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from rich.text import Text

from cadenza.cli.context import handled, state
from cadenza.cli.output import err, out, print_json, print_table, shown

app = typer.Typer(help="The job catalogue.", no_args_is_help=True)


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List the jobs of jobs.toml (each schedule also in words, with its zone)."""
    rows = [job.as_json() for job in state(ctx).configured().jobs.list()]
    if as_json:
        print_json(rows)
        return
    from cadenza.services.job_pages import schedule_in_words

    def when(row: dict[str, Any]) -> str:
        return schedule_in_words(row["schedule"], row["timezone"]) or "manual only"

    print_table(
        [{**r, "steps": len(r["steps"]), "enabled": "yes" if r["enabled"] else "no",
          "when": when(r)} for r in rows],
        ["id", "enabled", "schedule", "when", "tags", "steps", "presets", "description"],
    )


@app.command("show")
def show_job(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Show one job's whole definition."""
    services = state(ctx).configured()
    with handled():
        job = services.jobs.show(job_id)
    definition = job.definition
    if as_json:
        print_json({"id": job_id, **definition})
        return
    out.print(Text.assemble((shown(job_id), "bold"), f"  {shown(job.description or '')}"))
    for key, value in definition.items():
        if key in ("steps", "presets"):
            continue
        out.print(f"  {key}: {shown(value)}", markup=False)
    out.print("  steps:", markup=False)
    for index, step in enumerate(definition.get("steps", []), 1):
        rest = {k: v for k, v in step.items() if k not in ("name", "type")}
        out.print(shown(f"    {index}. {step['name']} ({step['type']}) {rest}"), markup=False)
    for name, preset in definition.get("presets", {}).items():
        out.print(shown(f"  preset {name}: {preset}"), markup=False)


@app.command("next")
def next_fires(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    count: Annotated[int, typer.Option("-n", "--count", min=1, max=1000, help="How many.")] = 10,
    start: Annotated[
        str | None,
        typer.Option("--from", help="Preview from this ISO time instead of now."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """The next fires of a job's schedule and of its scheduled presets, in time order.

    Each fire shows its local time and UTC offset, the UTC time, the schedule (job or
    preset:NAME) and a DST mark: gap (the wall time did not exist; the fire is at the first
    instant after the spring gap) or fold (the wall time occurs twice; see docs/scheduling.md).
    """
    services = state(ctx).services
    with handled():
        preview = services.jobs.next_fires(job_id, count, start)
    if as_json:
        print_json([fire.as_json() for fire in preview.fires])
        return
    for spec in preview.schedules:
        line = f"{spec.name}: {spec.expression} ({spec.words})"
        if spec.calendar_words:
            line += f", {spec.calendar_words}"
        if spec.enabled:
            out.print(line, markup=False)
        else:
            err.print(f"{line} is not listed: {spec.disabled_because}", markup=False)
    if not preview.schedules:
        err.print(f"{job_id} has no schedule (manual runs only)", markup=False)
    elif not any(spec.enabled for spec in preview.schedules):
        err.print(f"{job_id} has no enabled schedule: nothing will fire", markup=False)
    rows = [
        {
            "local time": f"{fire.local:%Y-%m-%d %H:%M}",
            "day": fire.day_name,
            "UTC offset": _offset(fire.local),
            "UTC": fire.utc.strftime("%Y-%m-%d %H:%M"),
            "schedule": fire.schedule,
            "DST": _DST_TEXT.get(fire.dst or "", ""),
            "calendar": fire.calendar.text() if fire.calendar is not None else "",
        }
        for fire in preview.fires
    ]
    if rows:
        columns = ["local time", "day", "UTC offset", "UTC", "schedule", "DST"]
        if any(fire.calendar is not None for fire in preview.fires):
            columns.append("calendar")
        print_table(rows, columns)


_DST_TEXT = {
    "gap": "gap: wall time skipped by DST, fires at the first instant after",
    "fold": "fold: wall time occurs twice",
}


def _offset(local: datetime) -> str:
    offset = local.utcoffset()
    if offset is None:
        return ""
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{mins:02d}"
