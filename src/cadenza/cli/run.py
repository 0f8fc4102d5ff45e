"""``cadenza run JOB``: run a job now, in this process, with live per-step progress.

With ``--local``, or when no ``cadenza serve`` leads this store, the run executes here and
the command waits for its end. Without ``--local`` while a server runs, the run is queued for
it and the command follows it to its end (``--wait``, the default). ``--no-wait`` only
records the run QUEUED and prints its id: a running ``cadenza serve`` on the same store
picks it up (its admission rules apply).
Exit codes: 0 SUCCEEDED (or queued, with ``--no-wait``), 1 FAILED, 2 usage error (unknown
job, preset, step or parameter, a malformed ``k=v``, an unknown log level, ``--no-wait``
with ``--local``), 3 any other end (CANCELED after Ctrl-C, or a run whose lease was lost).
"""

from __future__ import annotations

import getpass
import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from cadenza.cli.context import state
from cadenza.cli.output import err, fail, out, print_json
from cadenza.cli.runs import run_document
from cadenza.domain.states import TERMINAL_RUN_STATES, RunState, StepState
from cadenza.executor.tracking import Observer, RunOutcome

if TYPE_CHECKING:
    from cadenza.executor.steprun import StepOutcome
    from cadenza.store import RunRecord, Store

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_USAGE, EXIT_OTHER = 0, 1, 2, 3


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def os_user() -> str:
    """The OS user's name (``getpass.getuser``, which also works on Windows)."""
    try:
        return getpass.getuser()
    except Exception:  # no USER/LOGNAME and no passwd entry (some containers)
        return "unknown"


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
        help="Set a step argument, over its op_kwargs (a string; repeatable).",
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
    """Run a job now and show each step as it goes; exit 0 only if the run SUCCEEDED."""
    from cadenza.executor.request import RequestError, check_request, request_from_cli
    from cadenza.executor.runner import Executor

    if not wait and local:
        fail("--local runs the job in this process and waits for its end; --no-wait leaves "
             "it queued for `cadenza serve`: choose one", EXIT_USAGE)
    st = state(ctx)
    config = st.config()
    job = config.jobs.get(job_id)
    if job is None:
        fail(f"no job {job_id!r}; known jobs: {', '.join(config.jobs) or '(none)'}", EXIT_USAGE)
    try:
        request = request_from_cli(param or [], arg or [], preset=preset,
                                   disabled=disable or [], log_level=log_level)
        check_request(job, request)
    except RequestError as exc:
        fail(str(exc), EXIT_USAGE)
    user = os_user()
    console = err if as_json else out
    with st.store() as store:
        executor = Executor(store, config)
        try:
            run_id = executor.enqueue(job_id, request, trigger=f"manual:{user}", actor=user)
            if not wait:
                _queued(run_id, as_json)
                return
            if not local and server_is_running(store):
                err.print(f"run {run_id} queued for the running `cadenza serve`; following it",
                          markup=False)
                outcome = follow(store, run_id, console)
                record = store.get_run(run_id)
                document = run_document(store, record) if record is not None and as_json \
                    else None
                if document is not None:
                    print_json(document)
                raise typer.Exit(exit_code(outcome))
            outcome = _execute_here(store, executor, run_id, console, user)
        finally:
            executor.close()
        record = store.get_run(run_id)
        document = run_document(store, record) if record is not None and as_json else None
    if document is not None:
        print_json(document)
    raise typer.Exit(exit_code(outcome))


def _execute_here(store: Store, executor: Any, run_id: str, console: Console,
                  user: str) -> RunOutcome:
    """Execute the run in this process; when a try ends in a retry or a deferral (the run
    is QUEUED again with ``not_before``), wait for that time and go on, as a server would.
    Ctrl-C while the run waits (before it started, or between two tries) cancels it: it must
    not wait in the queue for a server that would run it later."""
    while True:
        progress = Progress(console)
        try:
            outcome = progress.watch(lambda p=progress: executor.execute(run_id, p))
            if outcome.state is not RunState.QUEUED:
                return outcome
            record = store.get_run(run_id)
            if record is None or record.state is not RunState.QUEUED:
                return outcome
            wait = 0.0
            if record.not_before is not None:
                wait = max((record.not_before - store.clock.now()).total_seconds(), 0.0)
            why = f" ({record.wait_reason})" if record.wait_reason else ""
            console.print(f"run {run_id} tries again in {wait:.0f}s{why}", markup=False)
            store.clock.sleep(wait)
        except KeyboardInterrupt:
            record = store.get_run(run_id)
            if record is not None and record.state is RunState.QUEUED:
                store.transition_run(run_id, RunState.CANCELED, actor=user,
                                     reason="interrupted (Ctrl-C) while it waited")
                fail(f"interrupted while run {run_id} waited; it is CANCELED", EXIT_OTHER)
            fail(f"interrupted during run {run_id}", EXIT_OTHER)


def server_is_running(store: Store) -> bool:
    """Whether a `cadenza serve` leads this store: its scheduler's leadership is taken
    (a lock file next to a SQLite store, an advisory lock on PostgreSQL). A node started
    with ``--no-scheduler`` alone is not seen; such runs then execute here."""
    from cadenza.scheduler.leader import leadership_for

    leader = leadership_for(store.engine)
    try:
        if leader.acquire():
            leader.release()
            return False
        return True
    finally:
        close = getattr(leader, "close", None)
        if close is not None:
            close()


def follow(store: Store, run_id: str, console: Console, poll: float = 0.2) -> RunOutcome:
    """Print the run's step changes as the server records them, until the run ends."""
    seen: dict[int, str] = {}
    while True:
        record = store.get_run(run_id)
        for step in store.list_step_runs(run_id):
            if seen.get(step.id) != step.state.value:
                seen[step.id] = step.state.value
                rows = f", {step.rows} rows" if step.rows is not None else ""
                why = f" ({step.reason})" if step.reason else ""
                console.print(f"step {step.step}: {step.state.value}{rows}{why}", markup=False)
        if record is None:
            return RunOutcome(run_id, None, claimed=False)
        if record.state in TERMINAL_RUN_STATES or record.state is RunState.NEEDS_REVIEW:
            console.print(f"run {run_id} {record.state.value}"
                          + (f": {record.error}" if record.error else ""), markup=False)
            return RunOutcome(run_id, record.state, record.rows, record.error, claimed=False)
        time.sleep(poll)  # following another process's progress: real time, by nature


def _queued(run_id: str, as_json: bool) -> None:
    if as_json:
        print_json({"id": run_id, "state": RunState.QUEUED.value})
        return
    out.print(run_id, markup=False)
    err.print(f"run {run_id} is queued; a running `cadenza serve` on this store starts it "
              f"(follow it with `cadenza runs logs {run_id} --follow`)", markup=False)


def exit_code(outcome: RunOutcome) -> int:
    """0 SUCCEEDED, 1 FAILED, 3 anything else."""
    if outcome.state is RunState.SUCCEEDED:
        return EXIT_SUCCEEDED
    if outcome.state is RunState.FAILED:
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


class Progress(Observer):
    """Per-step progress: a live table on a terminal, one plain line per change otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live_mode = console.is_terminal
        self.lines: dict[str, _StepLine] = {}
        self.run: RunRecord | None = None
        self.outcome: RunOutcome | None = None
        self.started = time.monotonic()

    def watch(self, execute: Any) -> RunOutcome:
        """Call ``execute()`` (which reports to this observer) while drawing progress."""
        if not self.live_mode:
            result: RunOutcome = execute()
            return result
        with Live(self, console=self.console, refresh_per_second=8, transient=False):
            result = execute()
        return result

    # Observer callbacks (the executor's thread)
    def run_started(self, run: RunRecord, steps: list[tuple[str, str]]) -> None:
        self.run = run
        self.started = time.monotonic()
        self.lines = {name: _StepLine(name, step_type) for name, step_type in steps}
        self._plain(f"run {run.id} of {run.job_id} started ({len(steps)} steps)")

    def step_started(self, name: str) -> None:
        line = self.lines[name]
        line.state, line.started = StepState.RUNNING.value, time.monotonic()
        self._plain(f"step {name}: RUNNING")

    def step_skipped(self, name: str, reason: str) -> None:
        line = self.lines[name]
        line.state, line.note = StepState.SKIPPED.value, reason
        self._plain(f"step {name}: SKIPPED ({reason})")

    def step_finished(self, name: str, outcome: StepOutcome) -> None:
        line = self.lines[name]
        line.state, line.seconds, line.rows = outcome.state.value, outcome.seconds, outcome.rows
        line.note = outcome.error or ""
        rows = f", {outcome.rows} rows" if outcome.rows is not None else ""
        error = f": {outcome.error}" if outcome.error else ""
        self._plain(f"step {name}: {outcome.state.value}{rows} in {outcome.seconds:.2f}s{error}")

    def run_finished(self, outcome: RunOutcome) -> None:
        self.outcome = outcome
        seconds = time.monotonic() - self.started
        state_text = outcome.state.value if outcome.state else "LOST"
        rows = f", {outcome.rows} rows" if outcome.rows is not None else ""
        error = f": {outcome.error}" if outcome.error else ""
        if not self.live_mode:
            self._plain(f"run {outcome.run_id} {state_text}{rows} in {seconds:.2f}s{error}")

    def _plain(self, text: str) -> None:
        if not self.live_mode:
            stamp = datetime.now().strftime("%H:%M:%S")
            self.console.print(f"{stamp} {text}", markup=False, highlight=False)

    def __rich__(self) -> Group:
        table = Table(show_edge=False, header_style="bold", box=None)
        for column in ("", "step", "type", "state", "rows", "time", ""):
            table.add_column(column)
        now = time.monotonic()
        for line in self.lines.values():
            icon: Any = _ICONS.get(line.state, Text(" "))
            if line.state == StepState.RUNNING.value:
                icon = Spinner("dots")
            seconds = line.seconds if line.seconds is not None else (
                now - line.started if line.started is not None else None)
            table.add_row(icon, line.name, line.type, Text(line.state, style=_STYLE.get(
                line.state, "")), "" if line.rows is None else str(line.rows),
                "" if seconds is None else f"{seconds:.1f}s", Text(line.note, style="dim"))
        title = Text("starting…") if self.run is None else Text(
            f"run {self.run.id} · {self.run.job_id}", style="bold")
        parts: list[Any] = [title, table]
        if self.outcome is not None:
            state_text = self.outcome.state.value if self.outcome.state else "LOST"
            summary = Text(f"{state_text}", style=_STYLE.get(state_text, "bold"))
            if self.outcome.rows is not None:
                summary.append(f" · {self.outcome.rows} rows")
            summary.append(f" · {now - self.started:.2f}s")
            if self.outcome.error:
                summary.append(f"\n{self.outcome.error}", style="red")
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
