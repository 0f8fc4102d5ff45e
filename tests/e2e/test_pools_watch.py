"""A run waiting for a disabled unit starts soon after ``cadenza resources enable`` in
another process (a terminal beside a running ``cadenza serve``), not after the 30 s a
refused run is otherwise left alone (docs/pools.md, "When a waiting run is tried again").
Meanwhile the terminal that queued it with ``cadenza run`` says why it waits, and so does
``cadenza runs show``. The server is a real process on a SQLite home; the test waits for it,
not for a schedule.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.e2e.serve_helpers import Served, eventually
from tests.e2e.test_crash_recovery import make_home, state_of, store_of

POOLS = '''
[pools.units]
kind = "unit"
[[pools.units.members]]
id = "u-1"
'''


def _only_run(home: Path) -> str:
    with store_of(home) as store:
        runs = store.list_runs(limit=2)
    assert len(runs) <= 1, runs
    return runs[0].id if runs else ""


def _wait_reason(home: Path, run_id: str) -> str:
    with store_of(home) as store:
        run = store.get_run(run_id)
        return "" if run is None else run.wait_reason or ""


def test_a_unit_enabled_from_the_cli_is_taken_by_the_waiting_run_at_once(
        tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    home = make_home(tmp_path, textwrap.dedent(f'''
        [jobs.items]
        requires = {{ units = 1 }}
        [[jobs.items.steps]]
        name = "one"
        type = "python"
        callable = "crash_steps:append_line"
        op_kwargs = {{ path = "{lines.as_posix()}", i = 1 }}
        '''))
    settings = home / "cadenza.toml"
    settings.write_text(settings.read_text(encoding="utf-8") + POOLS, encoding="utf-8")
    cli = CliRunner()
    server = Served(home, web=False)
    follower: subprocess.Popen[str] | None = None
    try:
        with store_of(home) as store:
            eventually(lambda: store.get_resource("u-1") is not None, what="u-1 synced")
        done = cli.invoke(app, ["--home", str(home), "resources", "disable", "u-1"])
        assert done.exit_code == 0, done.output
        follower = subprocess.Popen(
            [sys.executable, "-m", "cadenza", "--home", str(home), "run", "items"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        run_id = eventually(lambda: _only_run(home), what="the run to be queued")
        reason = eventually(lambda: _wait_reason(home, run_id), what="the run to wait")
        assert "1 disabled" in reason, reason
        assert state_of(home, run_id) == "QUEUED"
        shown = cli.invoke(app, ["--home", str(home), "runs", "show", run_id])
        assert shown.exit_code == 0, shown.output
        assert f"waiting: {reason}" in shown.output, shown.output
        enabled = time.monotonic()
        done = cli.invoke(app, ["--home", str(home), "resources", "enable", "u-1"])
        assert done.exit_code == 0, done.output
        eventually(lambda: state_of(home, run_id) == "SUCCEEDED", seconds=60,
                   what="the run to take the unit")
        took = time.monotonic() - enabled
        followed, _ = follower.communicate(timeout=60)
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.communicate()
        out = server.stop()
    # Left alone until RECHECK, it would have waited ~30 s from its refusal.
    assert took < 15, (took, out)
    assert lines.read_text(encoding="utf-8") == "item 1\n"
    # The terminal that follows the run said why it waited, once, before its steps.
    assert follower.returncode == 0, followed
    assert followed.count(f"run {run_id} QUEUED: {reason}") == 1, followed
    assert followed.index("QUEUED: waiting for") < followed.index("step one:"), followed
    assert f"run {run_id} SUCCEEDED" in followed, followed
