"""``cadenza run`` as a real process: on a PostgreSQL store, and stopped by Ctrl-C with its
step's process tree killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

PLUGIN = '''
import json, os, subprocess, sys, time

def hello(ctx, who="world"):
    ctx.log.info("hello %s from %s", who, os.getpid())
    return {"who": who, "pid": os.getpid()}

def nap(pid_file):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(pid_file, "w") as fh:
        json.dump([os.getpid(), child.pid], fh)
    time.sleep(600)
'''

JOBS = """
[jobs.greet]
params = {{ who = "nobody" }}
[[jobs.greet.steps]]
name = "process"
type = "python"
callable = "e2e_tasks:hello"
[[jobs.greet.steps]]
name = "thread"
type = "python"
callable = "e2e_tasks:hello"
isolation = "thread"
op_kwargs = {{ who = "${{steps.process.who}} again" }}

[jobs.sleepy]
[[jobs.sleepy.steps]]
name = "nap"
type = "python"
callable = "e2e_tasks:nap"
op_kwargs = {{ pid_file = "{pid_file}" }}
"""


def make_home(root: Path, store_url: str) -> Path:
    (root / "plugins").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "plugins" / "e2e_tasks.py").write_text(PLUGIN, encoding="utf-8")
    (root / "cadenza.toml").write_text(f'[store]\nurl = "{store_url}"\n', encoding="utf-8")
    pid_file = (root / "pids.json").as_posix()
    (root / "jobs.toml").write_text(JOBS.format(pid_file=pid_file), encoding="utf-8")
    return root


def cadenza(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cadenza", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120)


def test_a_run_on_postgresql_end_to_end(tmp_path: Path, pg_url: str) -> None:
    home = make_home(tmp_path / "home", pg_url)
    done = cadenza(home, "run", "greet", "-p", "who=pg", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["state"] == "SUCCEEDED" and document["params"] == {"who": "pg"}
    first, second = document["steps"]
    assert first["output"]["who"] == "pg" and second["output"]["who"] == "pg again"
    assert first["output"]["pid"] != second["output"]["pid"]  # process vs thread isolation
    logs = cadenza(home, "runs", "logs", document["id"], "--json")
    messages = [line["message"] for line in json.loads(logs.stdout)]
    assert f"hello pg from {first['output']['pid']}" in messages
    listed = cadenza(home, "runs", "list", "--json", "--job", "greet")
    assert [r["id"] for r in json.loads(listed.stdout)] == [document["id"]]


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name == "nt",
                    reason="sends SIGINT to a process group")
def test_ctrl_c_cancels_the_run_and_kills_the_step_processes(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", "sqlite:///data/cadenza.db")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "--home", str(home), "run", "sleepy"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    pid_file = home / "pids.json"
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
        time.sleep(0.05)
    pids = json.loads(pid_file.read_text())
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, (out, err)
    assert "CANCELED" in out
    for pid in pids:
        try:
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass
    shown = cadenza(home, "runs", "list", "--json")
    run = json.loads(shown.stdout)[0]
    assert run["state"] == "CANCELED"
    detail = json.loads(cadenza(home, "runs", "show", run["id"], "--json").stdout)
    assert detail["steps"][0]["state"] == "CANCELED"
