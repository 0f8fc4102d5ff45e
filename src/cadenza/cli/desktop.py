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
    desktop = state(ctx).services.desktop
    with handled():
        if install_autostart:
            out.print(f"Cadenza will start at login: {desktop.install_autostart()}",
                      markup=False)
            return
        if remove_autostart:
            removed = desktop.remove_autostart()
            out.print(f"Removed: {removed}" if removed else
                      "Nothing to remove: Cadenza was not set to start at login.",
                      markup=False)
            return
        if quit_app:
            out.print("Quitting the desktop app." if desktop.quit()
                      else "No desktop app runs for this home.", markup=False)
            return
    state(ctx).configured()
    with handled():
        said = desktop.run(background=background)
    out.print(said, markup=False)
