"""An install a person can do from the wheel: ``python -m build`` (what ``make dist`` runs)
makes an sdist and, from it, a wheel; twine finds both well formed; the wheel installed in a
clean virtual environment (the locked dependencies, then the wheel alone) makes a demo home,
validates it and serves its pages, styles and translations: every file the package needs is
in it. Uses the package registry (or pip's cache) like ``make test`` itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.tcp_proxy import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(900)


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_wheel_installs_in_a_clean_venv_and_serves_a_demo_home(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    built = sorted(p.name for p in dist.iterdir())
    assert [n for n in built if n.endswith(".whl")] and [n for n in built if n.endswith(".gz")]
    assert "PASSED" in _run(sys.executable, "-m", "twine", "check", "--strict",
                            *sorted(dist.iterdir()))
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    # The pip that venv brings (23.2 with Python 3.11.7) takes an extra's requirement
    # (weasyprint's fonttools[woff]) for an unpinned one under --require-hashes: a current
    # pip first, as `make run` does and docs/install.md says.
    _run(python, "-m", "pip", "install", "-q", "--upgrade", "pip")
    _run(python, "-m", "pip", "install", "-q", "--require-hashes", "-r",
         ROOT / "requirements" / "run.txt")
    wheel = next(dist.glob("*.whl"))
    _run(python, "-m", "pip", "install", "-q", "--no-deps", wheel)
    cadenza = bindir / ("cadenza.exe" if os.name == "nt" else "cadenza")
    home = tmp_path / "home"
    said = _run(cadenza, "init", "--example", home)
    assert "admin" in said
    assert "is valid" in _run(cadenza, "--home", home, "validate")
    port = free_port()
    server = subprocess.Popen([str(cadenza), "--home", str(home), "serve", "--port",
                               str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        page = None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/login", timeout=2,
                                 headers={"Accept-Language": "zh-CN"})
                break
            except httpx.TransportError:
                time.sleep(0.3)
        assert page is not None, server.communicate(timeout=30)[0]
        assert page.status_code == 200 and "登录" in page.text  # templates and catalogue
        style = httpx.get(f"http://127.0.0.1:{port}/static/cadenza.css", timeout=5)
        assert style.status_code == 200 and "--panel" in style.text
    finally:
        server.terminate()
        server.communicate(timeout=30)
    # The desktop extra from its lock, in the same venv: the window's, the tray's and the
    # notifications' libraries import, and the desktop command is there.
    _run(python, "-m", "pip", "install", "-q", "--require-hashes", "-r",
         ROOT / "requirements" / "desktop.txt")
    _run(python, "-c", "import webview, desktop_notifier, qtpy.QtWebEngineWidgets, PIL")
    assert "--install-autostart" in _run(cadenza, "desktop", "--help")
