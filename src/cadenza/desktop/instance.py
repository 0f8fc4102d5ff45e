"""One desktop app per home, and the commands it takes (docs/desktop.md "One window").

The app holds an OS lock on ``data/desktop.lock`` (``flock`` on POSIX, ``msvcrt.locking`` on
Windows; the OS drops it when the process ends, however it ends) and listens on a loopback TCP
port of its own. ``data/desktop.json`` says where, with a random key: only a process that can
read the home's ``data/`` (its owner) can command the app. A command is one JSON line
``{"key": …, "command": …, "path": "/runs/…", "entry": "quit"}``, answered by one JSON
line ``{"ok": true, …}``; a second ``cadenza desktop`` sends ``show``, a notification click
``open``, ``cadenza desktop --quit`` ``quit``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cadenza.scheduler.leader import try_lock_file, unlock_file

log = logging.getLogger(__name__)

COMMANDS = ("show", "open", "quit", "menu", "activate")
"""What the app does when told: bring its window to the front, show a page in it, quit, say
its tray menu's entries (as the tray shows them), activate a tray menu entry by its key."""
ANSWER_SECONDS = 5.0


@dataclass(frozen=True)
class Command:
    """One command received: ``name`` of :data:`COMMANDS`; for ``open``, a path of the
    node's pages (``/runs/ID``); for ``activate``, the menu entry's key."""

    name: str
    path: str | None = None
    entry: str | None = None


def _paths(home: Path) -> tuple[Path, Path]:
    data = home / "data"
    return data / "desktop.lock", data / "desktop.json"


def safe_path(path: object) -> str | None:
    """A path of the node's own pages (``/…``, never ``//host`` or a URL), or None."""
    if not isinstance(path, str) or not path.startswith("/") or path.startswith("//") \
            or "\\" in path or any(ord(ch) < 32 for ch in path) or len(path) > 2000:
        return None
    return path


class DesktopInstance:
    """The lock and the command port of the desktop app of one home."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.lock_path, self.info_path = _paths(home)
        self._handle: IO[str] | None = None
        self._server: socketserver.ThreadingTCPServer | None = None

    def acquire(self) -> bool:
        """Take the home's desktop lock; False when another app holds it."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.lock_path, "a+", encoding="utf-8")
        try:
            try_lock_file(handle)
        except OSError:
            handle.close()
            return False
        self._handle = handle
        return True

    def listen(self, on_command: Callable[[Command], dict[str, Any] | None]) -> int:
        """Answer commands on a loopback port (a thread); returns the port. ``on_command``
        runs in that thread, for each well-formed command with the right key; what it
        returns is added to the answer."""
        key = secrets.token_urlsafe(24)

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(ANSWER_SECONDS)
                try:
                    said = json.loads(self.rfile.readline(4096) or b"{}")
                except (ValueError, OSError):
                    said = {}
                command = _command(said, key)
                answer: dict[str, Any] = {"ok": command is not None}
                if command is not None:
                    try:
                        answer.update(on_command(command) or {})
                    except Exception as exc:  # the app's handler: logged, the port goes on
                        log.exception("desktop command %s failed", command.name)
                        answer = {"ok": False, "error": str(exc)}
                self.wfile.write(json.dumps(answer).encode() + b"\n")

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, name="cadenza-desktop-commands",
                         daemon=True).start()
        port = int(server.server_address[1])
        info = {"pid": os.getpid(), "port": port, "key": key}
        tmp = self.info_path.with_name(self.info_path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(info, fh)
        os.replace(tmp, self.info_path)
        return port

    def close(self) -> None:
        """Stop answering, forget the port, release the lock."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            try:
                self.info_path.unlink()
            except OSError:
                pass
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                unlock_file(handle)
            except OSError:
                pass
            handle.close()


def _command(said: Any, key: str) -> Command | None:
    if not isinstance(said, dict) or not secrets.compare_digest(str(said.get("key", "")), key):
        return None
    name = said.get("command")
    if name not in COMMANDS:
        return None
    if name == "open":
        path = safe_path(said.get("path"))
        return Command("open", path) if path is not None else None
    if name == "activate":
        entry = said.get("entry")
        return Command("activate", entry=entry) if isinstance(entry, str) else None
    return Command(str(name))


def send(home: Path, name: str, path: str | None = None) -> bool:
    """Tell the desktop app of ``home`` to do ``name`` (``open``: show ``path``); False when
    no app answers (none runs, or it is not this user's)."""
    return bool(ask(home, name, path=path).get("ok"))


def ask(home: Path, name: str, *, path: str | None = None, entry: str | None = None,
        timeout: float = ANSWER_SECONDS) -> dict[str, Any]:
    """Send one command to the desktop app of ``home``; its answer (``{}`` when none)."""
    _lock, info_path = _paths(home)
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
        port, key = int(info["port"]), str(info["key"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    said = {"key": key, "command": name, "path": path, "entry": entry}
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(json.dumps(said).encode() + b"\n")
            answer = sock.makefile("rb").readline(1 << 20)
    except OSError:
        return {}
    try:
        found = json.loads(answer or b"{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
