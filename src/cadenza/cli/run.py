"""``cadenza run JOB``: run a job now, in this process, with live per-step progress.

With ``--local``, or when no ``cadenza serve`` leads this store, the run executes here and
the command waits for its end. Without ``--local`` while a server runs, the run is queued for
it and the command follows it to its end (``--wait``, the default). ``--no-wait`` only
records the run QUEUED and prints its id: a running ``cadenza serve`` on the same store
picks it up (its admission rules apply).
Exit codes: 0 SUCCEEDED (or queued, with ``--no-wait``), 1 FAILED, 2 usage error (unknown
job, preset, step or parameter, a malformed ``k=v``, an unknown log level, ``--no-wait``
with ``--local``), 3 any other end (NEEDS_REVIEW, CANCELED after Ctrl-C, or a run whose
lease was lost), or a write to the store that failed (a full disk, a read-only store: one
message says what was not recorded and what is kept; a step is shown done only once its end
is recorded).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from cadenza.cli.context import EXIT_USAGE, handled, state
from cadenza.cli.output import (
    current_redactor,
    err,
    fail,
    guarded_streams,
    out,
    print_json,
    shown,
)
from cadenza.domain.states import RunState, StepState
from cadenza.services import Interrupted, InvalidRequest, NotFound
from cadenza.services.runs import RunProgress, RunResult, StepResult
from cadenza.services.terminal import printable, sanitized_std_streams

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.services import Services
    from cadenza.services.history import StepView

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_OTHER = 0, 1, 3


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB", help="The job to run.")],
    param: Annotated[list[str] | None, typer.Option(
        "-p", "--param", metavar="NAME=VALUE",
        help="Set a job parameter (a string; repeatable). NAME must be in the job's params.",
    )] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="Use a preset's values.")] = None,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="STEP.NAME=VALUE",
        help="Set a step argument (over op_kwargs) or a field of the step (mode, ...); "
             "a string; repeatable.",
    )] = None,
    disable: Annotated[list[str] | None, typer.Option(
        "--disable", metavar="STEP", help="Skip this step (repeatable).",
    )] = None,
    log_level: Annotated[str | None, typer.Option(
        "--log-level", metavar="LEVEL", help="WARNING, INFO or DEBUG (DEBUG adds the SQL).",
    )] = None,
    local: Annotated[bool, typer.Option(
        "--local", help="Execute in this process and wait (what happens without --no-wait).",
    )] = False,
    wait: Annotated[bool, typer.Option(
        "--wait/--no-wait",
        help="Wait for the end (default), or only queue the run for `cadenza serve`.",
    )] = True,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the finished run as `runs show --json` does.",
    )] = False,
) -> None:
    """Run a job now and show each step as it goes; exit 0 only if the run SUCCEEDED.

    Exit codes: 0 SUCCEEDED (with --no-wait: queued), 1 FAILED, 2 usage error, 3 any other
    end: NEEDS_REVIEW (resume or abandon it with `cadenza runs`), CANCELED, or a lost lease.
    """
    if not wait and local:
        fail("--local runs the job in this process and waits for its end; --no-wait leaves "
             "it queued for `cadenza serve`: choose one", EXIT_USAGE)
    services = state(ctx).configured()
    runs = services.runs
    console = err if as_json else out
    with handled(usage=(NotFound, InvalidRequest)):
        request = runs.request(job_id, params=param or [], step_args=arg or [],
                               preset=preset, disabled=disable or [], log_level=log_level)
        runs.check(request)
    with guarded_streams(), handled():
        run_id = runs.enqueue(request)
        if not wait:
            _queued(run_id, as_json)
            return
        if not local and runs.server_is_running():
            err.print(f"run {run_id} queued for the running `cadenza serve`; following it",
                      markup=False)
            result = runs.follow(
                run_id, lambda step: _print_step(console, step),
                on_wait=lambda why: console.print(f"run {run_id} QUEUED: {shown(why)}",
                                                  markup=False))
            _print_followed_end(console, result)
        else:
            result = _execute_here(services, run_id, console)
    if as_json:
        with handled():
            print_json(services.history.get_run(run_id).as_json())
    raise typer.Exit(exit_code(result))


def _execute_here(services: Services, run_id: str, console: Console) -> RunResult:
    """Execute the run in this process, through its retries and deferrals; Ctrl-C while
    it waits cancels it."""
    def retry(seconds: float, reason: str | None) -> None:
        why = f" ({shown(reason)})" if reason else ""
        console.print(f"run {run_id} tries again in {seconds:.0f}s{why}", markup=False)

    try:
        return services.runs.execute_here(
            run_id, lambda: Progress(console, services.clock), on_retry=retry)
    except Interrupted as exc:
        fail(str(exc), EXIT_OTHER)


def _print_step(console: Console, step: StepView) -> None:
    rows = f", {step.rows} rows" if step.rows is not None else ""
    why = f" ({shown(step.reason)})" if step.reason else ""
    console.print(f"step {step.name}: {step.state.value}{rows}{why}", markup=False)


def _print_followed_end(console: Console, result: RunResult) -> None:
    if result.state is None:
        return
    console.print(f"run {result.run_id} {result.state.value}"
                  + (f": {shown(result.error)}" if result.error else ""), markup=False)


def _queued(run_id: str, as_json: bool) -> None:
    if as_json:
        print_json({"id": run_id, "state": RunState.QUEUED.value})
        return
    out.print(run_id, markup=False)
    err.print(f"run {run_id} is queued; a running `cadenza serve` on this store starts it "
              f"(follow it with `cadenza runs logs {run_id} --follow`)", markup=False)


def exit_code(result: RunResult) -> int:
    """0 SUCCEEDED, 1 FAILED, 3 anything else (NEEDS_REVIEW, CANCELED, a lost lease)."""
    if result.state is RunState.SUCCEEDED:
        return EXIT_SUCCEEDED
    if result.state is RunState.FAILED:
        return EXIT_FAILED
    return EXIT_OTHER


class _StepLine:
    def __init__(self, name: str, step_type: str) -> None:
        self.name = name
        self.type = step_type
        self.state = StepState.PENDING.value
        self.started: float | None = None
        self.seconds: float | None = None
        self.rows: int | None = None
        self.note = ""


class Progress(RunProgress):
    """Per-step progress: a live table on a terminal, one plain line per change otherwise."""

    def __init__(self, console: Console, clock: Clock) -> None:
        self.console = console
        self.clock = clock
        self.live_mode = console.is_terminal
        self.lines: dict[str, _StepLine] = {}
        self.title: str | None = None
        self.outcome: RunResult | None = None
        self.outcome_error = ""  # the run's error as shown (redacted, inert)
        self.started = clock.monotonic()

    def drawing(self) -> AbstractContextManager[object]:
        """A live table on a terminal while the try executes; nothing otherwise."""
        if not self.live_mode:
            return nullcontext()
        stack = ExitStack()
        stack.enter_context(Live(self, console=self.console, refresh_per_second=8,
                                 transient=False))
        # The live display sends what other code prints through the console, above it:
        # redact and neutralise it on the way in.
        stack.enter_context(sanitized_std_streams(current_redactor()))
        return stack

    # Progress callbacks (the executor's thread)
    def run_started(self, run_id: str, job_id: str, steps: list[tuple[str, str]]) -> None:
        self.title = f"run {run_id} · {job_id}"
        self.started = self.clock.monotonic()
        self.lines = {name: _StepLine(name, step_type) for name, step_type in steps}
        self._plain(f"run {run_id} of {job_id} started ({len(steps)} steps)")

    def step_started(self, name: str) -> None:
        line = self.lines[name]
        line.state, line.started = StepState.RUNNING.value, self.clock.monotonic()
        self._plain(f"step {name}: RUNNING")

    def step_skipped(self, name: str, reason: str) -> None:
        line = self.lines[name]
        line.state, line.note = StepState.SKIPPED.value, shown(reason)
        self._plain(f"step {name}: SKIPPED ({line.note})")

    def step_finished(self, name: str, result: StepResult) -> None:
        line = self.lines[name]
        line.state, line.seconds, line.rows = result.state.value, result.seconds, result.rows
        line.note = shown(result.error) if result.error else ""
        rows = f", {result.rows} rows" if result.rows is not None else ""
        error = f": {line.note}" if result.error else ""
        self._plain(f"step {name}: {result.state.value}{rows} in {result.seconds:.2f}s{error}")

    def run_finished(self, result: RunResult) -> None:
        self.outcome_error = shown(result.error) if result.error else ""
        self.outcome = result
        seconds = self.clock.monotonic() - self.started
        state_text = result.state.value if result.state else "LOST"
        rows = f", {result.rows} rows" if result.rows is not None else ""
        error = f": {self.outcome_error}" if result.error else ""
        if not self.live_mode:
            self._plain(f"run {result.run_id} {state_text}{rows} in {seconds:.2f}s{error}")

    def _plain(self, text: str) -> None:
        if not self.live_mode:
            stamp = self.clock.now().astimezone().strftime("%H:%M:%S")
            self.console.print(f"{stamp} {text}", markup=False, highlight=False)

    def __rich__(self) -> Group:
        table = Table(show_edge=False, header_style="bold", box=None)
        for column in ("", "step", "type", "state", "rows", "time", ""):
            table.add_column(column)
        now = self.clock.monotonic()
        for line in self.lines.values():
            icon: Any = _ICONS.get(line.state, Text(" "))
            if line.state == StepState.RUNNING.value:
                icon = Spinner("dots")
            seconds = line.seconds if line.seconds is not None else (
                now - line.started if line.started is not None else None)
            table.add_row(icon, line.name, line.type, Text(line.state, style=_STYLE.get(
                line.state, "")), "" if line.rows is None else str(line.rows),
                "" if seconds is None else f"{seconds:.1f}s", Text(line.note, style="dim"))
        title = Text("starting…") if self.title is None else Text(printable(self.title),
                                                                   style="bold")
        parts: list[Any] = [title, table]
        if self.outcome is not None:
            state_text = self.outcome.state.value if self.outcome.state else "LOST"
            summary = Text(f"{state_text}", style=_STYLE.get(state_text, "bold"))
            if self.outcome.rows is not None:
                summary.append(f" · {self.outcome.rows} rows")
            summary.append(f" · {now - self.started:.2f}s")
            if self.outcome_error:
                summary.append(f"\n{self.outcome_error}", style="red")
            parts.append(summary)
        return Group(*parts)


_ICONS = {
    StepState.PENDING.value: Text("·", style="dim"),
    StepState.SUCCEEDED.value: Text("✔", style="green"),
    StepState.FAILED.value: Text("✘", style="red"),
    StepState.SKIPPED.value: Text("–", style="yellow"),
    StepState.CANCELED.value: Text("■", style="yellow"),
}
_STYLE = {
    "SUCCEEDED": "green", "FAILED": "red", "SKIPPED": "yellow", "CANCELED": "yellow",
    "RUNNING": "cyan", "LOST": "red",
}
