"""``cadenza runs list | show RUN | logs RUN``: the runs recorded in the store."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cadenza.cli.context import state
from cadenza.cli.output import fail, out, print_json, print_table
from cadenza.domain.states import RunState, StepState

if TYPE_CHECKING:
    from cadenza.store import RunRecord, Store

app = typer.Typer(help="Runs: history, details, logs.", no_args_is_help=True)

FOLLOW_POLL_SECONDS = 0.5


def run_document(store: Store, run: RunRecord) -> dict[str, Any]:
    """The ``runs show --json`` document of ``run`` (its steps: one entry per attempt)."""
    return {
        "id": run.id,
        "job": run.job_id,
        "state": run.state.value,
        "trigger": run.trigger,
        "scheduled_for": run.scheduled_for,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "rows": run.rows,
        "params": run.params,
        "steps": [
            {
                "name": s.step,
                "type": s.step_type,
                "state": s.state.value,
                "attempt": s.attempt,
                "rows": s.rows,
                "error": s.error,
                "reason": s.reason,
                "output": s.output,
            }
            for s in store.list_step_runs(run.id)
        ],
    }


def _states(value: str | None) -> list[RunState] | None:
    if value is None:
        return None
    names = [v.strip().upper() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in RunState.__members__]
    if unknown:
        fail(f"unknown state {', '.join(unknown)}; expected one of "
             f"{', '.join(RunState.__members__)}", 2)
    return [RunState(n) for n in names]


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
    states = _states(run_state)
    with state(ctx).store() as store:
        runs = store.list_runs(job=job, state=states, limit=limit)
    rows = [
        {
            "id": r.id,
            "job": r.job_id,
            "state": r.state.value,
            "trigger": r.trigger,
            "scheduled_for": r.scheduled_for,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            "rows": r.rows,
            "error": r.error,
        }
        for r in runs
    ]
    if as_json:
        print_json(rows)
        return
    shown = [{**row, "error": _short(run.error)} for run, row in zip(runs, rows, strict=True)]
    print_table(shown, ["id", "job", "state", "trigger", "started_at", "finished_at", "rows",
                        "error"])


def _short(text: str | None, width: int = 60) -> str | None:
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
    with state(ctx).store() as store:
        run = store.get_run(run_id)
        if run is None:
            fail(f"no run {run_id!r}")
        document = run_document(store, run)
    if as_json:
        print_json(document)
        return
    out.print(f"[bold]run {run.id}[/bold]  job {run.job_id}  {run.state.value}", markup=True)
    for key in ("trigger", "scheduled_for", "started_at", "finished_at", "rows"):
        value = document[key]
        out.print(f"  {key}: {'' if value is None else value}", markup=False)
    params = ", ".join(f"{k}={v!r}" for k, v in run.params.items()) or "none"
    out.print(f"  params: {params}", markup=False)
    if run.error:
        out.print(f"  error: {run.error}", markup=False)
    print_table(
        [{**s, "error": _short(s["error"]), "output": _short(_compact(s["output"]))}
         for s in document["steps"]],
        ["name", "type", "state", "attempt", "rows", "reason", "error", "output"],
    )


def _compact(value: Any) -> str | None:
    if value is None or value == {}:
        return None
    import json

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
    from cadenza.domain.events import Level

    if level is not None and level.upper() not in Level.__members__:
        fail(f"unknown level {level!r}; expected one of {', '.join(Level.__members__)}", 2)
    min_level = level.upper() if level else None
    with state(ctx).store() as store:
        if store.get_run(run_id) is None:
            fail(f"no run {run_id!r}")
        after: int | None = None
        collected: list[dict[str, Any]] = []
        while True:
            # Read "finished" first: the lines of a run's end commit with it, so a read
            # after seeing it finished sees them all.
            finished = store.run_is_finished(run_id) if follow else True
            lines = store.list_logs(run_id, after_id=after, min_level=min_level)
            for line in lines:
                after = line.id
                record = {"time": line.ts, "level": line.level, "step": line.step,
                          "message": line.message}
                if as_json:
                    collected.append(record)
                else:
                    _print_line(record)
            if finished:
                break
            time.sleep(FOLLOW_POLL_SECONDS)
    if as_json:
        print_json(collected)


def _print_line(record: dict[str, Any]) -> None:
    when = record["time"].isoformat(timespec="milliseconds")
    step = record["step"] or "-"
    message = str(record["message"])
    first, *rest = message.splitlines() or [""]
    out.print(f"{when} {record['level']:<7} {step:<20} {first}", markup=False, highlight=False)
    for line in rest:
        out.print(f"{'':>{len(when) + 30}}{line}", markup=False, highlight=False)


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
    from cadenza.cli.run import os_user
    from cadenza.domain.errors import InvalidTransition, StoreError

    verb = "resumed" if resume else "abandoned"
    user = os_user()
    with state(ctx).store() as store:
        try:
            if resume:
                run = store.resume_run(run_id, actor=user)
            else:
                run = store.abandon_run(run_id, actor=user,
                                        skip=_steps_after_failed(ctx, store, run_id))
        except InvalidTransition as exc:
            fail(f"run {run_id} is {exc.frm}: only a NEEDS_REVIEW run can be {verb} "
                 "(see `cadenza runs show RUN`)")
        except StoreError as exc:
            fail(str(exc))
        document = run_document(store, run)
        point = store.get_run_checkpoint(run_id) if resume else None
    document["resumes"] = run.resumes
    document["error"] = run.error
    if as_json:
        print_json(document)
        return
    if resume:
        where = f" at step {point.next_step!r}" if point and point.next_step else ""
        out.print(f"run {run.id} resumed by {user}: QUEUED, continues{where} with fresh "
                  f"attempts (resume {run.resumes})", markup=False)
    else:
        out.print(f"run {run.id} abandoned by {user}: FAILED", markup=False)


def _steps_after_failed(ctx: typer.Context, store: Store, run_id: str) -> list[tuple[str, str]]:
    """The (name, type) of the steps of the run's job after its last failed step, in the
    current configuration (none if the job is gone from it: nothing is recorded SKIPPED
    then)."""
    run = store.get_run(run_id)
    failed = [s.step for s in store.list_step_runs(run_id) if s.state is StepState.FAILED]
    if run is None or not failed:
        return []
    job = state(ctx).config().jobs.get(run.job_id)
    names = [step.name for step in job.steps] if job is not None else []
    if job is None or failed[-1] not in names:
        return []
    return [(step.name, step.type) for step in job.steps[names.index(failed[-1]) + 1:]]


# `runs cancel` lives in its own module (leases and cancel, docs/leases.md).
from cadenza.cli import runs_cancel as _runs_cancel  # noqa: E402

_runs_cancel.register(app)
