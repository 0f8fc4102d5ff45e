"""``cadenza desktop [--background] [--quit] [--install-autostart | --remove-autostart]``: the
home's node in a native window with a tray icon (docs/desktop.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import out


def desktop_command(
    ctx: typer.Context,
    background: Annotated[bool, typer.Option(
        "--background", help="Start with the tray only; the window opens from it.")] = False,
    quit_app: Annotated[bool, typer.Option(
        "--quit", help="Quit the desktop app of this home (and a node it started).")] = False,
    install_autostart: Annotated[bool, typer.Option(
        "--install-autostart", help="Start the app (in the background) when you log in.")
    ] = False,
    remove_autostart: Annotated[bool, typer.Option(
        "--remove-autostart", help="No longer start the app when you log in.")] = False,
) -> None:
    """Open the home in a desktop window, logged in as you, with a tray icon; closing the
    window leaves the node running, Quit in the tray stops it. A second start brings the
    first window to the front."""
    from cadenza.desktop.autostart import Autostart, AutostartError
    from cadenza.desktop.instance import send
    from cadenza.desktop.node import os_user
    from cadenza.services.context import Actor, Services

    base = state(ctx).services
    home = base.home.path
    if install_autostart or remove_autostart:
        entry = Autostart.of(home)
        try:
            if install_autostart:
                out.print(f"Cadenza will start at login: {entry.install()}", markup=False)
            else:
                removed = entry.remove()
                out.print(f"Removed: {removed}" if removed else
                          "Nothing to remove: Cadenza was not set to start at login.",
                          markup=False)
        except AutostartError as exc:
            out.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
        return
    if quit_app:
        out.print("Quitting the desktop app." if send(home, "quit")
                  else "No desktop app runs for this home.", markup=False)
        return
    state(ctx).configured()
    services = Services(base.home, actor=Actor("desktop", os_user()), clock=base.clock)
    from cadenza.desktop.app import run_desktop

    with services, handled():
        said = run_desktop(services, background=background)
    out.print(said, markup=False)
