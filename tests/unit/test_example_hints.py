"""The demo's hint for a local SMTP sink works from the project's venv: the example
cadenza.toml and docs/notifications.md name the venv's Python (aiosmtpd is a test extra,
not a dependency: `make run` does not install it, so a bare `python -m aiosmtpd` fails
there), say how to install it, and listen where the demo's channel sends."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "src" / "cadenza" / "example" / "cadenza.toml"
DOCS = ROOT / "docs" / "notifications.md"
SINK = re.compile(r"(?P<python>\S+) -m aiosmtpd -n -l (?P<host>[\w.]+):(?P<port>\d+)")


@pytest.mark.parametrize("source", [EXAMPLE, DOCS], ids=["example", "docs"])
def test_the_smtp_hint_runs_from_the_venv_and_matches_the_channel(source: Path) -> None:
    text = source.read_text(encoding="utf-8")
    channel = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))["channels"]["mail"]
    sinks = list(SINK.finditer(text))
    assert sinks, f"{source.name} names no aiosmtpd command"
    for sink in sinks:
        assert sink["python"] == ".venv/bin/python", sink.group(0)
        assert (sink["host"], int(sink["port"])) == (channel["host"], channel["port"])
    assert ".venv/bin/python -m pip install aiosmtpd" in text


def test_the_hinted_options_exist() -> None:
    """The command's options as this venv's aiosmtpd knows them (the test extras have it)."""
    pytest.importorskip("aiosmtpd")
    shown = subprocess.run([sys.executable, "-m", "aiosmtpd", "--help"], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert "-n" in shown and "--nosetuid" in shown and "-l" in shown and "--listen" in shown
