"""What `make run` promises a newcomer: the printed URL opens the login page, the printed
admin password logs in, and the demo's jobs are there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.e2e.serve_helpers import eventually, free_port


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "api/health", timeout=1).is_success
    except httpx.TransportError:
        return False


def test_printed_url_and_login_show_the_demo_jobs(page: Any, tmp_path: Path) -> None:
    page.cadenza_expected = ["401"]
    home = tmp_path / "demo"
    made = CliRunner().invoke(app, ["init", str(home), "--example"])
    assert made.exit_code == 0, made.output
    user = re.search(r"Login: (\S+)", made.output)
    password = re.search(r"Password \(shown once, store it now\): (.+)", made.output)
    assert user and password, made.output
    serve = subprocess.Popen([sys.executable, "-m", "cadenza", "--home", str(home), "serve",
                              "--port", str(free_port())], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        assert serve.stdout is not None
        url = None
        for line in serve.stdout:  # the banner comes once the server listens
            found = re.match(r"URL: (http://\S+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "serve printed no URL"
        eventually(lambda: _healthy(url), what="the server to answer")
        page.goto(url)
        assert page.locator("form[action='/login']").is_visible()
        page.fill("#username", user.group(1))
        page.fill("#password", password.group(1).strip())
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r".*/jobs.*"))
        listed = page.locator("main").inner_text()
        for job in ("sales-load", "hello"):
            assert job in listed, listed
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
