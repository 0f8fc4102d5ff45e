"""The ``cadenza`` command (README.md): a thin shell over :mod:`cadenza.services`."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

from cadenza.cli import backup as backup_cmd
from cadenza.cli import calendars as calendars_cmd
from cadenza.cli import desktop as desktop_cmd
from cadenza.cli import events as events_cmd
from cadenza.cli import home as home_cmd
from cadenza.cli import jobs as jobs_cmd
from cadenza.cli import notify as notify_cmd
from cadenza.cli import resources as resources_cmd
from cadenza.cli import resources_probe as resources_probe_cmd
from cadenza.cli import run as run_cmd
from cadenza.cli import runs as runs_cmd
from cadenza.cli import scheduling as scheduling_cmd
from cadenza.cli import secrets as secrets_cmd
from cadenza.cli import serve as serve_cmd
from cadenza.cli import simulate as simulate_cmd
from cadenza.cli import stats as stats_cmd
from cadenza.cli import tokens as tokens_cmd
from cadenza.cli import users as users_cmd
from cadenza.cli.context import CliState
from cadenza.cli.output import shown

app = typer.Typer(
    name="cadenza",
    help="Cadenza: a local-first job scheduler. Every command takes --home DIR.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(
            "--home", help="Home directory (default: $CADENZA_HOME, else the current directory)."
        ),
    ] = None,
) -> None:
    """Cadenza: a local-first job scheduler."""
    ctx.obj = cli_state = CliState(home)
    ctx.call_on_close(cli_state.close)


home_cmd.register(app)
serve_cmd.register(app)
simulate_cmd.register(app)
events_cmd.register(app)
run_cmd.register(app)
backup_cmd.register(app)
app.add_typer(runs_cmd.app, name="runs")
app.add_typer(jobs_cmd.app, name="jobs")
app.add_typer(users_cmd.app, name="users")
app.add_typer(secrets_cmd.app, name="secrets")
app.add_typer(notify_cmd.app, name="notify")
app.add_typer(notify_cmd.log_app, name="notifications")
resources_probe_cmd.register(resources_cmd.app)
app.add_typer(resources_cmd.app, name="resources")
app.add_typer(tokens_cmd.app, name="tokens")
app.add_typer(calendars_cmd.app, name="calendars")
app.add_typer(scheduling_cmd.app, name="scheduling")
app.command("stats")(stats_cmd.stats_command)
app.command("desktop")(desktop_cmd.desktop_command)


def main() -> None:
    """Entry point of the ``cadenza`` script. An unexpected error prints its traceback
    redacted and without control characters (its message may quote a secret or a remote
    server), and exits 1."""
    try:
        app()
    except Exception:
        sys.stderr.write(shown(traceback.format_exc()))
        sys.stderr.flush()
        sys.exit(1)
