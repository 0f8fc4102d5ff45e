"""Notifications end to end in one process: real run ends write the outbox, the sender
delivers to a real SMTP server (aiosmtpd on loopback) and a real webhook receiver.

SPEC §11: one alert per final state (never per attempt), ``recovered`` once, retries with
backoff until the SMTP server is back, no secret in any message, log or event, and bad
input is a FAILED delivery with its reason, never a crash."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from notify_home import channels, notify_bench
from tests.support.mailhooks import Inbox, Smtp, free_port, smtp_server, webhook_receiver

from cadenza.notify.sender import backoff

FAILING = """
[jobs.nightly]
retry = { attempts = 3, backoff = "fixed", base_seconds = 1, jitter = 0 }
[jobs.nightly.alerts]
recipients = ["role:ops", "lead@example.org"]
[[jobs.nightly.steps]]
name = "load"
type = "python"
callable = "cz_notify_tasks:fail"
isolation = "thread"
op_kwargs = { message = "cannot load sales.csv" }
"""


def test_three_failed_attempts_send_one_alert_per_recipient(tmp_path: Path) -> None:
    rule = '[[rules]]\nname = "fail-hook"\non = ["failed", "needs_review"]\njobs = ["night*"]\n' \
           'notify = ["channel:hook"]\nchannel = "hook"\n'
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url, rule)) as bench:
        run_id = bench.run("nightly")
        assert [s.attempt for s in bench.store.list_step_runs(run_id)] == [1, 2, 3]
        tried = bench.sender.round()
        assert tried == 4, bench.log(run_id=run_id)  # alice, bob, lead, the webhook
        bench.sender.round()
        got = sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt)
        assert got == ["alice@example.org", "bob@example.org", "lead@example.org"]
        mail = smtp.inbox.to("alice@example.org")[0]
        # Attempts spent: the run waits for review (SPEC §7), the alert's event.
        assert mail["Subject"].startswith("[cadenza] nightly needs review")
        text = mail.get_body(("plain",)).get_content()
        assert run_id in text and "Failed step: load" in text
        assert "cannot load sales.csv" in text
        assert f"https://cadenza.example.org/runs/{run_id}" in text
        assert mail.get_body(("html",)) is not None
        assert len(hook.posts) == 1
        headers, body = hook.posts[0]
        assert headers["X-Cadenza"] == "yes"
        assert body["job"] == "nightly" and body["run_id"] == run_id
        assert body["state"] == "NEEDS_REVIEW" and body["failing_step"] == "load"
        states = sorted((e.recipient, e.state, e.attempts) for e in bench.log(run_id=run_id))
        assert states == [("alice@example.org", "SENT", 1), ("bob@example.org", "SENT", 1),
                          ("lead@example.org", "SENT", 1), ("webhook:hook", "SENT", 1)]
        events = bench.store.list_events(event_type="NOTIFICATION_SENT")
        assert len(events) == 4


def test_failed_then_succeeded_is_recovered_once(tmp_path: Path) -> None:
    marker = (tmp_path / "flipped").as_posix()
    jobs = f"""
[jobs.flip]
retry = {{ attempts = 1 }}
[[jobs.flip.steps]]
name = "go"
type = "python"
callable = "cz_notify_tasks:flip"
isolation = "thread"
op_kwargs = {{ marker = "{marker}" }}
"""
    rule = ('[[rules]]\nname = "state"\non = ["failed", "recovered"]\njobs = ["flip"]\n'
            'notify = ["role:ops"]\n')
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, jobs, channels(smtp.port, hook.url, rule)) as bench:
        first = bench.run("flip")
        second = bench.run("flip")
        third = bench.run("flip")
        bench.sender.round()
        subjects = sorted(m["Subject"].split(" (")[0] for m in smtp.inbox.to("alice@example.org"))
        assert subjects == ["[cadenza] flip failed", "[cadenza] flip recovered"]
        assert [e.state for e in bench.log(run_id=first)] == ["SENT", "SENT"]
        assert len(bench.log(run_id=second)) == 2  # alice and bob, recovered
        assert bench.log(run_id=third) == []


@pytest.mark.reliability_case(52)
def test_smtp_down_then_back_is_retried_and_sent_once(tmp_path: Path) -> None:
    port = free_port()
    with webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(port, hook.url)) as bench:
        run_id = bench.run("nightly")
        bench.sender.round()  # nobody listens on the port
        failed = bench.log(run_id=run_id)
        assert {(e.state, e.attempts) for e in failed} == {("FAILED", 1)}
        assert all("cannot reach SMTP server 127.0.0.1" in (e.error or "") for e in failed)
        with smtp_server(port) as smtp:
            # Not before the backoff: the round changes nothing.
            bench.clock.advance(backoff(1) - timedelta(seconds=1))
            bench.sender.round()
            assert smtp.inbox.mails == []
            bench.clock.advance(timedelta(seconds=1))
            bench.sender.round()
            bench.clock.advance(backoff(2))
            bench.sender.round()
            assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
                "alice@example.org", "bob@example.org", "lead@example.org"]
        assert {(e.state, e.attempts) for e in bench.log(run_id=run_id)} == {("SENT", 2)}


def test_a_secret_in_the_error_never_leaves(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    secret = "Zq9-hunter2-secret-Xy"
    jobs = FAILING.replace("cannot load sales.csv", f"login refused for password {secret}")
    rule = ('[[rules]]\nname = "hook"\non = ["needs_review"]\njobs = ["*"]\n'
            'notify = ["channel:hook"]\nchannel = "hook"\n')
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, jobs, channels(smtp.port, hook.url, rule),
                         secrets={"db_password": secret}) as bench:
        (bench.home / "templates" / "notify").mkdir(parents=True)
        (bench.home / "templates" / "notify" / "subject.txt").write_text(
            "{{ job }} {{ state }}: {{ error }}")  # a home template that shows the error
        run_id = bench.run("nightly")
        bench.sender.round()
        assert len(smtp.inbox.mails) == 3 and len(hook.posts) == 1
        for _, mail in smtp.inbox.mails:
            raw = mail.as_string()
            assert secret not in raw
            assert "***" in mail["Subject"]
            assert mail["Subject"].startswith("nightly NEEDS_REVIEW")
        assert secret not in repr(hook.posts) and "***" in hook.posts[0][1]["error"]
        assert secret not in repr(bench.log(run_id=run_id))
        assert secret not in repr(bench.store.list_events(run_id=run_id))
        assert secret not in caplog.text
        assert secret.encode() not in (bench.home / "data" / "cadenza.db").read_bytes()


TEMPLATED = "{{ 7*7 }} {% if true %}yes{% endif %} ${params.period} ${secret.db_password}"


@pytest.mark.reliability_case(19)
def test_template_syntax_in_an_error_stays_literal_in_every_message(tmp_path: Path) -> None:
    """An error holding Jinja syntax (``{{ 7*7 }}``, ``{% if %}``) and token syntax
    (``${params.period}``, ``${secret.NAME}``) reaches the alert mail (subject from a home
    template, text and HTML bodies) and the webhook as written: message templates get it
    as a value, never as template text, and tokens are substituted once, in the job's own
    strings, never inside a value. A notify step whose subject reads an earlier step's
    output holding the same text sends it as written too."""
    written = TEMPLATED.replace("${", "$${")  # "$${" writes a literal "${" in jobs.toml
    jobs = FAILING.replace('op_kwargs = { message = "cannot load sales.csv" }',
                           f"op_kwargs = {{ message = '{written}' }}")
    jobs = jobs.replace("[jobs.nightly]", '[jobs.nightly]\nparams = { period = "2027-01" }')
    jobs += f"""
[jobs.relay]
params = {{ period = "2027-01" }}
[[jobs.relay.steps]]
name = "say"
type = "python"
callable = "cz_notify_tasks:say"
isolation = "thread"
op_kwargs = {{ text = '{written}' }}
[[jobs.relay.steps]]
name = "tell"
type = "notify"
to = ["relay@example.org"]
subject = "said: ${{steps.say.text}}"
body = "${{steps.say.text}}"
"""
    rule = ('[[rules]]\nname = "hook"\non = ["needs_review"]\njobs = ["nightly"]\n'
            'notify = ["channel:hook"]\nchannel = "hook"\n')
    secret = "Zq9-templated-secret-Xy"
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, jobs, channels(smtp.port, hook.url, rule),
                         secrets={"db_password": secret}) as bench:
        (bench.home / "plugins" / "cz_notify_tasks.py").write_text(
            (bench.home / "plugins" / "cz_notify_tasks.py").read_text()
            + "\n\ndef say(text):\n    return {'text': text}\n")
        (bench.home / "templates" / "notify").mkdir(parents=True)
        (bench.home / "templates" / "notify" / "subject.txt").write_text(
            "{{ job }} {{ state }}: {{ error }}")
        bench.run("nightly")
        relay = bench.run("relay")
        assert bench.store.get_run(relay).state.value == "SUCCEEDED"  # type: ignore[union-attr]
        bench.sender.round()
        alert = smtp.inbox.to("lead@example.org")[0]
        parts = [alert["Subject"], alert.get_body(("plain",)).get_content(),
                 alert.get_body(("html",)).get_content()]
        for part in parts:
            assert "{{ 7*7 }}" in part and "{% if true %}yes{% endif %}" in part
            assert "${params.period}" in part and "${secret.db_password}" in part
            assert " 49 " not in part and "2027-01 " not in part.split("{{ 7*7 }}")[1]
        assert TEMPLATED in hook.posts[0][1]["error"]
        told = smtp.inbox.to("relay@example.org")[0]
        assert told["Subject"] == f"said: {TEMPLATED}"
        assert told.get_body(("plain",)).get_content().strip() == TEMPLATED
        for _, mail in smtp.inbox.mails:
            assert secret not in mail.as_string()


def test_bad_recipients_and_targets_are_failed_deliveries_with_reasons(tmp_path: Path) -> None:
    rules = """
[[rules]]
name = "nobody"
on = ["needs_review"]
jobs = ["*"]
notify = ["role:auditors", "user:legacy", "user:ghost"]

[[rules]]
name = "private"
on = ["needs_review"]
jobs = ["*"]
notify = ["channel:private"]
channel = "private"

[channels.private]
type = "webhook"
url = "http://127.0.0.1:9/hook"
"""
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url, rules)) as bench:
        # cadenza.toml refuses a malformed address; one stored by an older version (a
        # user's e-mail) still reaches the sender, which refuses it
        bench.store.add_user("legacy", "x", ["viewer"], email="ops..desk@example.org")
        run_id = bench.run("nightly")
        bench.sender.round()
        got = {e.recipient: (e.state, e.error) for e in bench.log(run_id=run_id)}
        assert got["alice@example.org"][0] == "SENT"
        assert got["role:auditors"] == ("FAILED", "role 'auditors' has no enabled user with "
                                                  "an e-mail address; nobody was notified")
        assert got["user:ghost"] == ("FAILED", "no user 'ghost'")
        state, error = got["ops..desk@example.org"]
        assert state == "FAILED" and "invalid e-mail address" in (error or "")
        state, error = got["webhook:private"]
        assert state == "FAILED" and "refused 127.0.0.1" in (error or "")
        assert "allow_private" in (error or "")
        # Failures for good are not tried again: the intent is done.
        assert bench.sender.outbox.pending() == 0
        bench.clock.advance(timedelta(hours=1))
        assert bench.sender.round() == 0


@pytest.mark.reliability_case(52)
def test_a_server_dropping_the_connection_mid_data_is_retried(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url)) as bench:
        smtp.inbox.drop_data = True
        run_id = bench.run("nightly")
        bench.sender.round()
        failed = bench.log(run_id=run_id)
        assert {e.state for e in failed} == {"FAILED"}
        assert all("dropped the connection before the message was accepted" in (e.error or "")
                   for e in failed), [e.error for e in failed]
        smtp.inbox.drop_data = False
        bench.clock.advance(backoff(1))
        bench.sender.round()
        assert {e.state for e in bench.log(run_id=run_id)} == {"SENT"}
        assert len(smtp.inbox.mails) == 3


class Refusing(Inbox):
    """An SMTP server that answers 550 for the mailboxes it does not know."""

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if address.startswith("gone"):
            return "550 5.1.1 mailbox unavailable"
        return await super().handle_RCPT(server, session, envelope, address, rcpt_options)


BAD_RECIPIENTS = """
[[rules]]
name = "people"
on = ["needs_review"]
jobs = ["*"]
notify = ["gone@example.org", "user:old", "user:odd"]
"""


def test_refused_and_malformed_recipients_are_failed_never_pending(tmp_path: Path) -> None:
    smtp = Smtp()
    smtp.inbox = Refusing()
    smtp.start()
    try:
        with webhook_receiver() as hook, notify_bench(
                tmp_path, FAILING, channels(smtp.port, hook.url, BAD_RECIPIENTS)) as bench:
            # e-mails stored before addresses were checked: one the parser cannot even
            # read (it used to escape the sender's round, leaving the intent PENDING and
            # claimed again every few minutes, for ever), one with a header in it
            bench.store.add_user("old", "x", ["viewer"], email="old@example.org.")
            bench.store.add_user("odd", "x", ["viewer"], email="a@example.org\r\nBcc: x@y.org")
            run_id = bench.run("nightly")
            bench.sender.round()
            got = {e.recipient: (e.state, e.error, e.attempts)
                   for e in bench.log(run_id=run_id)}
            state, error, attempts = got["gone@example.org"]
            assert (state, attempts) == ("FAILED", 1)
            assert "refused the recipient" in (error or "") and "550" in (error or "")
            for address in ("old@example.org.", "a@example.org\r\nBcc: x@y.org"):
                state, error, attempts = got[address]
                assert (state, attempts) == ("FAILED", 1), got
                assert "invalid e-mail address" in (error or "")
            assert got["alice@example.org"][0] == "SENT"
            assert all(rcpt != ["x@y.org"] for rcpt, _ in smtp.inbox.mails)
            # nothing is left to claim: the intent is done, not PENDING
            assert bench.sender.outbox.pending() == 0
            bench.clock.advance(timedelta(hours=1))
            assert bench.sender.round() == 0
    finally:
        smtp.stop()
