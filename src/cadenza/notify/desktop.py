"""Desktop notifications: the channel type ``desktop`` (docs/notifications.md "On the
desktop").

The node shows the notification on the desktop of the user it runs as, through
desktop-notifier: D-Bus ``org.freedesktop.Notifications`` on Linux (the session bus of
``$DBUS_SESSION_BUS_ADDRESS``), a toast on Windows (WinRT). A click opens the run's page:
in the desktop window when ``cadenza desktop`` runs for the home (its command port,
:mod:`cadenza.desktop.instance`), else in the default browser when ``[server] base_url``
gives the address.

desktop-notifier is asyncio: one loop per process, in a thread of its own, keeps the
connection that hears the clicks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import webbrowser
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadenza.notify.channels import DeliveryFailed, Message

if TYPE_CHECKING:
    from cadenza.config.schema_settings import DesktopChannel

BODY_LIMIT = 300


def summary(message: Message) -> tuple[str, str]:
    """The title and the short body of ``message`` on the desktop: the subject, then the
    failing step and its error (or the reason), else the body's first line."""
    fields = message.fields
    said = fields.get("error") or fields.get("reason")
    step = fields.get("failing_step")
    if said:
        body = f"{step}: {said}" if step else str(said)
    else:
        body = next((line.strip() for line in message.text.splitlines() if line.strip()), "")
    body = " ".join(body.split())
    if len(body) > BODY_LIMIT:
        body = body[: BODY_LIMIT - 1] + "…"
    return message.subject, body


def open_run(home: Path | None, run_id: str | None, link: str | None) -> str:
    """What a click does: the run's page in the desktop window of ``home``, else ``link`` in
    the browser. Returns where it went (``window``, ``browser``, ``nowhere``)."""
    from cadenza.desktop.instance import send

    if home is not None and run_id and send(home, "open", f"/runs/{run_id}"):
        return "window"
    if link and webbrowser.open(link):
        return "browser"
    return "nowhere"


class DesktopNotices:
    """The process's notifier (:meth:`shared`); :meth:`show` waits for the desktop to take
    the notification."""

    _shared: DesktopNotices | None = None
    _made = threading.Lock()

    def __init__(self) -> None:
        # desktop-notifier logs every failed notification with its traceback, on every
        # retry; the delivery's own error says why, once per try, in the outbox and the log.
        logging.getLogger("desktop_notifier").setLevel(logging.ERROR)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever,
                                       name="cadenza-desktop-notices", daemon=True)
        self.thread.start()
        self.notifier: Any = None
        self.clicked: list[str] = []
        """The run ids of the notifications clicked, oldest first (for the log and tests)."""

    @classmethod
    def shared(cls) -> DesktopNotices:
        with cls._made:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def show(self, channel: DesktopChannel, message: Message, home: Path | None) -> str:
        """Show ``message``; returns the notification's id. Raises :class:`DeliveryFailed`
        (retried: the desktop session may be back later)."""
        title, body = summary(message)
        run_id = message.fields.get("run_id")
        link = message.fields.get("link")

        def on_clicked() -> None:
            self.clicked.append(str(run_id))
            threading.Thread(target=open_run, args=(home, run_id, link), daemon=True).start()

        future = asyncio.run_coroutine_threadsafe(self._send(title, body, on_clicked),
                                                  self.loop)
        seconds = channel.timeout.total_seconds()
        try:
            shown, ident = future.result(seconds)
        except FutureTimeout:
            future.cancel()
            raise DeliveryFailed(f"the desktop did not take the notification within "
                                 f"{seconds:g} s", permanent=False) from None
        except Exception as exc:
            shown, ident = False, f"{type(exc).__name__}: {exc}"
        if not shown:
            self.notifier = None  # a new connection next time
            where = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
            hint = (f"on Linux the node must run in the user's desktop session, whose D-Bus "
                    f"offers notifications (DBUS_SESSION_BUS_ADDRESS is "
                    f"{where!r})" if sys.platform.startswith("linux") else
                    "the node must run in the user's desktop session")
            raise DeliveryFailed(f"no desktop session to show it on: {hint}",
                                 permanent=False)
        return ident

    def close(self) -> None:
        """Disconnect from the desktop and end the loop's thread."""

        self.notifier = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    async def _send(self, title: str, body: str, on_clicked: Any) -> tuple[bool, str]:
        """(shown, its id): desktop-notifier logs a failure instead of raising it, so
        "shown" is its ``on_dispatched`` call."""
        if self.notifier is None:
            from desktop_notifier import DesktopNotifier

            self.notifier = DesktopNotifier(app_name="Cadenza", app_icon=None)
        dispatched: list[bool] = []
        ident = await self.notifier.send(title=title, message=body, on_clicked=on_clicked,
                                         on_dispatched=lambda: dispatched.append(True))
        return bool(dispatched), str(ident)
