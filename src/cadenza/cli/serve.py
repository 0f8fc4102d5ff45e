"""``cadenza serve``: scheduler, workers and the HTTP server in one process."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType
from typing import Annotated

import typer

from cadenza.cli.context import state
from cadenza.cli.output import err, fail, out
from cadenza.store import Redactor


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


class _RedactingFilter(logging.Filter):
    """Log lines pass through the home's redactor: a secret never reaches the terminal."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._redactor.redact_text(record.getMessage())
        record.args = ()
        return True


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
    import uvicorn

    from cadenza.clock import clock_from_env
    from cadenza.node import Node
    from cadenza.web.app import create_app

    st = state(ctx)
    try:
        clock = clock_from_env()
    except ValueError as exc:
        fail(str(exc), 2)
    config = st.config()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_RedactingFilter(st.home.redactor))
    root = logging.getLogger("cadenza")
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    bind = host or config.settings.server.host
    bind_port = port or config.settings.server.port
    if bind in ("0.0.0.0", "::"):
        err.print(f"warning: listening on {bind} exposes Cadenza to the network", markup=False)
    store = st.home.open_store(config, clock=clock)
    node = Node(st.home, config, store, clock=clock, workers=workers,
                scheduler=not no_scheduler)
    server: uvicorn.Server | None = None
    if not no_web:
        server = uvicorn.Server(uvicorn.Config(create_app(store), host=bind, port=bind_port,
                                               log_level="warning"))
    stop = node.stop_event

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def on_hup(signum: int, frame: FrameType | None) -> None:
        node.request_reload()

    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, on_hup)
    if hasattr(signal, "SIGBREAK"):  # Windows: Ctrl+Break
        signal.signal(signal.SIGBREAK, on_stop)

    node.start()
    web_thread = None
    if server is not None:
        web_thread = threading.Thread(target=server.run, name="cadenza-web", daemon=True)
        web_thread.start()
    out.print(f"Cadenza serving {st.home.path} with {node.workers} worker(s)"
              + ("" if node.scheduler else ", scheduler off"), markup=False)
    if server is not None:
        out.print(f"URL: http://{bind}:{bind_port}/  (health: /api/health)", markup=False)
        out.print("Login: admin, with the password `cadenza init` printed "
                  "(or add one: cadenza users add NAME --role admin)", markup=False)
    sys.stdout.flush()
    try:
        while not stop.wait(0.5):
            if web_thread is not None and not web_thread.is_alive():
                err.print("error: the HTTP server stopped (is the port in use?)", markup=False)
                stop.set()
    finally:
        out.print("stopping: no new runs; waiting for running ones to finish", markup=False)
        if server is not None:
            server.should_exit = True
        node.stop()
        if web_thread is not None:
            web_thread.join(10)
        store.close()
