"""Start the desktop app at login (``cadenza desktop --install-autostart`` /
``--remove-autostart``; docs/desktop.md "Start at login").

* Linux and other XDG desktops: an entry ``cadenza-<id>.desktop`` in
  ``$XDG_CONFIG_HOME/autostart`` (``~/.config/autostart``), which every XDG session starts.
* Windows: a Task Scheduler task "Cadenza desktop <id>" with a logon trigger for the current
  user, registered from an XML definition with ``schtasks /Create /XML`` (no administrator
  rights: it runs as the user, only when they log on). Written and unit-tested for its content
  and command line; not run on Windows yet.

``<id>`` is derived from the home's path, so each home has its own entry. The app starts in
the background (``--background``: the tray, no window until asked).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape


class AutostartError(Exception):
    """Autostart could not be installed or removed; the message says why."""


@dataclass(frozen=True)
class Autostart:
    """What starts the app of ``home`` at login, and where it is registered."""

    home: Path
    executable: Path

    @classmethod
    def of(cls, home: Path) -> Autostart:
        exe = Path(sys.executable)
        if sys.platform == "win32":  # pythonw: no console window at logon
            windowless = exe.with_name("pythonw.exe")
            exe = windowless if windowless.exists() else exe
        return cls(home.resolve(), exe)

    @property
    def ident(self) -> str:
        return hashlib.sha256(str(self.home).encode("utf-8")).hexdigest()[:10]

    @property
    def arguments(self) -> list[str]:
        return ["-m", "cadenza", "--home", str(self.home), "desktop", "--background"]

    # --- XDG ---------------------------------------------------------------------------

    def xdg_path(self) -> Path:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        return Path(base) / "autostart" / f"cadenza-{self.ident}.desktop"

    def xdg_entry(self) -> str:
        """The autostart entry (Desktop Entry Specification 1.5)."""
        command = " ".join(exec_argument(a) for a in [str(self.executable), *self.arguments])
        return "\n".join([
            "[Desktop Entry]",
            "Type=Application",
            "Version=1.5",
            f"Name=Cadenza ({_one_line(self.home.name or str(self.home))})",
            f"Comment=Cadenza for {_one_line(str(self.home))}",
            f"Exec={command}",
            "Terminal=false",
            "X-GNOME-Autostart-enabled=true",
            "",
        ])

    # --- Windows -----------------------------------------------------------------------

    @property
    def task_name(self) -> str:
        return f"Cadenza desktop {self.ident}"

    def task_xml(self, user: str) -> str:
        """The Task Scheduler definition: at ``user``'s logon, as them, without a limit on
        its run time, never a second copy."""
        arguments = subprocess.list2cmdline(self.arguments)
        return f"""<?xml version="1.0" encoding="UTF-16"?>
<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">
  <RegistrationInfo>
    <Description>{escape(f"Cadenza for {self.home}")}</Description>
  </RegistrationInfo>
  <Triggers>
    <LogonTrigger>
      <Enabled>true</Enabled>
      <UserId>{escape(user)}</UserId>
    </LogonTrigger>
  </Triggers>
  <Principals>
    <Principal id="Author">
      <UserId>{escape(user)}</UserId>
      <LogonType>InteractiveToken</LogonType>
      <RunLevel>LeastPrivilege</RunLevel>
    </Principal>
  </Principals>
  <Settings>
    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>
    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>
    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>
    <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>
    <Enabled>true</Enabled>
  </Settings>
  <Actions Context="Author">
    <Exec>
      <Command>{escape(str(self.executable))}</Command>
      <Arguments>{escape(arguments)}</Arguments>
    </Exec>
  </Actions>
</Task>
"""

    def schtasks_create(self, xml_file: Path) -> list[str]:
        return ["schtasks", "/Create", "/TN", self.task_name, "/XML", str(xml_file), "/F"]

    def schtasks_delete(self) -> list[str]:
        return ["schtasks", "/Delete", "/TN", self.task_name, "/F"]

    # --- install / remove --------------------------------------------------------------

    def install(self) -> str:
        """Register the start at login; returns where (a file, or the task's name)."""
        if sys.platform == "win32":
            user = os.environ.get("USERDOMAIN", "") + "\\" + os.environ.get("USERNAME", "")
            with tempfile.TemporaryDirectory() as tmp:
                xml_file = Path(tmp) / "cadenza-task.xml"
                xml_file.write_text(self.task_xml(user.lstrip("\\")), encoding="utf-16")
                _run(self.schtasks_create(xml_file))
            return f"Task Scheduler: {self.task_name}"
        if sys.platform == "darwin":
            raise AutostartError("starting at login is not supported on macOS yet; add "
                                 "`cadenza desktop --background` to your Login Items")
        path = self.xdg_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp_path = path.with_name(path.name + ".tmp")
        tmp_path.write_text(self.xdg_entry(), encoding="utf-8")
        os.replace(tmp_path, path)
        return str(path)

    def remove(self) -> str | None:
        """Unregister it; returns what was removed, None when nothing was registered."""
        if sys.platform == "win32":
            try:
                _run(self.schtasks_delete())
            except AutostartError:
                return None
            return f"Task Scheduler: {self.task_name}"
        path = self.xdg_path()
        try:
            path.unlink()
        except FileNotFoundError:
            return None
        return str(path)


def _run(command: list[str]) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AutostartError(f"{command[0]} failed: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise AutostartError(f"{' '.join(command[:3])} failed: {said}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`%")


def exec_argument(argument: str) -> str:
    """One argument of a desktop entry's ``Exec`` key: quoted when it holds a reserved
    character (``"``, `````, ``$`` and ``\\`` escaped inside the quotes), then written as a
    string value (each backslash doubled) with ``%`` as ``%%`` (not a field code)."""
    if argument and not any(ch in _RESERVED for ch in argument):
        return argument
    inner = "".join("\\" + ch if ch in '"`$\\' else ch for ch in argument)
    return f'"{inner}"'.replace("\\", "\\\\").replace("%", "%%")
