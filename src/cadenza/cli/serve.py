"""``cadenza serve``: scheduler, workers and the HTTP server in one process.

A port that cannot be bound is refused before anything starts (``error: cannot listen on
127.0.0.1:8080: address already in use``, exit 1); an HTTP server that dies later stops the
node and exits 1 too."""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import err, guarded_streams, out
from cadenza.server import ServeOptions, open_server
from cadenza.services import Services


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", help="Bind address ([server].host).")
                    ] = None,
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535)] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, max=1024,
                                                help="Concurrent runs ([workers].count).")] = None,
    no_web: Annotated[bool, typer.Option("--no-web", help="No HTTP server.")] = False,
    no_scheduler: Annotated[bool, typer.Option("--no-scheduler",
                                               help="Run queued runs, fire no schedule.")] = False,
) -> None:
    """Start the server: fire schedules, run queued runs, serve the API; Ctrl+C stops."""
    services = state(ctx).configured()
    # What other code prints (uvicorn, a thread-isolated step, a warning) is redacted and
    # made inert on its way to the terminal; the log handler writes there too.
    with guarded_streams():
        _serve(services, ServeOptions(host, port, workers, web=not no_web,
                                      scheduler=not no_scheduler))


def _serve(services: Services, options: ServeOptions) -> None:
    """Open the server on ``services``, start it, wait until it is asked to stop, stop it."""
    with handled():
        server = open_server(services, options)
    if server.warning is not None:
        err.print(server.warning, markup=False)
    from cadenza.services.config import home_mode_warnings

    for line in home_mode_warnings(services.home.path):
        err.print(line, markup=False)
    stop = server.stop_event

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def on_hup(signum: int, frame: FrameType | None) -> None:
        server.reload()

    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, on_hup)
    if hasattr(signal, "SIGBREAK"):  # Windows: Ctrl+Break
        signal.signal(signal.SIGBREAK, on_stop)

    server.start()
    out.print(f"Cadenza serving {services.home.path} with {server.workers} worker(s)"
              + ("" if server.scheduling else ", scheduler off"), markup=False)
    if server.web is not None:
        out.print(f"URL: {server.url}  (health: /api/health)",
                  markup=False)
        out.print("Login: admin, with the password `cadenza init` printed "
                  "(or add one: cadenza users add NAME --role admin)", markup=False)
    sys.stdout.flush()

    def web_stopped() -> None:
        err.print("error: the HTTP server stopped unexpectedly", markup=False)

    try:
        web_died = server.run_until_stopped(web_stopped)
    finally:
        out.print("stopping: no new runs; waiting for running ones to finish", markup=False)
        server.stop()
    if web_died:
        raise typer.Exit(1)
