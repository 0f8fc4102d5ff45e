"""Repeated failures as one alert, under a FakeClock with a real SMTP server: ten identical
failures then a success are one alert, one reminder and one recovery; a snooze link of the
alert e-mail (no login, one use) mutes the group until its time, then reminders resume."""

from __future__ import annotations

import re
import warnings
from datetime import timedelta
from pathlib import Path

import notify_home
import pytest
from notify_home import channels, notify_bench
from tests.support.mailhooks import smtp_server, webhook_receiver

from cadenza.store.alert_groups import AlertGroups
from cadenza.web.app import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TASK = '''

def maybe(marker):
    """Fails until ``marker`` exists."""
    if Path(marker).exists():
        return 1
    raise cadenza.Fatal("the source is unreachable")
'''


def jobs(marker: Path) -> str:
    return f"""
[jobs.flaky]
[jobs.flaky.retry]
attempts = 1
[jobs.flaky.alerts]
recipients = ["role:ops"]
[[jobs.flaky.steps]]
name = "load"
type = "python"
callable = "cz_notify_tasks:maybe"
op_kwargs = {{ marker = "{marker.as_posix()}" }}
isolation = "thread"
"""


def bodies(smtp: object, to: str) -> list[tuple[str, str]]:
    return [(m["Subject"], m.get_body(("plain",)).get_content())
            for m in smtp.inbox.to(to)]  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _maybe_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify_home, "TASKS", notify_home.TASKS + TASK)


def test_ten_identical_failures_then_a_success_are_one_alert_one_reminder_one_recovery(
        tmp_path: Path) -> None:
    marker = tmp_path / "source-is-back"
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, jobs(marker), channels(smtp.port, hook.url)) as bench:
        for _ in range(10):
            run_id = bench.run("flaky")
            assert bench.store.get_run(run_id).state.value == "FAILED"
            bench.sender.round()
            bench.clock.advance(timedelta(minutes=5))
        mails = bodies(smtp, "alice@example.org")
        assert len(mails) == 1  # the first failure; nine counted
        subject, text = mails[0]
        assert subject.startswith("[cadenza] flaky failed")
        assert "Last log lines:" in text and "the source is unreachable" in text
        assert "/alerts/link/" in text
        [group] = AlertGroups(bench.store).open_groups()
        assert group.failures == 10 and group.told == 1
        bench.clock.advance(timedelta(minutes=11))  # an hour after the first alert
        bench.sender.round()
        bench.sender.round()
        mails = bodies(smtp, "alice@example.org")
        assert len(mails) == 2
        assert mails[1][0].startswith("[cadenza] flaky is still failing")
        assert "flaky failed 9 more time(s) since the last message (10 failure(s)" in mails[1][1]
        marker.write_text("x")
        run_id = bench.run("flaky")
        assert bench.store.get_run(run_id).state.value == "SUCCEEDED"
        bench.sender.round()
        bench.clock.advance(timedelta(hours=3))
        bench.sender.round()
        mails = bodies(smtp, "alice@example.org")
        assert [s.split(" (")[0] for s, _ in mails] == [
            "[cadenza] flaky failed", "[cadenza] flaky is still failing",
            "[cadenza] flaky recovered"]
        assert "after 10 failure(s)" in mails[2][1]
        assert AlertGroups(bench.store).open_groups() == []


def test_a_snooze_link_mutes_the_group_until_its_time_then_alerts_resume(
        tmp_path: Path) -> None:
    marker = tmp_path / "never"
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, jobs(marker), channels(smtp.port, hook.url)) as bench:
        bench.run("flaky")
        bench.sender.round()
        [(_, text)] = bodies(smtp, "alice@example.org")
        link = re.search(r"Snooze 1 h: https://cadenza\.example\.org(/alerts/link/\S+)", text)
        assert link is not None, text
        from cadenza.home import Home

        app = create_app(bench.store, home=Home(bench.home))
        with TestClient(app, base_url="https://cadenza.example.org") as browser:
            page = browser.get(link.group(1))  # what a mail scanner does: spends nothing
            assert page.status_code == 200 and "Snooze until" in page.text
            done = browser.post(link.group(1),
                                headers={"Origin": "https://cadenza.example.org"})
            assert done.status_code == 200 and "Snoozed until" in done.text
            again = browser.post(link.group(1),
                                 headers={"Origin": "https://cadenza.example.org"})
            assert again.status_code == 410 and "used already" in again.text
        [group] = AlertGroups(bench.store).open_groups()
        assert group.snoozed_by == "link:snooze_1h"
        for _ in range(3):  # failures while snoozed: counted, not sent
            bench.clock.advance(timedelta(minutes=15))
            bench.run("flaky")
            bench.sender.round()
        assert len(bodies(smtp, "alice@example.org")) == 1
        bench.clock.advance(timedelta(minutes=14))
        bench.sender.round()
        assert len(bodies(smtp, "alice@example.org")) == 1  # 08:59: still snoozed
        bench.clock.advance(timedelta(minutes=2))  # the snooze (1 h) is over
        bench.sender.round()
        mails = bodies(smtp, "alice@example.org")
        assert len(mails) == 2 and "failed 3 more time(s)" in mails[1][1]
        events = [e for e in bench.store.list_events() if e.event_type == "ALERT_CHANGED"]
        assert [e.actor for e in events] == ["link:snooze_1h"]


def test_a_failing_channel_is_told_through_the_other_channels_and_on_the_dashboard(
        tmp_path: Path) -> None:
    """The mail server refuses the recipient for good: the webhook channel says so, once
    an hour; the dashboard lists the channel with its error."""
    from test_notify_delivery import Refusing
    from tests.support.mailhooks import Smtp

    smtp = Smtp()
    smtp.inbox = Refusing()
    smtp.start()
    try:
        text = jobs(tmp_path / "never").replace('recipients = ["role:ops"]',
                                                'recipients = ["gone@example.org"]')
        with webhook_receiver() as hook, \
                notify_bench(tmp_path, text, channels(smtp.port, hook.url)) as bench:
            bench.run("flaky")
            bench.sender.round()
            bench.sender.round()
            told = [body for _, body in hook.posts]
            assert len(told) == 1, told
            assert "mail is failing" in str(told[0])
            assert "550" in str(told[0])
            from cadenza.home import Home
            from cadenza.security import hash_password

            bench.store.add_user("dana", hash_password("pass phrase 1"), ["viewer"])
            app = create_app(bench.store, home=Home(bench.home))
            with TestClient(app, base_url="https://cadenza.example.org") as browser:
                answer = browser.post("/api/login", json={"username": "dana",
                                                          "password": "pass phrase 1"})
                assert answer.status_code == 200, answer.text
                page = browser.get("/dashboard").text
                tile = page.split('id="tile-channels"')[1].split("</div></div>")[0]
                assert "<strong>mail</strong>" in tile and "550" in tile, tile
                alerts = page.split('id="tile-alerts"')[1].split("</div></div>")[0]
                assert "flaky" in alerts
                listed = browser.get("/alerts").text
                assert "flaky" in listed and "fatal" in listed
                assert "Snooze 1 h" not in listed  # a viewer sees, an operator acts
    finally:
        smtp.stop()
