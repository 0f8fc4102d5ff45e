"""A virtual X display (Debian's ``Xvfb``) for the desktop app's tests, and what a person does
to a window there: close it with the window manager's close request (``WM_DELETE_WINDOW``,
what the title bar's × sends), take a picture of the screen. Without ``Xvfb`` the fixture
calls ``service_missing`` (skipped on a person's machine, failed under CI=true)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import service_missing


@contextmanager
def virtual_display(width: int = 1400, height: int = 1000) -> Iterator[str]:
    """A fresh Xvfb display; yields its name (``:N``)."""
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        service_missing("a virtual display", "Xvfb is not installed (Debian: apt-get "
                        "install xvfb)")
    number = next(n for n in range(90, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists()
                  and not Path(f"/tmp/.X{n}-lock").exists())
    proc = subprocess.Popen([xvfb, f":{number}", "-screen", "0", f"{width}x{height}x24",
                             "-nolisten", "tcp"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not Path(f"/tmp/.X11-unix/X{number}").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            service_missing("a virtual display", f"Xvfb :{number} did not start")
        time.sleep(0.1)
    try:
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


def _title(shown: Any, window: Any) -> str | None:
    """The window's title: ``_NET_WM_NAME`` (UTF-8, as toolkits set it), else ``WM_NAME``."""
    try:
        name = window.get_full_text_property(shown.intern_atom("_NET_WM_NAME"),
                                             shown.intern_atom("UTF8_STRING"))
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        return name if isinstance(name, str) else window.get_wm_name()
    except Exception:  # a window gone meanwhile
        return None


def _windows(display: Any) -> Iterator[Any]:
    stack = [display.screen().root]
    while stack:
        window = stack.pop()
        yield window
        try:
            stack.extend(window.query_tree().children)
        except Exception:  # a window gone meanwhile
            continue


def window_titled(name: str, prefix: str) -> bool:
    """Whether a mapped window whose title starts with ``prefix`` is on display ``name``."""
    from Xlib import X, display

    shown = display.Display(name)
    try:
        for window in _windows(shown):
            title = _title(shown, window)
            try:
                mapped = window.get_attributes().map_state == X.IsViewable
            except Exception:
                continue
            if isinstance(title, str) and title.startswith(prefix) and mapped:
                return True
        return False
    finally:
        shown.close()


def close_window(name: str, prefix: str) -> int:
    """Send ``WM_DELETE_WINDOW`` to each window whose title starts with ``prefix`` (as a
    window manager does when the × is clicked); returns how many."""
    from Xlib import X, display
    from Xlib.protocol import event

    shown = display.Display(name)
    try:
        protocols = shown.intern_atom("WM_PROTOCOLS")
        delete = shown.intern_atom("WM_DELETE_WINDOW")
        count = 0
        for window in _windows(shown):
            title = _title(shown, window)
            if isinstance(title, str) and title.startswith(prefix):
                message = event.ClientMessage(window=window, client_type=protocols,
                                              data=(32, [delete, X.CurrentTime, 0, 0, 0]))
                window.send_event(message, event_mask=X.NoEventMask)
                count += 1
        shown.flush()
        return count
    finally:
        shown.close()


def screenshot(name: str, path: Path) -> Path:
    """The whole screen of display ``name`` as a PNG, cropped to what is drawn."""
    from PIL import ImageGrab

    image = ImageGrab.grab(xdisplay=name)
    box = image.convert("L").point(lambda v: 255 if v > 0 else 0).getbbox()
    if box is not None:
        image = image.crop(box)
    image.save(path)
    return path


def desktop_env(name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a desktop app on display ``name`` (Qt WebEngine's sandbox off:
    the tests run as root, which Chromium's sandbox refuses)."""
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env.update({"DISPLAY": name, "QTWEBENGINE_CHROMIUM_FLAGS": "--no-sandbox",
                "QT_QPA_PLATFORM": "xcb", **(extra or {})})
    return env
