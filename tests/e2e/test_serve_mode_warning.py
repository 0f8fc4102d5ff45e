"""A real `cadenza serve` on a world-writable home warns with the path and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.serve_helpers import Served

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX modes; Windows keeps ACLs")


def test_serve_warns_of_a_world_writable_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    subprocess.run([sys.executable, "-m", "cadenza", "init", str(home)], check=True)
    os.chmod(home, 0o777)
    served = Served(home)
    try:
        served.wait_ready()
    finally:
        out = served.stop()
    assert f"chmod o-w {home}" in out, out
