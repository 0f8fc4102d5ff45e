"""What a terminal receives from real `cadenza run` and `cadenza serve` processes: no secret
in raw, base64 or URL-encoded form, and no control character from outside data.

The outside data: a local HTTP server that echoes the connection's secret header (raw,
base64, URL-encoded) with escape sequences in its body, answered with a status the step
does not expect; python steps (process- and thread-isolated, and a program one of them
starts) that print the secret in every form with escape sequences; an exception whose
message carries both; a job description with escape sequences and rich markup. Everything
the processes write on stdout and stderr is captured (pipes: our own output then holds no
escape sequence at all, so any ESC byte came from outside).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from cadenza.audit.secrets import SecretStore
from tests.e2e.serve_helpers import Served

SECRET = "Zq9!x/Pw+7&kLm2#"
OUTSIDE_CONTROLS = "\x1b]0;pwned\x07\x1b[2J\x1b[31mfake\x1b[0m\r\x9b1A\u202e"


def secret_forms(secret: str = SECRET) -> list[str]:
    raw = secret.encode()
    return [secret, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
            base64.b64encode(raw).decode().rstrip("="), quote(secret, safe=""),
            quote_plus(secret, safe=""), quote(secret)]


PLUGIN = f'''
import base64, subprocess, sys
from urllib.parse import quote, quote_plus

SECRET = {SECRET!r}
CONTROLS = {OUTSIDE_CONTROLS!r}


def forms():
    raw = SECRET.encode()
    return [SECRET, base64.b64encode(raw).decode(), quote(SECRET, safe=""),
            quote_plus(SECRET, safe="")]


def chatty(ctx, marker):
    for form in forms():
        print(f"{{marker}}-stdout {{form}} {{CONTROLS}}")
        print(f"{{marker}}-stderr {{form}} {{CONTROLS}}", file=sys.stderr)
    sys.stdout.write(f"{{marker}}-partial {{SECRET[:5]}}")
    sys.stdout.write(f"{{SECRET[5:]}} without its line end")
    sys.stdout.flush()
    if marker == "process":
        code = f"print('process-program ' + {{SECRET!r}} + ' ' + {{CONTROLS!r}})"
        subprocess.run([sys.executable, "-c", code], check=True)
    ctx.log.info("%s-log %s", marker, CONTROLS)
    return {{"said": marker}}


def boom(ctx):
    raise ValueError(f"boom {{base64.b64encode(SECRET.encode()).decode()}} {{CONTROLS}}")
'''

JOBS = """
[jobs.leaky]
description = "leaky \\u001b]0;pwned\\u0007\\u001b[2J [red]markup[/red]"
[[jobs.leaky.steps]]
name = "process"
type = "python"
callable = "terminal_tasks:chatty"
op_kwargs = { marker = "process" }
[[jobs.leaky.steps]]
name = "thread"
type = "python"
callable = "terminal_tasks:chatty"
isolation = "thread"
op_kwargs = { marker = "thread" }
[[jobs.leaky.steps]]
name = "echo"
type = "http"
connection = "echo"
path = "/echo"
expect = 201

[jobs.boom]
[[jobs.boom.steps]]
name = "explode"
type = "python"
callable = "terminal_tasks:boom"
"""

SETTINGS = """
[store]
url = "sqlite:///data/cadenza.db"

[connections.echo]
type = "http"
base_url = "http://127.0.0.1:{port}"
allow_private = true
headers = {{ X-Client = "${{secret.api}}" }}
"""


class _Echo(BaseHTTPRequestHandler):
    """Answers 200 with the X-Client header echoed raw, base64- and URL-encoded, and
    escape sequences: a hostile or careless server."""

    def do_GET(self) -> None:
        value = self.headers.get("X-Client", "")
        body = (f"{base64.b64encode(value.encode()).decode()} {quote(value, safe='')} "
                f"{value} {OUTSIDE_CONTROLS}").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def make_home(root: Path, port: int) -> Path:
    (root / "plugins").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "plugins" / "terminal_tasks.py").write_text(PLUGIN, encoding="utf-8")
    (root / "cadenza.toml").write_text(SETTINGS.format(port=port), encoding="utf-8")
    (root / "jobs.toml").write_text(JOBS, encoding="utf-8")
    SecretStore(root).set("api", SECRET)
    return root


def cadenza(home: Path, *args: str) -> tuple[int, str]:
    """Run `cadenza`; its exit code and everything it wrote (stdout, then stderr)."""
    done = subprocess.run([sys.executable, "-m", "cadenza", "--home", str(home), *args],
                          capture_output=True, timeout=180)
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")


def assert_clean(captured: str) -> None:
    """No secret form and no control character but newline and tab in ``captured``."""
    for form in secret_forms():
        assert form not in captured, f"{form!r} reached the terminal:\n{captured}"
    bad = sorted({f"U+{ord(c):04X}" for c in captured
                  if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0
                  or 0x202A <= ord(c) <= 0x202E})
    assert not bad, f"control characters {bad} reached the terminal:\n{captured}"


def test_cadenza_run_shows_no_secret_and_no_escape(tmp_path: Path, echo_port: int) -> None:
    home = make_home(tmp_path / "home", echo_port)

    code, captured = cadenza(home, "run", "leaky")
    assert code == 1, captured  # the http step fails: 200 is not the expected 201
    assert_clean(captured)
    # The output was shown, redacted and made inert, not dropped.
    for marker in ("process-stdout", "process-stderr", "process-program", "thread-stdout",
                   "thread-stderr", "process-partial", "thread-partial"):
        assert marker in captured, captured
    assert "***" in captured and "\\x1b]0;pwned\\x07" in captured
    assert "HTTP 200" in captured, captured

    code, captured = cadenza(home, "run", "boom")
    assert code == 1
    assert_clean(captured)
    assert "boom ***" in captured, captured

    done = subprocess.run([sys.executable, "-m", "cadenza", "--home", str(home), "runs",
                           "list", "--json"], capture_output=True, text=True, timeout=60)
    run_id = next(run["id"] for run in json.loads(done.stdout) if run["job"] == "leaky")
    done = subprocess.run([sys.executable, "-m", "cadenza", "--home", str(home), "runs",
                           "show", run_id, "--json"], capture_output=True, text=True,
                          timeout=60)
    steps = {step["name"]: step["state"] for step in json.loads(done.stdout)["steps"]}
    assert steps == {"process": "SUCCEEDED", "thread": "SUCCEEDED", "echo": "FAILED"}
    for command in (["runs", "logs", run_id], ["runs", "show", run_id], ["events"],
                    ["events", "--run", run_id], ["jobs", "list"], ["jobs", "show", "leaky"],
                    ["runs", "list"]):
        code, captured = cadenza(home, *command)
        assert code == 0, captured
        assert_clean(captured)
    code, captured = cadenza(home, "jobs", "show", "leaky")
    assert "[red]markup[/red]" in captured  # rich markup from outside is not interpreted


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals (pty) are POSIX only")
def test_cadenza_run_on_a_terminal_shows_no_secret_and_no_outside_escape(
        tmp_path: Path, echo_port: int) -> None:
    """On a terminal `cadenza run` draws a live table with escape sequences of its own;
    none of the outside sequences, and no secret, reach the terminal."""
    import os
    import pty

    home = make_home(tmp_path / "home", echo_port)
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec `cadenza run` with the pseudo-terminal as its terminal
        os.environ["COLUMNS"] = "200"
        os.execv(sys.executable, [sys.executable, "-m", "cadenza", "--home", str(home),
                                  "run", "leaky"])
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    captured = b"".join(chunks).decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 1, captured
    for form in secret_forms():
        assert form not in captured, f"{form!r} reached the terminal:\n{captured!r}"
    for sequence in ("\x1b]0;pwned", "\x07", "\x1b[2J", "\x1b[31mfake", "\x9b", "\u202e"):
        assert sequence not in captured, f"{sequence!r} reached the terminal"
    for marker in ("process-stdout", "process-program", "thread-stdout", "thread-stderr"):
        assert marker in captured
    assert "\\x1b]0;pwned\\x07" in captured  # shown, inert


def test_cadenza_serve_shows_no_secret_and_no_escape(tmp_path: Path, echo_port: int) -> None:
    home = make_home(tmp_path / "home", echo_port)
    served = Served(home)
    try:
        served.wait_ready()
        # Queued for the server and followed: the follower prints what the store recorded.
        code, followed = cadenza(home, "run", "leaky")
        assert code == 1, followed
        assert "queued for the running `cadenza serve`" in followed
        assert_clean(followed)
        code, followed = cadenza(home, "run", "boom")
        assert code == 1, followed
        assert_clean(followed)
    finally:
        captured = served.stop()
    assert_clean(captured)
    for marker in ("process-stdout", "process-stderr", "process-program", "thread-stdout",
                   "thread-stderr"):
        assert marker in captured, captured

