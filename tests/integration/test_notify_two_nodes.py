"""Two nodes' senders on one store (PostgreSQL: ``FOR UPDATE SKIP LOCKED``; SQLite: one
writer) deliver each message once: 30 MISSED fires, two ops users, 60 e-mails, no twice."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from notify_home import START, channels, notify_bench
from tests.support.mailhooks import smtp_server, webhook_receiver

from cadenza.domain.states import RunState
from cadenza.lifecycle import Lifecycle
from cadenza.notify.sender import Sender
from cadenza.store.fires import NewFire
from cadenza.store.outbox import Outbox

JOBS = """
[jobs.nightly]
[[jobs.nightly.steps]]
name = "noop"
type = "python"
callable = "cz_notify_tasks:ok"
isolation = "thread"
"""
RULE = '[[rules]]\nname = "missed"\non = ["missed"]\njobs = ["*"]\nnotify = ["role:ops"]\n'


@pytest.mark.reliability_case(52)
def test_two_senders_deliver_each_message_once(tmp_path: Path, store_url: str) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, JOBS, channels(smtp.port, hook.url, RULE),
                         store_url=store_url if "postgresql" in store_url else None) as bench:
        fires = [NewFire("nightly", "job", START - timedelta(hours=k), state=RunState.MISSED,
                         reason="missed: test") for k in range(30)]
        run_ids = bench.store.create_fires(fires)
        assert all(run_ids) and Outbox(bench.store).pending() == 30
        other_store = bench.store.__class__.open(
            bench.config.settings.store_url(bench.home), clock=bench.clock,
            redactor=bench.store.redactor, migrate=False)
        try:
            other = Sender(other_store, lambda: bench.config, Lifecycle(bench.clock),
                           owner="other-host:2:1")
            barrier = threading.Barrier(2)
            errors: list[BaseException] = []

            def drain(sender: Sender) -> None:
                try:
                    barrier.wait()
                    for _ in range(5):
                        sender.round()
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=drain, args=(s,))
                       for s in (bench.sender, other)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert not errors, errors
        finally:
            other_store.close()
        received = Counter((m["Subject"], a) for rcpt, m in smtp.inbox.mails for a in rcpt)
        assert len(received) == 60 and set(received.values()) == {1}
        log = Outbox(bench.store).log(limit=1000)
        assert len(log) == 60 and {e.state for e in log} == {"SENT"}
        assert Outbox(bench.store).pending() == 0
