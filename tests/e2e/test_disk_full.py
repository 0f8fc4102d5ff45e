"""A full disk and a read-only one under a home's data directory (RELIABILITY #47), on a
real 2 MB tmpfs: ``cadenza run``, ``cadenza secrets set`` and ``cadenza serve`` as real
processes. Every write failure is one message (what failed, what is kept, what to do),
exit code 3, no traceback; nothing is shown done before it is recorded; ``serve`` logs it
once a minute and ``/api/health`` says degraded."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreFull
from cadenza.store import Store
from cadenza.store.boundary import NewRun
from cadenza.web.app import create_app
from tests.e2e.serve_helpers import Served, eventually
from tests.support.tmpfs import fill, remount, small_tmpfs

TASKS = '''
"""Python steps of the disk-full tests."""

import errno
import os
import time


def fill(directory, ctx=None):
    """Fill the file system of ``directory`` to the last byte, then succeed."""
    fd = os.open(os.path.join(directory, "filled-by-step.bin"),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            while True:
                try:
                    os.write(fd, b"\\0" * size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return 7


def done(ctx=None):
    return 1


def nap(seconds=30, ctx=None):
    time.sleep(float(seconds))
    return 1
'''

JOBS = """
[jobs.fill]
[[jobs.fill.steps]]
name = "fill"
type = "python"
callable = "cz_disk_tasks:fill"
op_kwargs = {{ directory = "{data}" }}
[[jobs.fill.steps]]
name = "after"
type = "python"
callable = "cz_disk_tasks:done"

[jobs.slow]
[[jobs.slow.steps]]
name = "nap"
type = "python"
callable = "cz_disk_tasks:nap"
"""


def settings(root: Path, lease: str) -> None:
    (root / "cadenza.toml").write_text(
        '[store]\nurl = "sqlite:///data/cadenza.db"\n\n[workers]\ncount = 2\n'
        f'lease = "{lease}"\n', encoding="utf-8")


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A home whose ``data/`` (store, secrets) is a 2 MB tmpfs."""
    root = tmp_path / "home"
    with small_tmpfs(root / "data"):
        (root / "plugins").mkdir()
        (root / "plugins" / "cz_disk_tasks.py").write_text(TASKS, encoding="utf-8")
        settings(root, "60s")
        (root / "jobs.toml").write_text(
            textwrap.dedent(JOBS.format(data=(root / "data").as_posix())), encoding="utf-8")
        yield root


def cli(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cadenza", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120, input=stdin,
                          env=dict(os.environ))


def free(data: Path) -> None:
    for filler in data.glob("*.bin"):
        filler.unlink()


@pytest.mark.reliability_case(47)
def test_a_local_run_on_a_disk_that_fills_up_mid_run(home: Path) -> None:
    data = home / "data"
    done = cli(home, "run", "fill")
    shown = done.stdout + done.stderr
    assert done.returncode == 3, shown
    assert "Traceback" not in shown
    # The step's end was never recorded: it is never shown done.
    assert "step fill: SUCCEEDED" not in done.stdout, shown
    assert "step fill: RUNNING" in done.stdout
    error = done.stderr
    assert error.startswith("error: run ") and error.count("error:") == 1, error
    assert "the end of step 'fill' (SUCCEEDED) was not recorded" in error
    assert "disk full (database or disk is full" in error
    assert f"free space on the disk of {data}" in error
    assert "Kept: what was recorded before" in error and "cadenza runs show" in error

    # Left for recovery as any run whose worker stopped: RUNNING, its step RUNNING.
    free(data)
    listed = cli(home, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert run["state"] == "RUNNING"
    shown_run = cli(home, "runs", "show", run["id"], "--json")
    steps = json.loads(shown_run.stdout)["steps"]
    assert [(s["name"], s["state"]) for s in steps] == [("fill", "RUNNING")]


def test_a_local_run_whose_lease_cannot_be_renewed_on_a_full_disk(home: Path) -> None:
    data = home / "data"
    settings(home, "3s")  # renewed every second: the disk fills during the step
    proc = subprocess.Popen([sys.executable, "-m", "cadenza", "--home", str(home), "run",
                             "slow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    try:
        listed = eventually(lambda: (lambda d: d.returncode == 0 and "RUNNING" in d.stdout
                                     and d)(cli(home, "runs", "list")), what="RUNNING")
        assert listed
        fill(data)
        out, error = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        free(data)
    assert proc.returncode == 3, out + error
    assert "Traceback" not in error and "LOST" not in out, out + error
    assert "another holder" not in out + error
    told = [line for line in error.splitlines() if line.startswith("error: ")]
    assert len(told) == 1, error
    # Whichever comes first: the keeper gives the lease up, or the step's process stops on
    # its own deadline and its end cannot be recorded. Either way one message, exit 3.
    assert told[0].startswith("error: run ") and (
        " stopped: its lease could not be renewed: " in told[0]
        or " stopped: the end of step 'nap' (FAILED) was not recorded: " in told[0]), told[0]
    assert "the store could not record a change: disk full (database or disk is full" in told[0]
    assert "the run stays RUNNING until its lease expires" in told[0]


@pytest.mark.reliability_case(47)
def test_a_run_on_a_read_only_store(home: Path) -> None:
    data = home / "data"
    assert cli(home, "runs", "list").returncode == 0  # the store exists, migrated
    remount(data, "ro")
    try:
        done = cli(home, "run", "fill")
    finally:
        remount(data, "rw")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    # SQLite says "unable to open database file" when the WAL files cannot be created,
    # "attempt to write a readonly database" when they exist: both are read-only.
    assert done.stderr.startswith("error: no run of 'fill' was recorded: the store could not "
                                  "record a change: read-only ("), done.stderr
    assert done.stderr.endswith(f"{data / 'cadenza.db'}); make {data} writable again "
                                "(remount its file system read-write)\n"), done.stderr
    listed = cli(home, "runs", "list", "--json")
    assert json.loads(listed.stdout) == []


def test_secrets_set_on_a_full_then_read_only_disk(home: Path) -> None:
    data = home / "data"
    first = cli(home, "secrets", "set", "KEPT", "--value-stdin", stdin="first-value\n")
    assert first.returncode == 0, first.stderr
    before = (data / "secrets.json").read_bytes()

    filler = fill(data)
    full = cli(home, "secrets", "set", "LOST", "--value-stdin", stdin="second-value\n")
    assert full.returncode == 3, full.stdout + full.stderr
    assert "Traceback" not in full.stderr and "OSError" not in full.stderr
    assert full.stderr.startswith("error: secret LOST was not stored: disk full: "
                                  "No space left on device"), full.stderr
    assert "is as it was (the secrets stored before are kept)" in full.stderr
    assert "free space on that disk" in full.stderr
    assert (data / "secrets.json").read_bytes() == before
    assert not list(data.glob(".secrets.json.*.tmp"))  # no half-written temp file left
    filler.unlink()

    remount(data, "ro")
    try:
        ro = cli(home, "secrets", "set", "LOST", "--value-stdin", stdin="second-value\n")
    finally:
        remount(data, "rw")
    assert ro.returncode == 3, ro.stdout + ro.stderr
    assert "Traceback" not in ro.stderr
    assert ro.stderr.startswith("error: secret LOST was not stored: read-only: "
                                "Read-only file system"), ro.stderr
    assert "make it writable" in ro.stderr
    listed = cli(home, "secrets", "list", "--json")
    assert [s["name"] for s in json.loads(listed.stdout)] == ["KEPT"]


class AppClient:
    """The web app called in this process, through httpx's ASGI transport."""

    def __init__(self, store: Store) -> None:
        self.app = create_app(store)

    def get(self, path: str) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://cz") as client:
                return await client.get(path)

        return asyncio.run(call())


@pytest.mark.reliability_case(47)
def test_the_store_and_its_health_on_a_disk_that_fills_then_frees(tmp_path: Path) -> None:
    clock = FakeClock("2027-01-01T00:00:00+00:00")
    with small_tmpfs(tmp_path / "data") as data, \
            Store.open(f"sqlite:///{(data / 'cadenza.db').as_posix()}", clock=clock) as store:
        store.create_runs([NewRun("job", "manual:test")])
        client = AppClient(store)
        assert client.get("/api/health").json()["status"] == "ok"

        filler = fill(data)
        with pytest.raises(StoreFull) as failed:
            store.create_runs([NewRun("job", "manual:test") for _ in range(50)])
        assert str(failed.value).startswith(
            "the store could not record a change: disk full (database or disk is full; "
            f"{data / 'cadenza.db'}); free space on the disk of {data}")
        response = client.get("/api/health")
        assert response.status_code == 503
        assert response.json() == {
            "status": "degraded", "version": response.json()["version"], "store": "sqlite",
            "store_ok": True, "reason": "disk full: database or disk is full (since "
            f"2027-01-01T00:00:00+00:00; {data / 'cadenza.db'})"}
        assert len(store.list_runs()) == 1  # nothing of the failed write is there

        filler.unlink()
        store.create_runs([NewRun("job", "manual:test")])
        clock.advance(30)  # a write works again, but the failure is recent
        assert client.get("/api/health").status_code == 503
        clock.advance(31)
        ok = client.get("/api/health")
        assert ok.status_code == 200 and ok.json()["reason"] is None


def _health(port: int) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=5)


def test_serve_logs_a_full_disk_once_and_says_degraded(home: Path) -> None:
    data = home / "data"
    settings(home, "3s")  # renewed every second: many failed writes in a few seconds
    served = Served(home)
    try:
        served.wait_ready()
        assert _health(served.port).json()["status"] == "ok"
        queued = cli(home, "run", "slow", "--no-wait")
        assert queued.returncode == 0, queued.stderr
        run_id = queued.stdout.strip()

        def running() -> bool:
            shown = cli(home, "runs", "show", run_id, "--json")
            return shown.returncode == 0 and json.loads(shown.stdout)["state"] == "RUNNING"

        eventually(running, what="the run to start")
        fill(data)
        # The lease (3 s) is renewed every second and, once that fails, tried again every
        # second; the reaper tries every second too: many failed writes in a few seconds.
        response = eventually(
            lambda: (lambda r: r if r.status_code == 503 else None)(_health(served.port)),
            what="/api/health to say degraded")
        body = response.json()
        assert body["status"] == "degraded" and body["store_ok"] is True
        # Whichever saw the full disk first says so: the probe of data/ ("No space left on
        # device", asked for by /api/health itself) or a failed write of the store.
        assert re.fullmatch(r"disk full: (No space left on device|database or disk is full) "
                            rf"\(since \S+; ({re.escape(str(data))}|"
                            rf"{re.escape(str(data / 'cadenza.db'))})\)",
                            body["reason"]), body
        # The store's own failure comes as soon as the lease's renewal is refused, and is
        # the reason given from then on (it names the store's file).
        def store_failure() -> dict[str, object] | None:
            health = _health(served.port)
            said: dict[str, object] = health.json()
            return said if health.status_code == 503 and str(said["reason"]).startswith(
                "disk full: database or disk is full (since ") else None

        store_full = eventually(store_failure, seconds=15,
                                what="/api/health to give the store's write failure")
        assert str(store_full["reason"]).endswith(f"; {data / 'cadenza.db'})"), store_full
        time.sleep(6)  # real processes: let the node's loops fail a few more times
    finally:
        output = served.stop()
        free(data)
    print(output)  # shown when the test fails
    assert "Traceback" not in output, output
    lines = output.splitlines()
    throttled = [line for line in lines if "store write failures are logged at most once" in line]
    assert len(throttled) == 1, output
    # Besides the one throttled line, only the run stopped for its lease names the cause.
    others = [line for line in lines if "database or disk is full" in line
              and line not in throttled and f"run {run_id}: stopped," not in line]
    assert others == [], output


@pytest.mark.reliability_case(47)
def test_a_backup_to_a_full_then_read_only_disk(tmp_path: Path) -> None:
    """``cadenza backup`` to a real tmpfs: on a full disk it stops with one message (disk
    full, what is kept, what to do), exit 3, no traceback, no partial file, and the
    backup already there (``--force``) is kept byte for byte; on a read-only disk the
    same, saying read-only. The store is unchanged and the next backup, once there is
    room, works."""
    root = tmp_path / "home"
    root.mkdir()
    settings(root, "60s")
    (root / "jobs.toml").write_text("# no jobs\n", encoding="utf-8")
    assert cli(root, "runs", "list").returncode == 0  # the store exists, migrated
    with small_tmpfs(tmp_path / "backups", "2m") as backups:
        first = cli(root, "backup", str(backups / "b.db"))
        assert first.returncode == 0, first.stderr
        kept = (backups / "b.db").read_bytes()
        fill(backups)
        full = cli(root, "backup", "--force", str(backups / "b.db"))
        assert full.returncode == 3, full.stdout + full.stderr
        assert "Traceback" not in full.stderr and full.stderr.count("error:") == 1, full.stderr
        assert full.stderr.startswith(f"error: backup to {backups / 'b.db'} not written: "
                                      "disk full ("), full.stderr
        assert "(the backup already there is kept)" in full.stderr
        assert f"free space on the disk of {backups}" in full.stderr
        assert (backups / "b.db").read_bytes() == kept
        assert sorted(p.name for p in backups.iterdir()) == ["b.db", "filler.bin"]
        free(backups)
        remount(backups, "ro")
        try:
            read_only = cli(root, "backup", str(backups / "c.db"))
        finally:
            remount(backups, "rw")
        assert read_only.returncode == 3, read_only.stdout + read_only.stderr
        assert "Traceback" not in read_only.stderr
        assert read_only.stderr.startswith(f"error: backup to {backups / 'c.db'} not written: "
                                           "read-only ("), read_only.stderr
        assert f"make writable the disk of {backups}" in read_only.stderr
        assert sorted(p.name for p in backups.iterdir()) == ["b.db"]
        again = cli(root, "backup", str(backups / "c.db"))
        assert again.returncode == 0, again.stderr
    assert cli(root, "runs", "list").returncode == 0
