"""Start at login: the XDG autostart entry (its Exec line quoted by the Desktop Entry rules,
written and removed in ``$XDG_CONFIG_HOME/autostart``), and the Windows logon task (its XML
and the schtasks command lines; they are not run here: no Windows)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cadenza.desktop.autostart import Autostart, exec_argument

TASK_NS = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}


def unquote_exec(value: str) -> list[str]:
    """Read an Exec value back as the Desktop Entry Specification says a launcher does: the
    string escapes first (a doubled backslash is one), then the arguments (split on spaces;
    inside double quotes a backslash before ``"``, `````, ``$`` or ``\\`` is that
    character), then ``%%`` is ``%``."""
    string = value.replace("\\\\", "\\")
    args: list[str] = []
    current: list[str] | None = None
    quoted = False
    i = 0
    while i < len(string):
        ch = string[i]
        if quoted:
            if ch == "\\" and i + 1 < len(string) and string[i + 1] in '"`$\\':
                current.append(string[i + 1])  # type: ignore[union-attr]
                i += 2
                continue
            if ch == '"':
                quoted = False
            else:
                current.append(ch)  # type: ignore[union-attr]
        elif ch == " ":
            if current is not None:
                args.append("".join(current))
                current = None
        elif ch == '"':
            quoted = True
            current = current if current is not None else []
        else:
            current = (current if current is not None else []) + [ch]
        i += 1
    assert not quoted, f"an unclosed quote in {value!r}"
    if current is not None:
        args.append("".join(current))
    return [arg.replace("%%", "%") for arg in args]


@pytest.mark.parametrize("argument", [
    "/usr/bin/python3", "/home/alice/My Homes/cadenza", 'a "quoted" name', "100%",
    "$HOME", "back\\slash", "tick`s", "--home"])
def test_each_exec_argument_reads_back_as_written(argument: str) -> None:
    assert unquote_exec(exec_argument(argument)) == [argument]


def test_the_xdg_entry_starts_this_home_in_the_background(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    home = tmp_path / "My Cadenza 100%"
    home.mkdir()
    entry = Autostart(home, Path("/opt/py/bin/python3"))
    text = entry.xdg_entry()
    assert text.startswith("[Desktop Entry]\nType=Application\n")
    assert "Name=Cadenza (My Cadenza 100%)" in text
    exec_line = next(line for line in text.splitlines() if line.startswith("Exec="))
    assert unquote_exec(exec_line.removeprefix("Exec=")) == [
        "/opt/py/bin/python3", "-m", "cadenza", "--home", str(home), "desktop",
        "--background"]
    assert "X-GNOME-Autostart-enabled=true" in text
    if sys.platform.startswith("linux"):
        where = entry.install()
        assert Path(where) == tmp_path / "config" / "autostart" / f"cadenza-{entry.ident}.desktop"
        assert Path(where).read_text(encoding="utf-8") == text
        assert entry.remove() == where
        assert entry.remove() is None
        assert not Path(where).exists()


def test_two_homes_have_two_entries(tmp_path: Path) -> None:
    one = Autostart(tmp_path / "a", Path("python"))
    two = Autostart(tmp_path / "b", Path("python"))
    assert one.ident != two.ident
    assert one.task_name != two.task_name


def test_the_windows_task_starts_at_the_users_logon_as_them(tmp_path: Path) -> None:
    home = Path("C:/Users/Zoé/Cadenza & co")
    entry = Autostart(home, Path("C:/Python311/pythonw.exe"))
    xml = entry.task_xml("OFFICE\\zoe")
    root = ET.fromstring(xml.split("\n", 1)[1])  # past the UTF-16 declaration
    trigger = root.find("t:Triggers/t:LogonTrigger", TASK_NS)
    assert trigger is not None
    assert trigger.findtext("t:UserId", namespaces=TASK_NS) == "OFFICE\\zoe"
    principal = root.find("t:Principals/t:Principal", TASK_NS)
    assert principal is not None
    assert principal.findtext("t:LogonType", namespaces=TASK_NS) == "InteractiveToken"
    assert principal.findtext("t:RunLevel", namespaces=TASK_NS) == "LeastPrivilege"
    settings = root.find("t:Settings", TASK_NS)
    assert settings is not None
    assert settings.findtext("t:MultipleInstancesPolicy", namespaces=TASK_NS) == "IgnoreNew"
    assert settings.findtext("t:ExecutionTimeLimit", namespaces=TASK_NS) == "PT0S"
    action = root.find("t:Actions/t:Exec", TASK_NS)
    assert action is not None
    assert action.findtext("t:Command", namespaces=TASK_NS) == "C:/Python311/pythonw.exe"
    assert action.findtext("t:Arguments", namespaces=TASK_NS) == (
        f'-m cadenza --home "{home}" desktop --background')
    task_file = tmp_path / "task.xml"
    assert entry.schtasks_create(task_file) == [
        "schtasks", "/Create", "/TN", entry.task_name, "/XML", str(task_file), "/F"]
    assert entry.schtasks_delete() == ["schtasks", "/Delete", "/TN", entry.task_name, "/F"]
