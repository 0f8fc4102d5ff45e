"""Benchmark: what notifications cost the scheduler, and how fast the sender delivers
(not a test).

* ``missed``: ``create_fires`` of ``-n`` MISSED fires in one transaction, with no rule (the
  hook only looks) and with a rule on ``missed`` (one outbox row per fire, same transaction).
* ``deliver``: the sender delivering ``--deliver`` such intents, two ops users each, to a
  local aiosmtpd server over loopback (one SMTP connection per message, as in production).

Usage::

    python bench/notify.py -n 1000 --deliver 100

Prints one JSON object. SQLite in a fresh temporary directory.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from mailhooks import smtp_server

from cadenza.clock import SystemClock
from cadenza.config.loader import LoadedConfig
from cadenza.config.schema_jobs import JobConfig
from cadenza.config.schema_settings import Settings
from cadenza.domain.states import RunState
from cadenza.lifecycle import Lifecycle
from cadenza.notify.sender import Sender
from cadenza.store import Store
from cadenza.store.fires import NewFire
from cadenza.store.outbox import Outbox
from cadenza.store.tables import notification_outbox

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def config(home: Path, port: int, rule: bool) -> LoadedConfig:
    settings = Settings.model_validate({
        "channels": {"mail": {"type": "email", "host": "127.0.0.1", "port": port,
                              "starttls": False, "sender": "cadenza@example.org"}},
        "rules": [{"name": "missed", "on": ["missed"], "jobs": ["*"],
                   "notify": ["role:ops"]}] if rule else []})
    job = JobConfig.model_validate({"id": "nightly"})
    return LoadedConfig(home, settings, {"nightly": job})


def fires(n: int, offset: int) -> list[NewFire]:
    return [NewFire("nightly", "job", T0 + timedelta(minutes=offset + k),
                    state=RunState.MISSED, reason="missed") for k in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1000, help="MISSED fires per transaction")
    parser.add_argument("--deliver", type=int, default=100, help="intents to deliver")
    args = parser.parse_args()
    out: dict[str, Any] = {"n": args.n, "python": platform.python_version()}
    with tempfile.TemporaryDirectory() as tmp, smtp_server() as smtp:
        home = Path(tmp)
        store = Store.open(f"sqlite:///{(home / 'bench.db').as_posix()}", clock=SystemClock())
        store.add_user("alice", "x", ["ops"], email="alice@example.org")
        store.add_user("bob", "x", ["ops"], email="bob@example.org")
        current = {"config": config(home, smtp.port, False)}
        sender = Sender(store, lambda: current["config"], Lifecycle(SystemClock()),
                        owner="bench:1:1")
        sender.install()
        store.create_fires(fires(10, -100))  # warm up: statements compiled once
        start = time.perf_counter()
        store.create_fires(fires(args.n, 0))
        out["missed_no_rule_ms"] = round((time.perf_counter() - start) * 1000, 1)
        current["config"] = config(home, smtp.port, True)
        start = time.perf_counter()
        store.create_fires(fires(args.n, args.n))
        out["missed_with_rule_ms"] = round((time.perf_counter() - start) * 1000, 1)
        out["intents"] = Outbox(store).pending()
        with store.write() as c:  # deliver a smaller batch of its own
            c.execute(notification_outbox.update().values(state="DONE"))
        store.create_fires(fires(args.deliver, 2 * args.n))
        start = time.perf_counter()
        while Outbox(store).pending():
            sender.round()
        elapsed = time.perf_counter() - start
        out["delivered"] = len(smtp.inbox.mails)
        out["deliver_s"] = round(elapsed, 2)
        out["messages_per_s"] = round(len(smtp.inbox.mails) / elapsed, 1)
        store.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
