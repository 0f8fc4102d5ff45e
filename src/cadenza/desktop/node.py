"""The node behind the desktop window (docs/desktop.md "The node"): attach to the one that
serves the home, or start one (a ``cadenza serve`` child, its output in
``data/desktop-node.log``); the desktop user and the one-time login ticket; a graceful stop.

Never two nodes on one home from the desktop: a node that answers ``/api/health`` at the
home's ``[server]`` address is used as it is (started by ``cadenza serve`` in a terminal, a
service, or an earlier desktop app), and left running when the app quits.
"""

from __future__ import annotations

import getpass
import json
import re
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import urlencode

from cadenza.domain.errors import CadenzaError
from cadenza.executor.processes import kill_tree
from cadenza.security import USERNAME_RE

if TYPE_CHECKING:
    from cadenza.services.context import Services

READY_SECONDS = 90.0
"""How long a node started by the app may take to answer (a first start migrates the
store)."""
QUIT_GRACE_SECONDS = 10.0
"""How long Quit waits for runs in progress to finish before the node is stopped outright;
their runs, left RUNNING with a lease, are taken back at once by the next start on this
computer and run again from their last checkpoint."""
TICKET_LIFETIME = timedelta(seconds=60)


class DesktopError(CadenzaError):
    """The app cannot go on; the message says why and what to do."""


def node_url(services: Services) -> str:
    """Where the home's node answers, as the window loads it (``0.0.0.0``: the loopback)."""
    server = services.settings().settings.server
    host = server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if server.tls else 'http'}://{shown}:{server.port}"


def answering(url: str, timeout: float = 2.0) -> bool:
    """Whether a Cadenza node answers ``/api/health`` at ``url`` (ok or degraded)."""
    try:
        with urllib.request.urlopen(f"{url}/api/health", timeout=timeout) as answer:
            body = answer.read(65536)
    except urllib.error.HTTPError as exc:  # 503: degraded, still a node
        body = exc.read(65536) if exc.code == 503 else b""
    except (OSError, ValueError):
        return False
    try:
        said = json.loads(body or b"{}")
    except ValueError:
        return False
    return isinstance(said, dict) and "status" in said


@dataclass
class NodeHandle:
    """The node the window shows: ``process`` when the app started it (None: attached)."""

    url: str
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _log: IO[bytes] | None = None

    @property
    def started_here(self) -> bool:
        return self.process is not None

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def stop(self, grace: float = QUIT_GRACE_SECONDS) -> str:
        """Stop a node the app started, as Ctrl+C would (runs in progress finish) within
        ``grace`` seconds, else outright; an attached node is left running. Returns what
        happened, for the log."""
        process = self.process
        if process is None:
            return "the node was started elsewhere: left running"
        if process.poll() is None:
            if sys.platform == "win32":
                process.send_signal(signal.CTRL_BREAK_EVENT)
            else:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace)
                said = "the node stopped"
            except subprocess.TimeoutExpired:
                kill_tree(process.pid)
                process.wait(30)
                said = (f"the node did not stop within {grace:g} s: stopped outright; its "
                        "runs are taken up again at the next start")
        else:
            said = f"the node had already ended (exit {process.returncode})"
        if self._log is not None:
            self._log.close()
        return said


def attach_or_start(services: Services) -> NodeHandle:
    """The home's node: the one answering at its address, else a new ``cadenza serve``."""
    url = node_url(services)
    if answering(url):
        return NodeHandle(url)
    log_path = services.home.path / "data" / "desktop-node.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    flags = 0
    if sys.platform == "win32":  # Ctrl+Break reaches it alone; no console window
        flags = subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.CREATE_NO_WINDOW
    process = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "--home", str(services.home.path), "serve"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, creationflags=flags)
    handle = NodeHandle(url, process, log_path, log)
    clock = services.clock  # the system's: a process starting takes real time
    deadline = clock.monotonic() + READY_SECONDS
    while clock.monotonic() < deadline:
        if process.poll() is not None:
            raise DesktopError(f"the node stopped at its start (exit {process.returncode}); "
                               f"its output is in {log_path}:\n{_tail(log_path)}")
        if answering(url, timeout=1.0):
            return handle
        clock.sleep(0.2)
    handle.stop(grace=5)
    raise DesktopError(f"the node did not answer at {url} within {READY_SECONDS:g} s; "
                       f"its output is in {log_path}:\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def os_user() -> str:
    """The OS user running the app."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return "desktop"


def desktop_username(os_name: str) -> str:
    """The Cadenza user of the OS user ``os_name``: the same name where it is a valid user
    name, else with every other character as ``_``."""
    name = re.sub(r"[^A-Za-z0-9_.@\-]", "_", os_name)[:64] or "desktop"
    return name if USERNAME_RE.fullmatch(name) else "desktop"


def desktop_user(services: Services) -> str:
    """The Cadenza user the window logs in as: the OS user's name. Made on first use with
    the admin role and a random password nobody sees (whoever runs this can read the home's
    files, the store and the secret key: admin gives them nothing more); an existing user
    of that name is used with its own role."""
    from cadenza.services.users import NewUser

    name = desktop_username(os_user())
    store = services.store()
    found = store.get_user(name)
    if found is None:
        services.users.add(NewUser(name, roles=["admin"]))
    elif found.disabled:
        raise DesktopError(f"the Cadenza user {name} is disabled; enable it with "
                           f"`cadenza users enable {name}` or log in with another user")
    return name


def login_url(services: Services, url: str, username: str, next_path: str = "/jobs") -> str:
    """A one-time address that logs the window in as ``username`` (a minute to use it)."""
    from cadenza.store.desktop import DesktopTickets

    ticket = secrets.token_urlsafe(32)
    DesktopTickets(services.store()).add(ticket, username, os_user(),
                                         services.clock.now() + TICKET_LIFETIME)
    return f"{url}/desktop/enter?{urlencode({'ticket': ticket, 'next': next_path})}"

