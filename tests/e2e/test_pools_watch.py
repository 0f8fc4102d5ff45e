"""A run waiting for a disabled unit starts soon after ``cadenza resources enable`` in
another process (a terminal beside a running ``cadenza serve``), not after the 30 s a
refused run is otherwise left alone (docs/pools.md, "When a waiting run is tried again").
The server is a real process on a SQLite home; the test waits for it, not for a schedule.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from typer.testing import CliRunner

from cadenza.cli.main import app
from tests.e2e.serve_helpers import Served, eventually
from tests.e2e.test_crash_recovery import make_home, queue, state_of, store_of

POOLS = '''
[pools.units]
kind = "unit"
[[pools.units.members]]
id = "u-1"
'''


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
    try:
        with store_of(home) as store:
            eventually(lambda: store.get_resource("u-1") is not None, what="u-1 synced")
        done = cli.invoke(app, ["--home", str(home), "resources", "disable", "u-1"])
        assert done.exit_code == 0, done.output
        run_id = queue(home, "items")
        reason = eventually(lambda: _wait_reason(home, run_id), what="the run to wait")
        assert "1 disabled" in reason, reason
        assert state_of(home, run_id) == "QUEUED"
        enabled = time.monotonic()
        done = cli.invoke(app, ["--home", str(home), "resources", "enable", "u-1"])
        assert done.exit_code == 0, done.output
        eventually(lambda: state_of(home, run_id) == "SUCCEEDED", seconds=60,
                   what="the run to take the unit")
        took = time.monotonic() - enabled
    finally:
        out = server.stop()
    # Left alone until RECHECK, it would have waited ~30 s from its refusal.
    assert took < 15, (took, out)
    assert lines.read_text(encoding="utf-8") == "item 1\n"
