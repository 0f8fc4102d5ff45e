"""Processes started by a python step do not outlive its attempt (executor/processes.py):
`cadenza run` of a step that starts `sleep` in its own process group, in a new session and
as a double-forked daemon, then returns (or times out). Real processes, POSIX tools (`sh`,
`sleep`): on Windows the same is done by the Job object and the marker, not tried there."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.e2e.lease_home import cli, gone, make_home, open_store

SPAWNER = '''
"""A step that leaves three `sleep` processes behind."""

import json
import subprocess
import time


def spawn(pid_file, then_sleep=0):
    group = subprocess.Popen(["sleep", "600"], process_group=0)
    session = subprocess.Popen(["sleep", "601"], start_new_session=True)
    # A double-forked daemon in a session of its own: sh starts it in the background and
    # exits at once, so the daemon's parent is gone.
    sh = subprocess.Popen(["setsid", "sh", "-c", "sleep 602 >/dev/null & echo $!"],
                          stdout=subprocess.PIPE, text=True)
    daemon = int(sh.stdout.readline())
    sh.wait()
    with open(pid_file, "w") as fh:
        json.dump([group.pid, session.pid, daemon], fh)
    time.sleep(float(then_sleep))
    return 1
'''

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses sh, setsid and sleep")


def _home(tmp_path: Path, pids: Path, extra: str = "") -> Path:
    home = make_home(tmp_path / "home", f"""
    [jobs.j]
    [[jobs.j.steps]]
    name = "spawn"
    type = "python"
    callable = "cz_spawner:spawn"
    {extra}
    op_kwargs = {{ pid_file = "{pids.as_posix()}"{', then_sleep = 60' if extra else ''} }}
    """)
    (home / "plugins" / "cz_spawner.py").write_text(SPAWNER, encoding="utf-8")
    return home


def _cleanup(pids: Path) -> None:
    try:
        for pid in json.loads(pids.read_text()):
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
    except (OSError, ValueError):
        pass


def _log(home: Path) -> str:
    with open_store(home) as store:
        run = store.list_runs(limit=1)[0]
        return "\n".join(f"{line.level} {line.step} {line.message}"
                         for line in store.list_logs(run.id))


def test_the_processes_a_step_left_are_killed_when_it_succeeds(tmp_path: Path) -> None:
    pids = tmp_path / "pids.json"
    home = _home(tmp_path, pids)
    try:
        started = time.monotonic()
        # The three sleeps inherit the CLI's stdout/stderr: if one lived on, it would hold
        # the pipe open and this call would time out.
        result = cli(home, "run", "j", timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        assert time.monotonic() - started < 60
        left = json.loads(pids.read_text())
        assert [pid for pid in left if not gone(pid)] == []
        log = _log(home)
        assert "killed 3 process(es) the step left running" in log, log
        for pid in left:
            assert f"pid {pid} (sleep 60" in log
    finally:
        _cleanup(pids)


def test_the_processes_a_timed_out_step_left_are_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids.json"
    home = _home(tmp_path, pids, 'timeout = "5s"\n    retry = { attempts = 1 }')
    try:
        result = cli(home, "run", "j", timeout=60)
        assert result.returncode != 0, result.stdout + result.stderr
        assert "timed out after 5s" in result.stdout + result.stderr
        left = json.loads(pids.read_text())
        assert [pid for pid in left if not gone(pid)] == []
        log = _log(home)
        assert "killed 3 process(es) the step left running" in log, log
    finally:
        _cleanup(pids)
