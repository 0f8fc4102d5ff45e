"""The tray icon drawn by a toolkit (docs/desktop.md "The tray icon"): Qt's
``QSystemTrayIcon`` where the window is Qt WebEngine (Linux: a StatusNotifierItem on D-Bus
where the desktop has a tray host, else the X11 tray), pystray elsewhere (the Windows shell's
notification area, macOS's menu bar). Both draw what :mod:`cadenza.desktop.tray` says and
call back with an entry's key; both are driven from any thread (:meth:`show` queues the
change to the toolkit's own thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from cadenza.desktop.tray import Entry, Look

COLOURS: dict[str, tuple[int, int, int]] = {
    "idle": (107, 114, 128), "running": (37, 99, 235), "failed": (220, 38, 38),
    "paused": (217, 119, 6)}
"""The icon's colour for each look: grey, blue, red, amber."""

OnEntry = Callable[[str], None]


class Tray(Protocol):
    def show(self, entries: Sequence[Entry | None], tip: str, look: Look) -> None: ...

    def entries(self) -> list[dict[str, Any]]: ...

    def state(self) -> dict[str, str]: ...

    def activate(self, key: str) -> bool: ...

    def stop(self) -> None: ...


class QtTray:
    """``QSystemTrayIcon`` and its ``QMenu``; made in the Qt application's thread (before
    the window's event loop starts)."""

    def __init__(self, on_entry: OnEntry) -> None:
        from qtpy import QtCore
        from qtpy.QtCore import QObject
        from qtpy.QtWidgets import QMenu, QSystemTrayIcon

        Signal: Any = QtCore.Signal  # type: ignore[attr-defined]  # qtpy: PyQt6's pyqtSignal

        class Bridge(QObject):
            changed = Signal(object)
            clicked = Signal(str)
            stopped = Signal()

        self.on_entry = on_entry
        self.bridge = Bridge()
        self.bridge.changed.connect(self._apply)
        self.bridge.clicked.connect(self._click)
        self.bridge.stopped.connect(self._hide)
        self.menu = QMenu()
        self.icon = QSystemTrayIcon()
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)
        self._shown: list[dict[str, Any]] = []
        self._state: dict[str, str] = {}
        self._apply(([Entry("open", "Cadenza", default=True)], "Cadenza", "idle"))
        self.icon.show()

    def _activated(self, reason: Any) -> None:
        from qtpy.QtWidgets import QSystemTrayIcon

        if reason == QSystemTrayIcon.ActivationReason.Trigger:  # a left click: the window
            self.on_entry("open")

    def _apply(self, payload: tuple[Sequence[Entry | None], str, Look]) -> None:
        from qtpy.QtGui import QIcon, QPixmap

        entries, tip, look = payload
        self.menu.clear()
        shown: list[dict[str, Any]] = []
        for entry in entries:
            if entry is None:
                self.menu.addSeparator()
                shown.append({"separator": True})
                continue
            action = self.menu.addAction(entry.label)
            if action is None:
                continue
            action.setEnabled(entry.enabled)
            action.setData(entry.key)
            if entry.default:
                font = action.font()
                font.setBold(True)
                action.setFont(font)
            action.triggered.connect(lambda _checked=False, key=entry.key: self.on_entry(key))
            shown.append({"key": entry.key, "label": entry.label, "enabled": entry.enabled})
        self._shown = shown
        self.icon.setToolTip(tip)
        self.icon.setIcon(QIcon(QPixmap.fromImage(_qimage(look))))
        self._state = {"look": look, "tooltip": self.icon.toolTip()}

    def _click(self, key: str) -> None:
        for action in self.menu.actions():
            if action.data() == key and action.isEnabled():
                action.trigger()
                return

    def _hide(self) -> None:
        self.icon.hide()

    def show(self, entries: Sequence[Entry | None], tip: str, look: Look) -> None:
        self.bridge.changed.emit((list(entries), tip, look))

    def entries(self) -> list[dict[str, Any]]:
        """The menu as the toolkit holds it now (label, key, enabled; separators)."""
        return list(self._shown)

    def state(self) -> dict[str, str]:
        """The icon's look and tooltip as Qt holds them now."""
        return dict(self._state)

    def activate(self, key: str) -> bool:
        """Trigger the menu action of ``key`` as a click would (in Qt's thread)."""
        if not any(e.get("key") == key and e.get("enabled") for e in self._shown):
            return False
        self.bridge.clicked.emit(key)
        return True

    def stop(self) -> None:
        self.bridge.stopped.emit()


def _qimage(look: Look) -> Any:
    from qtpy.QtCore import Qt
    from qtpy.QtGui import QColor, QImage, QPainter

    image = QImage(64, 64, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(*COLOURS[look]))
    painter.drawEllipse(4, 4, 56, 56)
    painter.setBrush(QColor(255, 255, 255))
    painter.drawEllipse(22, 22, 20, 20)
    painter.end()
    return image


class PystrayTray:
    """pystray's icon (the Windows notification area, macOS), its own thread."""

    def __init__(self, on_entry: OnEntry) -> None:
        import pystray  # type: ignore[import-untyped]

        self.on_entry = on_entry
        self._entries: list[Entry | None] = [Entry("open", "Cadenza", default=True)]
        self._state = {"look": "idle", "tooltip": "Cadenza"}
        self.icon = pystray.Icon("cadenza", pil_image("idle"), "Cadenza",
                                 menu=pystray.Menu(self._items))
        self.icon.run_detached()
        self.icon.visible = True

    def _items(self) -> list[Any]:
        import pystray

        items: list[Any] = []
        for entry in self._entries:
            if entry is None:
                items.append(pystray.Menu.SEPARATOR)
                continue
            items.append(pystray.MenuItem(
                entry.label, lambda _icon, _item, key=entry.key: self.on_entry(key),
                enabled=entry.enabled, default=entry.default))
        return items

    def show(self, entries: Sequence[Entry | None], tip: str, look: Look) -> None:
        self._entries = list(entries)
        self.icon.icon = pil_image(look)
        self.icon.title = tip
        self.icon.update_menu()
        self._state = {"look": look, "tooltip": tip}

    def state(self) -> dict[str, str]:
        return dict(self._state)

    def entries(self) -> list[dict[str, Any]]:
        return [{"separator": True} if e is None else
                {"key": e.key, "label": e.label, "enabled": e.enabled} for e in self._entries]

    def activate(self, key: str) -> bool:
        if not any(e is not None and e.key == key and e.enabled for e in self._entries):
            return False
        self.on_entry(key)
        return True

    def stop(self) -> None:
        self.icon.stop()


def pil_image(look: Look) -> Any:
    """The icon of ``look`` as a Pillow image (pystray's)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.ellipse((4, 4, 60, 60), fill=(*COLOURS[look], 255))
    draw.ellipse((22, 22, 42, 42), fill=(255, 255, 255, 255))
    return image
