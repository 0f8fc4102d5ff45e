# ruff: noqa: F722, F821, UP037  (dbus-fast reads D-Bus signatures from the annotations)
"""A D-Bus session bus of the test's own (Debian's ``dbus-daemon``) and a notification server
on it that records what it is asked to show: ``org.freedesktop.Notifications`` as the
desktop's notification daemon offers it (Notify, GetCapabilities, GetServerInformation,
CloseNotification; the ActionInvoked signal that a click sends). Without ``dbus-daemon`` the
fixture calls ``service_missing`` (skipped on a person's machine, failed under CI=true)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, method, signal

from tests.conftest import service_missing


@dataclass
class Shown:
    """One Notify call."""

    id: int
    app_name: str
    summary: str
    body: str
    actions: list[str]


class Notifications(ServiceInterface):
    """The notification daemon's interface, recording each notification."""

    def __init__(self) -> None:
        super().__init__("org.freedesktop.Notifications")
        self.shown: list[Shown] = []

    @method()
    def Notify(self, app_name: "s", replaces_id: "u", app_icon: "s", summary: "s", body: "s",
               actions: "as", hints: "a{sv}", expire_timeout: "i") -> "u":
        self.shown.append(Shown(len(self.shown) + 1, app_name, summary, body, list(actions)))
        return len(self.shown)

    @method()
    def GetCapabilities(self) -> "as":
        return ["actions", "body"]

    @method()
    def GetServerInformation(self) -> "ssss":
        return ["cadenza-test-notifications", "cadenza", "1", "1.2"]

    @method()
    def CloseNotification(self, id: "u"):  # no answer: no return annotation
        return None

    @signal()
    def ActionInvoked(self, id: "u", action_key: "s") -> "us":
        return [id, action_key]

    @signal()
    def NotificationClosed(self, id: "u", reason: "u") -> "uu":
        return [id, reason]


@dataclass
class SessionBus:
    """The bus's address and the notification server on it."""

    address: str
    server: Notifications
    loop: asyncio.AbstractEventLoop
    extra: dict[str, Any] = field(default_factory=dict)

    def click(self, notification_id: int) -> None:
        """What a click on the notification's body sends: ActionInvoked(id, "default")."""
        self.loop.call_soon_threadsafe(self.server.ActionInvoked, notification_id, "default")


@contextmanager
def session_bus(tmp: Path) -> Iterator[SessionBus]:
    """A private session bus with the recording notification server on it."""
    daemon = shutil.which("dbus-daemon")
    if daemon is None:
        service_missing("a D-Bus session bus", "dbus-daemon is not installed (Debian: "
                        "apt-get install dbus-daemon)")
    socket_path = tmp / "session-bus"
    proc = subprocess.Popen(
        [daemon, "--session", "--nofork", "--print-address=1",
         f"--address=unix:path={socket_path}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    address = proc.stdout.readline().strip()
    if not address:
        proc.kill()
        service_missing("a D-Bus session bus",
                        f"dbus-daemon did not start: {proc.stderr.read() if proc.stderr else ''}")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = Notifications()

    async def serve() -> MessageBus:
        bus = await MessageBus(bus_address=address).connect()
        bus.export("/org/freedesktop/Notifications", server)
        await bus.request_name("org.freedesktop.Notifications")
        return bus

    bus = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    try:
        yield SessionBus(address, server, loop)
    finally:
        loop.call_soon_threadsafe(bus.disconnect)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
        proc.terminate()
        proc.wait(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if os.path.exists(socket_path):
            os.unlink(socket_path)
