"""The desktop app: the window, the tray, the commands, the node (docs/desktop.md).

``cadenza desktop`` runs :func:`run_desktop`: take the home's desktop lock (or hand over to
the app that holds it), attach to or start the node, log the window in with a one-time
ticket, then run the toolkit's loop until Quit. Closing the window hides it: the node and the
tray go on. Quit (the tray, ``cadenza desktop --quit``) stops a node the app started, as
Ctrl+C would, within :data:`~cadenza.desktop.node.QUIT_GRACE_SECONDS`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadenza.desktop.instance import Command, DesktopInstance, send
from cadenza.desktop.node import (
    DesktopError,
    NodeHandle,
    attach_or_start,
    desktop_user,
    login_url,
)
from cadenza.desktop.tray import menu, read_status, tooltip
from cadenza.desktop.trays import PystrayTray, QtTray, Tray

if TYPE_CHECKING:
    from cadenza.services.context import Services

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0
"""How often the tray reads the store."""


def uses_qt() -> bool:
    """The window is Qt WebEngine (and the tray Qt's) on Linux and the BSDs."""
    return sys.platform.startswith(("linux", "freebsd", "openbsd"))


def desktop_language(services: Services, username: str) -> str:
    """The user's language (their setting), else the OS's (``$LANG``), else
    ``[server] language``, else English."""
    from cadenza.cli.calendars import reader_language

    user = services.store().get_user(username)
    if user is not None and user.language:
        return str(user.language)
    return reader_language(None, services.settings().settings.server.language) or "en"


def run_desktop(services: Services, *, background: bool = False) -> str:
    """Run the app for the home of ``services`` until Quit; returns what happened, for the
    terminal. Raises :class:`DesktopError` when it cannot start."""
    home = services.home.path
    instance = DesktopInstance(home)
    if not instance.acquire():
        if send(home, "show"):
            return "Cadenza is already open for this home: its window is in front."
        raise DesktopError(f"another Cadenza desktop app holds {home / 'data' / 'desktop.lock'}"
                           " but does not answer; end it (or wait for it to end) and try "
                           "again")
    try:
        try:
            import webview
        except ImportError:
            raise DesktopError('the desktop window needs the desktop extra: pip install '
                               '"cadenza[desktop]"') from None
        node = attach_or_start(services)
        try:
            app = DesktopApp(services, node, instance, webview, background=background)
            app.run()
        finally:
            said = node.stop()
        return said
    finally:
        instance.close()


class DesktopApp:
    """One window over the node, one tray icon, the command port."""

    def __init__(self, services: Services, node: NodeHandle, instance: DesktopInstance,
                 webview: Any, *, background: bool) -> None:
        self.services = services
        self.node = node
        self.instance = instance
        self.webview = webview
        self.background = background
        self.username = desktop_user(services)
        self.lang = desktop_language(services, self.username)
        self.last_look: datetime = services.clock.now()
        self.quitting = False
        self.stopped = threading.Event()
        self.window: Any = None
        self.tray: Tray | None = None
        self.qapp: Any = None

    # --- the loop ----------------------------------------------------------------------

    def run(self) -> None:
        qt = uses_qt()
        if qt:
            from qtpy import QtWebEngineWidgets  # noqa: F401 (before the QApplication: Qt says so)
            from qtpy.QtWidgets import QApplication

            # pywebview's Qt backend takes this one; kept here, or Python would free it
            self.qapp = QApplication.instance() or QApplication(sys.argv[:1])
            QApplication.setQuitOnLastWindowClosed(False)  # closing the window hides it
            self.tray = QtTray(self.on_entry)
        home = self.services.home.path
        self.window = self.webview.create_window(
            f"Cadenza — {home.name or home}", login_url(self.services, self.node.url,
                                                         self.username),
            width=1280, height=860, min_size=(720, 520), hidden=self.background)
        self.window.events.closing += self._on_closing
        self.instance.listen(self.on_command)
        poller = threading.Thread(target=self._poll, name="cadenza-desktop-tray", daemon=True)

        def started() -> None:
            if self.tray is None:
                self.tray = PystrayTray(self.on_entry)
            poller.start()

        try:
            self.webview.start(started, gui="qt" if qt else None, private_mode=True)
        finally:
            self.stopped.set()
            if self.tray is not None:
                self.tray.stop()

    def _poll(self) -> None:
        """Keep the tray up to date; say it once if the node the app started ended."""
        told = False
        while not self.stopped.is_set():
            try:
                status = read_status(self.services.store(), self.last_look)
                tip = tooltip(status, self.lang)
                if not self.node.alive() and not told:
                    told = True
                    log.error("the node ended; its output is in %s", self.node.log_path)
                if self.tray is not None:
                    self.tray.show(menu(status, self.lang), tip, status.look)
            except Exception:  # the store away a moment: the next round tries again
                log.exception("the tray could not read the store")
            self.services.clock.wait(self.stopped, POLL_SECONDS)

    # --- what the user (or a command) asks ---------------------------------------------

    def _on_closing(self) -> bool:
        """The window's close button: hide it, keep everything running."""
        if self.quitting:
            return True
        threading.Thread(target=self.window.hide, daemon=True).start()
        return False

    def show(self, path: str | None = None) -> None:
        """Bring the window to the front (at ``path``); looking clears "failed"."""
        if path is not None:
            self.window.load_url(self.node.url + path)
        self.window.show()
        self.window.restore()
        self.last_look = self.services.clock.now()

    def quit(self) -> None:
        """Close the window and the tray; :func:`run_desktop` then stops the node."""
        self.quitting = True
        self.window.destroy()

    def on_entry(self, key: str) -> None:
        """A tray menu entry chosen (any thread)."""
        if key == "open":
            self._later(self.show)
        elif key.startswith("run:"):
            path = f"/runs/{key.removeprefix('run:')}"
            self._later(lambda: self.show(path))
        elif key == "pause":
            self._later(self.services.scheduling.pause)
        elif key == "resume":
            self._later(self.services.scheduling.resume)
        elif key == "quit":
            self._later(self.quit)

    def _later(self, action: Any) -> None:
        """Out of the toolkit's thread: pywebview's calls wait for that thread."""
        threading.Thread(target=action, daemon=True).start()

    def on_command(self, command: Command) -> dict[str, Any] | None:
        """A command on the loopback port (see :mod:`cadenza.desktop.instance`)."""
        if command.name == "show":
            self.show()
        elif command.name == "open":
            self.show(command.path)
        elif command.name == "quit":
            self.quit()
        elif command.name == "menu":
            return {"menu": self.tray.entries() if self.tray is not None else [],
                    "tray": self.tray.state() if self.tray is not None else {},
                    "window": {"url": self.window.get_current_url() or "",
                               "hidden": self.window.hidden} if self.window else {},
                    "node": {"url": self.node.url, "started_here": self.node.started_here,
                             "pid": self.node.process.pid if self.node.process else None},
                    "pid": os.getpid()}
        elif command.name == "activate":
            return {"activated": self.tray is not None
                    and self.tray.activate(command.entry or "")}
        return None
