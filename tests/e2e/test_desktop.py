"""``cadenza desktop`` end to end on a virtual display (Xvfb), as a person uses it: the
window opens logged in on the jobs page, the tray's menu is there and acts (pause, quit), a
second start brings the first window forward instead of starting a second node, closing
the window leaves a run to finish, quitting during a run hands it back to the next start
(nothing doubled). The window is Qt WebEngine (pywebview), the tray Qt's; their menu and
state are read through the app's command port, which reads them from the toolkit."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cadenza.desktop.instance import ask
from tests.e2e.lease_home import cli, enqueue, make_home, open_store, run_state
from tests.e2e.serve_helpers import eventually, free_port
from tests.support.xdisplay import (
    close_window,
    desktop_env,
    screenshot,
    virtual_display,
    window_titled,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32",
                                reason="Xvfb and Qt's X11 tray: the Linux desktop")

NAP = '''
"""A step that writes when it starts and ends, with its process and attempt."""

import os
import time


def nap(log_file, seconds=20):
    with open(log_file, "a") as fh:
        fh.write(f"start {os.getpid()} {time.time()}\\n")
    time.sleep(float(seconds))
    with open(log_file, "a") as fh:
        fh.write(f"end {os.getpid()} {time.time()}\\n")
    return 1


def boom():
    raise RuntimeError("the source is unreachable")
'''
TITLE = "Cadenza — "


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    try:
        import webview  # noqa: F401
    except ImportError as exc:
        from tests.conftest import service_missing

        service_missing("the desktop extra (pywebview)", exc)
    with virtual_display() as name:
        yield name


def desktop_home(root: Path, naps: Path, seconds: int, lease: str = "3s") -> Path:
    """A home whose ``nap`` job sleeps ``seconds``; the run lease is short (3 s) so that a
    run left by a node that is gone is taken back quickly."""
    home = make_home(root, f"""
    [jobs.nap]
    [[jobs.nap.steps]]
    name = "nap"
    type = "python"
    callable = "cz_nap:nap"
    op_kwargs = {{ log_file = "{naps.as_posix()}", seconds = {seconds} }}

    [jobs.broken]
    [jobs.broken.retry]
    attempts = 1
    [[jobs.broken.steps]]
    name = "load"
    type = "python"
    callable = "cz_nap:boom"
    """, lease=lease, extra=f"\n[server]\nport = {free_port()}\n")
    (home / "plugins" / "cz_nap.py").write_text(NAP, encoding="utf-8")
    return home


class Desktop:
    """One ``cadenza desktop`` process."""

    def __init__(self, home: Path, display: str, *args: str) -> None:
        self.home = home
        self.log = home / f"desktop-{time.monotonic_ns()}.out"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cadenza", "--home", str(home), "desktop", *args],
                stdout=out, stderr=subprocess.STDOUT, env=desktop_env(display))

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def ask(self, name: str, **kw: Any) -> dict[str, Any]:
        return ask(self.home, name, **kw)

    def wait_ready(self) -> dict[str, Any]:
        """Until the window shows the jobs page, logged in (real time: Qt starting)."""
        def ready() -> dict[str, Any] | None:
            assert self.proc.poll() is None, self.output()
            said = self.ask("menu")
            url = said.get("window", {}).get("url", "")
            keys = {e.get("key") for e in said.get("menu", [])}
            return said if url.endswith("/jobs") and "quit" in keys else None
        return eventually(ready, 90, "the desktop window on the jobs page, its tray read")

    def quit(self, timeout: float = 60) -> str:
        if self.proc.poll() is None:
            assert self.ask("activate", entry="quit").get("activated") is True
            self.proc.wait(timeout)
        return self.output()

    def kill(self) -> None:
        if self.proc.poll() is None:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                child.kill()
            self.proc.kill()
            self.proc.wait(10)


def serving(home: Path) -> list[int]:
    """The ``cadenza serve`` processes of ``home``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = proc.info["cmdline"] or []
        if "serve" in line and str(home) in line:
            found.append(proc.pid)
    return found


def test_the_window_opens_logged_in_with_its_tray_and_a_second_start_brings_it_forward(
        tmp_path: Path, display: str) -> None:
    home = desktop_home(tmp_path / "home", tmp_path / "naps.txt", 1)
    app = Desktop(home, display)
    try:
        said = app.wait_ready()
        assert said["node"]["started_here"] is True
        assert window_titled(display, TITLE + "home")
        keys = [(e.get("key"), e.get("label")) for e in said["menu"] if "key" in e]
        assert ("open", "Open Cadenza") in keys
        assert ("pause", "Pause scheduling") in keys
        assert ("quit", "Quit Cadenza") in keys
        assert said["tray"]["look"] == "idle"
        # A failing run turns the icon red and says so; looking at the window clears it.
        enqueue(home, "broken")
        tray = eventually(lambda: (t := app.ask("menu")["tray"])["look"] == "failed" and t,
                          60, "the tray's failed look")
        assert "1 failed since you last looked" in tray["tooltip"]
        assert app.ask("activate", entry="open")["activated"] is True
        eventually(lambda: app.ask("menu")["tray"]["look"] == "idle", 30, "looked at")
        # What a notification's click sends: the run's page in this window.
        [failed] = [e["key"] for e in app.ask("menu")["menu"]
                    if e.get("key", "").startswith("run:")][:1]
        run_path = "/runs/" + failed.removeprefix("run:")
        assert app.ask("open", path=run_path)["ok"] is True
        eventually(lambda: app.ask("menu")["window"]["url"].endswith(run_path), 30,
                   "the run's page in the window")
        shot = screenshot(display, tmp_path / "desktop.png")
        assert shot.stat().st_size > 20_000  # a page, not an empty screen
        # A second start: the first window comes forward; no second app, no second node.
        second = subprocess.run(
            [sys.executable, "-m", "cadenza", "--home", str(home), "desktop"],
            capture_output=True, text=True, timeout=60, env=desktop_env(display))
        assert second.returncode == 0, second.stderr
        assert "already open for this home" in second.stdout
        assert len(serving(home)) == 1
        # The tray's Pause: scheduling paused, by the desktop's user; the menu offers Resume.
        assert app.ask("activate", entry="pause")["activated"] is True
        status = eventually(lambda: (s := cli(home, "scheduling", "status", "--json"))
                            and '"paused": true' in s.stdout and s, 30, "paused")
        assert '"by": "desktop:' in status.stdout
        eventually(lambda: any(e.get("key") == "resume" for e in app.ask("menu")["menu"]),
                   30, "Resume in the tray's menu")
        said = app.quit()
        assert app.proc.returncode == 0, said
        assert "the node stopped" in said
        eventually(lambda: not serving(home), 30, "the node stopped")
    finally:
        app.kill()


def test_closing_the_window_leaves_a_20_second_run_to_succeed(
        tmp_path: Path, display: str) -> None:
    naps = tmp_path / "naps.txt"
    # The default lease (not the minimum, 3 s, that a test of take-back needs): once, on a
    # loaded 2-core machine, the lease was not renewed within 3 s while the window closed,
    # and the step's process stopped itself at the lease's end, as it must (the run's
    # retry then succeeded). Leases are other tests' story, not this one's.
    home = desktop_home(tmp_path / "home", naps, 20, lease="60s")
    app = Desktop(home, display)
    try:
        app.wait_ready()
        run_id = enqueue(home, "nap")
        eventually(lambda: naps.exists() and "start" in naps.read_text(), 60, "the step")
        assert close_window(display, TITLE) == 1
        eventually(lambda: not window_titled(display, TITLE), 30, "the window closed")
        assert app.proc.poll() is None  # the app (and its tray) go on
        done = eventually(lambda: (r := run_state(home, run_id)).state.value
                          in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW") and r, 60, "the run")
        assert done.state.value == "SUCCEEDED"
        assert [line.split()[0] for line in naps.read_text().splitlines()] == ["start", "end"]
        # The tray's Open shows the window again.
        assert app.ask("activate", entry="open")["activated"] is True
        eventually(lambda: window_titled(display, TITLE), 30, "the window shown again")
        app.quit()
    finally:
        app.kill()


def test_quitting_during_a_run_hands_it_back_and_the_next_start_finishes_it_once(
        tmp_path: Path, display: str) -> None:
    naps = tmp_path / "naps.txt"
    home = desktop_home(tmp_path / "home", naps, 15)
    app = Desktop(home, display)
    try:
        app.wait_ready()
        run_id = enqueue(home, "nap")
        eventually(lambda: naps.exists() and "start" in naps.read_text(), 60, "the step")
        said = app.quit(timeout=90)
        assert "did not stop within 10 s: stopped outright" in said, said
        assert not serving(home)
        left = run_state(home, run_id)
        assert left.state.value == "RUNNING"  # held by the node that is gone
    finally:
        app.kill()
    # The next start with the default lease: the 3 s lease above is for the step that the
    # node stopped outright left behind (it stops itself at the lease's end). Twice on the
    # loaded 2-core CI machine, a desktop's window opening or closing held up a 3 s lease's
    # renewal for about 5 s, and the step of the next start stopped itself too and retried.
    settings = home / "cadenza.toml"
    settings.write_text(settings.read_text(encoding="utf-8").replace(
        'lease = "3s"', 'lease = "60s"'), encoding="utf-8")
    again = Desktop(home, display)
    try:
        again.wait_ready()
        done = eventually(lambda: (r := run_state(home, run_id)).state.value
                          in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW") and r, 90,
                          "the run finished by the next start")
        assert done.state.value == "SUCCEEDED"
        again.quit()
    finally:
        again.kill()
    lines = [line.split() for line in naps.read_text().splitlines()]
    starts = [(pid, float(at)) for kind, pid, at in lines if kind == "start"]
    ends = [(pid, float(at)) for kind, pid, at in lines if kind == "end"]
    assert len(starts) == 2 and len(ends) == 1  # the first attempt was stopped
    assert ends[0][0] == starts[1][0]  # the second attempt finished
    with open_store(home) as store:
        assert [r.id for r in store.list_runs(job="nap")] == [run_id]  # nothing doubled
        steps = store.list_step_runs(run_id)
    assert [s.state.value for s in steps][-1] == "SUCCEEDED"
