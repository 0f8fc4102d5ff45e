"""A home wired for notifications: a local SMTP channel (default), a webhook channel, users
with role ``ops``, a FakeClock store, an executor and a notification sender."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from executor_home import make_home

from cadenza.clock import FakeClock
from cadenza.config import LoadedConfig
from cadenza.executor.request import RunRequest
from cadenza.executor.runner import Executor
from cadenza.home import Home
from cadenza.lifecycle import Lifecycle
from cadenza.notify.sender import Sender
from cadenza.store import Store
from cadenza.store.outbox import LogEntry, Outbox

START = datetime.fromisoformat("2027-01-05T08:00:00+00:00")

TASKS = '''
"""Python steps of the notification tests."""

from pathlib import Path

import cadenza


def fail(message="boom"):
    raise cadenza.Retryable(message)


def flip(marker):
    """Fails when ``marker`` does not exist (creating it), succeeds afterwards."""
    path = Path(marker)
    if not path.exists():
        path.write_text("x")
        raise cadenza.Fatal("first run fails")
    return 1


def ok():
    return 1


def write_report(ctx, path):
    root = Path(ctx.settings.file_roots(ctx.home)[0])
    root.mkdir(parents=True, exist_ok=True)
    (root / path).write_text("period,total\\n2027-01,42\\n")
    return {"path": path}


def crash_once(marker):
    """Ends the process the first time (a crash after the step before it)."""
    import os

    path = Path(marker)
    if not path.exists():
        path.write_text("x")
        os._exit(9)
    return 1
'''


def channels(smtp_port: int, hook_url: str, extra: str = "") -> str:
    return f"""
[server]
base_url = "https://cadenza.example.org"

[channels.mail]
type = "email"
host = "127.0.0.1"
port = {smtp_port}
starttls = false
sender = "cadenza@example.org"
timeout = "5s"
default = true

[channels.hook]
type = "webhook"
url = "{hook_url}"
allow_private = true
headers = {{ X-Cadenza = "yes" }}
{extra}
"""


@dataclass
class NotifyBench:
    home: Path
    config: LoadedConfig
    store: Store
    clock: FakeClock
    executor: Executor
    sender: Sender

    def run(self, job: str) -> str:
        """Enqueue ``job`` and execute it (every retry too) to a final state."""
        run_id = self.executor.enqueue(job, RunRequest(), trigger="manual:test")
        for _ in range(10):
            outcome = self.executor.execute(run_id)
            run = self.store.get_run(run_id)
            assert run is not None
            if run.state.value != "QUEUED":
                return run_id
            assert outcome is not None
            if run.not_before is not None and run.not_before > self.clock.now():
                self.clock.advance(run.not_before - self.clock.now())
        raise AssertionError("the run did not end")

    def log(self, **query: str) -> list[LogEntry]:
        return Outbox(self.store).log(**query)


@contextmanager
def notify_bench(root: Path, jobs: str, settings: str, *, store_url: str | None = None,
                 users: bool = True,
                 secrets: dict[str, str] | None = None) -> Iterator[NotifyBench]:
    path = make_home(root, jobs, store_url=store_url)
    (path / "plugins" / "cz_notify_tasks.py").write_text(TASKS, encoding="utf-8")
    home = Home(path.resolve())
    for name, value in (secrets or {}).items():
        home.secrets.set(name, value)
    with home.config_file.open("a", encoding="utf-8") as fh:
        fh.write(settings)
    config = home.load_config()
    clock = FakeClock(START)
    store = home.open_store(config, clock=clock)
    if users:
        store.add_user("alice", "x", ["ops"], email="alice@example.org")
        store.add_user("bob", "x", ["ops", "viewer"], email="bob@example.org")
        store.add_user("carol", "x", ["viewer"], email="carol@example.org")
    sender = Sender(store, lambda: config, Lifecycle(clock), owner="test:1")
    sender.install()
    executor = Executor(store, config)
    try:
        yield NotifyBench(home.path, config, store, clock, executor, sender)
    finally:
        executor.close()
        store.close()
