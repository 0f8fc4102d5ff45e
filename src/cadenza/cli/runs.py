"""``cadenza runs list | show RUN | logs RUN | resume RUN | abandon RUN`` (and ``cancel``).

The history commands need only cadenza.toml and the store: a bad jobs.toml prints a warning.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.text import Text

from cadenza.cli.context import handled, state
from cadenza.cli.output import out, print_json, print_table, shown
from cadenza.domain.states import RunState
from cadenza.services.history import LogLine, RunQuery, parse_states

app = typer.Typer(help="Runs: history, details, logs.", no_args_is_help=True)


@app.command("list")
def list_runs(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Option("--job", help="Only this job's runs.")] = None,
    run_state: Annotated[
        str | None, typer.Option("--state", help="Only runs in these states (comma-separated).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """List runs, newest first."""
    with handled():
        states = parse_states(run_state)
    services = state(ctx).for_history()
    with handled():
        runs = services.history.list_runs(RunQuery(job, states, limit))
    rows = [run.as_json() for run in runs]
    if as_json:
        print_json(rows)
        return
    shown = [{**row, "error": short(run.error)} for run, row in zip(runs, rows, strict=True)]
    print_table(shown, ["id", "job", "state", "trigger", "started_at", "finished_at", "rows",
                        "error"])


def short(text: str | None, width: int = 60) -> str | None:
    """The first line of ``text``, cut at ``width`` characters."""
    if text is None:
        return None
    line = text.splitlines()[0] if text else text
    return line if len(line) <= width else line[: width - 1] + "…"


@app.command("show")
def show_run(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Show one run: its state, parameters and each step run."""
    services = state(ctx).for_history()
    with handled():
        detail = services.history.get_run(run_id)
    document = detail.as_json()
    if as_json:
        print_json(document)
        return
    run = detail.run
    out.print(Text.assemble((f"run {shown(run.id)}", "bold"),
                            f"  job {shown(run.job)}  {run.state.value}"))
    for key in ("trigger", "scheduled_for", "started_at", "finished_at", "rows"):
        value = document[key]
        out.print(f"  {key}: {shown(value)}", markup=False)
    if document.get("wait_reason") and run.state is RunState.QUEUED:
        out.print(f"  waiting: {shown(document['wait_reason'])}", markup=False)
    params = ", ".join(f"{k}={v!r}" for k, v in run.params.items()) or "none"
    out.print(f"  params: {shown(params)}", markup=False)
    if run.error:
        out.print(f"  error: {shown(run.error)}", markup=False)
    if detail.parent is not None:
        parent = detail.parent
        facts = ", ".join(f for f in (f"job {parent.job}" if parent.job else "pruned",
                                      f"step {parent.step}",
                                      parent.state.value if parent.state else "") if f)
        out.print(f"  parent: run {shown(parent.run_id)} ({shown(facts)})", markup=False)
    print_table(
        [{**s, "error": short(s["error"]), "output": short(_compact(s["output"]))}
         for s in document["steps"]],
        ["name", "type", "state", "attempt", "rows", "reason", "error", "output"],
    )
    if detail.children:
        out.print("children:", markup=False)
        print_table(document["children"], ["id", "job", "step", "state", "rows",
                                           "created_at", "finished_at"])


def _compact(value: Any) -> str | None:
    if value is None or value == {}:
        return None
    return json.dumps(value, default=str, ensure_ascii=False)


@app.command("logs")
def run_logs(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the run ends.")
    ] = False,
    level: Annotated[
        str | None, typer.Option("--level", help="Only lines at this level or above.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Print a run's log: time, level, step, message."""
    from cadenza.services.history import parse_level

    with handled():
        parse_level(level)
    history = state(ctx).for_history().history
    with handled():
        lines = history.follow_logs(run_id, level) if follow else history.logs(run_id, level)
        collected: list[dict[str, Any]] = []
        for line in lines:
            if as_json:
                collected.append(line.as_json())
            else:
                _print_line(line)
    if as_json:
        print_json(collected)


def _print_line(line: LogLine) -> None:
    when = line.time.isoformat(timespec="milliseconds")
    step = shown(line.step or "-")
    first, *rest = shown(line.message).splitlines() or [""]
    out.print(f"{when} {line.level:<7} {step:<20} {first}", markup=False, highlight=False)
    for more in rest:
        out.print(f"{'':>{len(when) + 30}}{more}", markup=False, highlight=False)


@app.command("resume")
def resume_run(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Try a NEEDS_REVIEW run again: QUEUED with fresh attempts, from its checkpoint."""
    _review(ctx, run_id, resume=True, as_json=as_json)


@app.command("abandon")
def abandon_run(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Give up on a NEEDS_REVIEW run: it ends FAILED."""
    _review(ctx, run_id, resume=False, as_json=as_json)


def _review(ctx: typer.Context, run_id: str, *, resume: bool, as_json: bool) -> None:
    services = state(ctx).configured()
    with handled():
        outcome = services.runs.resume(run_id) if resume else services.runs.abandon(run_id)
    if as_json:
        print_json(outcome.as_json())
        return
    run = outcome.detail.run
    if resume:
        where = f" at step {outcome.next_step!r}" if outcome.next_step else ""
        out.print(f"run {run.id} resumed by {outcome.by}: QUEUED, continues{where} with "
                  f"fresh attempts (resume {outcome.resumes})", markup=False)
    else:
        out.print(f"run {run.id} abandoned by {outcome.by}: FAILED", markup=False)


# `runs cancel` lives in its own module (leases and cancel, docs/leases.md).
from cadenza.cli import runs_cancel as _runs_cancel  # noqa: E402

_runs_cancel.register(app)
