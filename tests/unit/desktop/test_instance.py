"""One desktop app per home and its command port: a second app cannot take the home's lock;
commands need the key that only the home's owner can read; ``open`` takes a path of the
node's own pages only; with no app, a command says so."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from cadenza.desktop.instance import Command, DesktopInstance, ask, safe_path, send


def test_one_app_per_home_and_commands_with_the_key(tmp_path: Path) -> None:
    first, second = DesktopInstance(tmp_path), DesktopInstance(tmp_path)
    assert first.acquire()
    assert not second.acquire()
    heard: list[Command] = []

    def on_command(command: Command) -> dict[str, Any] | None:
        heard.append(command)
        return {"menu": ["Open Cadenza"]} if command.name == "menu" else None

    try:
        port = first.listen(on_command)
        info = json.loads((tmp_path / "data" / "desktop.json").read_text())
        assert info["port"] == port
        if hasattr(__import__("os"), "geteuid"):
            assert (tmp_path / "data" / "desktop.json").stat().st_mode & 0o077 == 0
        assert send(tmp_path, "show")
        assert send(tmp_path, "open", "/runs/01ABC")
        assert ask(tmp_path, "menu") == {"ok": True, "menu": ["Open Cadenza"]}
        assert ask(tmp_path, "activate", entry="quit")["ok"]
        assert not send(tmp_path, "open", "//evil.example/runs")
        assert not send(tmp_path, "open", "http://evil.example/")
        assert not send(tmp_path, "format-disk")
        # Without the key (another user, who cannot read data/desktop.json): refused.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b'{"key": "guess", "command": "quit"}\n')
            assert json.loads(sock.makefile("rb").readline()) == {"ok": False}
        assert heard == [Command("show"), Command("open", "/runs/01ABC"), Command("menu"),
                         Command("activate", entry="quit")]
    finally:
        first.close()
    assert not send(tmp_path, "show")  # no app any more
    assert second.acquire()  # the lock is free again
    second.close()


def test_only_paths_of_the_nodes_pages_are_opened() -> None:
    assert safe_path("/runs/01ABC?tab=log") == "/runs/01ABC?tab=log"
    for bad in ("runs", "//host/x", "/a\\b", "/a\nb", "http://x/", None, 3, "/" + "x" * 2001):
        assert safe_path(bad) is None
