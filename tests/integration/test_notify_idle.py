"""An idle sender on a SQLite file: a round after one that left nothing to do makes no
query while nothing is committed, and makes them again after any commit (of this process
or another); an intent that time alone makes due (a retry), an open alert group and a rule
that watches the clock keep every round looking. The node's dispatcher wakes a quiet
sender when its idle poll finds something committed."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from notify_home import channels, notify_bench
from tests.support.mailhooks import free_port, smtp_server, webhook_receiver

from cadenza.clock import SystemClock
from cadenza.home import Home
from cadenza.node import Node
from cadenza.notify.sender import QUIET_SECONDS, Sender, backoff
from cadenza.store.engine import sqlite_path

FAILING = """
[jobs.nightly]
[jobs.nightly.alerts]
recipients = ["role:ops"]
[[jobs.nightly.steps]]
name = "load"
type = "python"
callable = "cz_notify_tasks:fail"
isolation = "thread"
op_kwargs = { message = "cannot load sales.csv" }
"""
UNGROUPED = "[alerts]\ngroup_failures = false\n"
LONG = FAILING.replace('recipients = ["role:ops"]', 'recipients = ["role:ops"]\nlong_run = "1h"')


def _counted(sender: Sender, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rounds made their looks at the store."""
    looks = [0]
    real = sender._looks

    def counting() -> int:
        looks[0] += 1
        return real()

    monkeypatch.setattr(sender, "_looks", counting)
    return looks


def test_an_idle_sender_makes_no_query_until_something_is_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url, UNGROUPED)) as bench:
        looks = _counted(bench.sender, monkeypatch)
        assert bench.sender.round() == 0 and looks == [1]
        for _ in range(3):
            bench.clock.advance(timedelta(seconds=2))
            assert bench.sender.round() == 0
        assert looks == [1]  # nothing committed: no query

        bench.run("nightly")  # its end writes the alert's intents
        assert bench.sender.round() == 2 and looks == [2]
        assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
            "alice@example.org", "bob@example.org"]
        bench.sender.round()  # the round after the deliveries: nothing left, quiet again
        seen = looks[0]
        bench.sender.round()
        assert looks[0] == seen

        # A commit of another process is seen too.
        url = bench.config.settings.store_url(bench.home)
        code = ("import sys; from cadenza.store import Store; "
                "s = Store.open(sys.argv[1], migrate=False); "
                "s.create_run('nightly', 'manual:cli'); s.close()")
        subprocess.run([sys.executable, "-c", code, url], check=True, timeout=60)
        bench.sender.round()
        assert looks[0] == seen + 1


def test_a_retry_that_time_alone_makes_due_is_delivered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    with webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(port, hook.url)) as bench:
        run_id = bench.run("nightly")
        bench.sender.round()  # nobody listens on the port: FAILED, tried again later
        assert {e.state for e in bench.log(run_id=run_id)} == {"FAILED"}
        looks = _counted(bench.sender, monkeypatch)
        with smtp_server(port) as smtp:
            bench.sender.round()  # not due yet; the intent stays PENDING
            bench.clock.advance(backoff(1))
            bench.sender.round()  # nothing was committed since, yet it looks: due now
            assert looks == [2]
            assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
                "alice@example.org", "bob@example.org"]


def test_an_open_alert_group_keeps_every_round_looking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure opens its job's alert group (by default), whose reminder is due in time."""
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url)) as bench:
        bench.run("nightly")
        bench.sender.round()
        assert len(smtp.inbox.mails) == 2
        looks = _counted(bench.sender, monkeypatch)
        for _ in range(3):
            bench.sender.round()
        assert looks == [3]


def test_a_rule_that_watches_the_clock_keeps_every_round_looking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, LONG, channels(smtp.port, hook.url)) as bench:
        assert bench.sender.notifier.watches_time()
        looks = _counted(bench.sender, monkeypatch)
        for _ in range(3):
            bench.sender.round()
        assert looks == [3]


def test_a_hooks_wake_keeps_the_rounds_looking_until_one_after_it_found_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hook wakes the sender when it writes an intent, before its transaction commits:
    the round it wakes may look too early, so the next round looks again."""
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url)) as bench:
        looks = _counted(bench.sender, monkeypatch)
        bench.sender.round()
        bench.sender.round()
        assert looks == [1]
        bench.sender.notifier.wake()  # what a hook calls
        bench.sender.round()  # looks (woken), but may have looked before the commit
        bench.sender.round()  # so this one looks too
        bench.sender.round()
        assert looks == [3]


def test_a_nudge_wakes_the_sender(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url)) as bench:
        bench.sender.round()
        wake = bench.sender._wake
        assert not wake.is_set()
        bench.sender.nudge()
        assert wake.is_set()


def test_the_dispatchers_idle_poll_tells_of_a_commit(tmp_path: Path) -> None:
    """The poll calls ``on_change`` when something was committed since the previous poll,
    and not otherwise."""
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url)) as bench:
        assert sqlite_path(bench.store.engine.url) is not None
        told: list[int] = []
        watch = bench.store.queue_watch(on_change=lambda: told.append(1))
        try:
            watch.any_queued()
            first = len(told)
            watch.any_queued()
            watch.any_queued()
            assert len(told) == first  # nothing committed
            bench.store.create_run("nightly", "manual:test")
            watch.any_queued()
            assert len(told) == first + 1
            watch.any_queued()
            assert len(told) == first + 1
        finally:
            watch.close()


MISSED = '[[rules]]\nname = "missed"\non = ["missed"]\njobs = ["*"]\nnotify = ["role:ops"]\n'


def test_a_quiet_sender_of_a_node_delivers_what_another_process_committed(
        tmp_path: Path) -> None:
    """A running node on SQLite: its sender, quiet (it would sleep 30 s), is woken by the
    dispatcher's idle poll when another process commits an intent; the mail goes within
    seconds, not at the sender's next timer."""
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url, MISSED)) as bench:
        config = bench.config
        store = Home(bench.home).open_store(config, clock=SystemClock())
        node = Node(Home(bench.home), config, store, clock=SystemClock(), workers=1,
                    scheduler=False, claimer=False)
        node.start()
        try:
            deadline = time.monotonic() + 20
            while node.sender._quiet_at is None:  # its first rounds, then quiet
                assert time.monotonic() < deadline, "the sender never went quiet"
                time.sleep(0.05)  # real threads of a real node
            code = ("import sys; from datetime import datetime, UTC; "
                    "from cadenza.assembly import assemble; "
                    "from cadenza.domain.states import RunState; from cadenza.home import Home; "
                    "from cadenza.store.fires import NewFire; from pathlib import Path; "
                    "home = Home(Path(sys.argv[1])); config = home.load_config(); "
                    "s = home.open_store(config); assemble(s).notifier.config = lambda: config; "
                    "s.create_fires([NewFire('nightly', 'job', datetime.now(UTC), "
                    "state=RunState.MISSED, reason='missed: test')]); s.close()")
            # The fire's hook writes the intents in that process, whose sender is not ours.
            subprocess.run([sys.executable, "-c", code, str(bench.home)], check=True,
                           timeout=60)
            sent = time.monotonic()
            while len(smtp.inbox.mails) < 2:
                assert time.monotonic() - sent < QUIET_SECONDS / 3, "not woken"
                time.sleep(0.05)
        finally:
            node.stop(timeout=30)
            store.close()
