"""``cadenza serve``: the server process."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import state
from cadenza.cli.output import err, out


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option("--host", help="Bind address ([server].host).")
    ] = None,
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535)] = None,
) -> None:
    """Start the server (for now the HTTP API's /api/health; see CHANGELOG)."""
    import uvicorn

    from cadenza.web.app import create_app

    st = state(ctx)
    config = st.config()
    bind = host or config.settings.server.host
    bind_port = port or config.settings.server.port
    if bind in ("0.0.0.0", "::"):
        err.print(f"warning: listening on {bind} exposes Cadenza to the network", markup=False)
    with st.store() as store:
        out.print(f"Cadenza serving {st.home.path}", markup=False)
        out.print(f"URL: http://{bind}:{bind_port}/  (health: /api/health)", markup=False)
        out.print(
            "Login: admin, with the password `cadenza init` printed "
            "(or add one: cadenza users add NAME --role admin)",
            markup=False,
        )
        uvicorn.run(create_app(store), host=bind, port=bind_port, log_level="warning")
