"""``cadenza jobs list | show ID``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cadenza.cli.context import state
from cadenza.cli.output import fail, out, print_json, print_table

app = typer.Typer(help="The job catalogue.", no_args_is_help=True)


def _summary(job_id: str, job: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "enabled": job.enabled,
        "schedule": job.schedule,
        "timezone": job.timezone,
        "tags": list(job.tags),
        "steps": [s.name for s in job.steps],
        "presets": list(job.presets),
        "description": job.description,
    }


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List the jobs of jobs.toml."""
    config = state(ctx).config()
    rows = [_summary(job_id, job) for job_id, job in config.jobs.items()]
    if as_json:
        print_json(rows)
        return
    print_table(
        [{**r, "steps": len(r["steps"]), "enabled": "yes" if r["enabled"] else "no"} for r in rows],
        ["id", "enabled", "schedule", "timezone", "tags", "steps", "presets", "description"],
    )


@app.command("show")
def show_job(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Show one job's whole definition."""
    st = state(ctx)
    config = st.config()
    job = config.jobs.get(job_id)
    if job is None:
        fail(f"no job {job_id!r}; known jobs: {', '.join(config.jobs) or '(none)'}")
    definition = st.home.redactor.redact_value(job.model_dump(mode="json", exclude_none=True))
    if as_json:
        print_json({"id": job_id, **definition})
        return
    out.print(f"[bold]{job_id}[/bold]  {job.description or ''}")
    for key, value in definition.items():
        if key in ("steps", "presets"):
            continue
        out.print(f"  {key}: {value}", markup=False)
    out.print("  steps:")
    for index, step in enumerate(definition.get("steps", []), 1):
        rest = {k: v for k, v in step.items() if k not in ("name", "type")}
        out.print(f"    {index}. {step['name']} ({step['type']}) {rest}", markup=False)
    for name, preset in definition.get("presets", {}).items():
        out.print(f"  preset {name}: {preset}", markup=False)
