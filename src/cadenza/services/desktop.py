"""The desktop app as the CLI asks for it (docs/desktop.md): run it for the home, quit the
one that runs, install or remove its start at login."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadenza.services.errors import Refused

if TYPE_CHECKING:
    from cadenza.services.context import Services


class DesktopService:
    """``cadenza desktop`` over one home."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def run(self, *, background: bool = False) -> str:
        """Run the app until Quit, as the OS user (actor ``desktop:<user>``); returns what
        happened to the node."""
        from cadenza.desktop.app import run_desktop
        from cadenza.desktop.node import os_user
        from cadenza.services.context import Actor, Services

        mine = Services(self.services.home, actor=Actor("desktop", os_user()),
                        clock=self.services.clock)
        with mine:
            return run_desktop(mine, background=background)

    def quit(self) -> bool:
        """Ask the app of this home to quit; False when none runs."""
        from cadenza.desktop.instance import send

        return send(self.services.home.path, "quit")

    def install_autostart(self) -> str:
        """Start the app at login; returns where it is registered."""
        from cadenza.desktop.autostart import Autostart, AutostartError

        try:
            return Autostart.of(self.services.home.path).install()
        except AutostartError as exc:
            raise Refused(str(exc)) from None

    def remove_autostart(self) -> str | None:
        """No longer start it at login; returns what was removed (None: nothing was)."""
        from cadenza.desktop.autostart import Autostart, AutostartError

        try:
            return Autostart.of(self.services.home.path).remove()
        except AutostartError as exc:
            raise Refused(str(exc)) from None
