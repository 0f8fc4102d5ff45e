"""The sender's own checks under a FakeClock: a run RUNNING past ``long_run`` warns once; a
schedule that should have fired and has no run row after its grace (the scheduler is down
or wedged) alerts once until it fires again."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from notify_home import START, channels, notify_bench
from tests.support.mailhooks import smtp_server, webhook_receiver

from cadenza.store.fires import NewFire

LONG = """
[jobs.slow]
[jobs.slow.alerts]
recipients = ["role:ops"]
long_run = "2s"
[[jobs.slow.steps]]
name = "noop"
type = "python"
callable = "cz_notify_tasks:ok"
isolation = "thread"
"""


def test_long_run_warns_once_per_run(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, LONG, channels(smtp.port, hook.url)) as bench:
        run_id = bench.store.create_run("slow", "manual:test")
        bench.store.claim_runs("test:1:1", START + timedelta(minutes=5), run_ids=[run_id])
        bench.clock.advance(timedelta(seconds=1.5))
        assert bench.sender.notifier.check_long_runs(bench.clock.now()) == 0
        bench.clock.advance(timedelta(seconds=0.5))
        assert bench.sender.notifier.check_long_runs(bench.clock.now()) == 1
        bench.sender.round()
        bench.clock.advance(timedelta(minutes=1))
        bench.sender.round()
        assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
            "alice@example.org", "bob@example.org"]
        mail = smtp.inbox.to("alice@example.org")[0]
        assert mail["Subject"].startswith("[cadenza] slow is still running")
        assert "running longer than 2s" in mail.get_body(("plain",)).get_content()


STALLED = """
[jobs.hourly]
schedule = "0 * * * *"
timezone = "UTC"
[[jobs.hourly.steps]]
name = "noop"
type = "python"
callable = "cz_notify_tasks:ok"
isolation = "thread"
"""
RULE = '[[rules]]\nname = "stall"\non = ["stalled"]\njobs = ["*"]\nnotify = ["role:ops"]\n'


def test_a_schedule_that_does_not_fire_alerts_once(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, STALLED, channels(smtp.port, hook.url, RULE)) as bench:
        check = bench.sender.notifier.check_stalled
        since = START  # 08:00: the sender started; the 09:00 fire is owed
        bench.clock.advance(timedelta(hours=1, minutes=1, seconds=59))
        assert check(bench.clock.now(), since) == 0  # within missed_grace + margin
        bench.clock.advance(timedelta(seconds=1))
        assert check(bench.clock.now(), since) == 1
        bench.clock.advance(timedelta(hours=1))  # 10:02: still nothing; no second alert
        assert check(bench.clock.now(), since) == 0
        bench.sender.round()
        assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
            "alice@example.org", "bob@example.org"]
        mail = smtp.inbox.to("bob@example.org")[0]
        assert mail["Subject"].strip() == ("[cadenza] hourly did not fire at 2027-01-05 "
                                           "09:00 UTC")
        assert "its schedule job should have fired" in mail.get_body(("plain",)).get_content()
        # The scheduler comes back and records 11:00; then 12:00 is silent again: one more.
        eleven = START.replace(hour=11)
        bench.store.create_fires([NewFire("hourly", "job", eleven)])
        bench.clock.advance(eleven + timedelta(hours=1, minutes=2) - bench.clock.now())
        assert check(bench.clock.now(), since) == 1


def test_no_stalled_rule_no_check(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, STALLED, channels(smtp.port, hook.url)) as bench:
        bench.clock.advance(timedelta(hours=5))
        assert bench.sender.notifier.check_stalled(bench.clock.now(), START) == 0
