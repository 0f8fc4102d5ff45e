"""Notifications from real `cadenza serve` processes to a real SMTP server (aiosmtpd on
loopback) and a real webhook receiver (SPEC §11, §13).

* The brief's example: the demo home (`cadenza init --example`) ships the rule
  `missed-to-ops`; serve is stopped over 02:00 Europe/Paris and started after: the MISSED
  run is recorded and each of the two ops users gets exactly one e-mail naming the job and
  the scheduled time in Europe/Paris.
* `kill -9` of the serve while it is sending: after restart the message is sent, once to
  each recipient.
* `long_run = "2s"` on a step sleeping 5 s: one warning while the run is RUNNING.
* A `notify` step with an attachment, its serve killed between two recipients: resumed by
  the next serve, it sends to the second only (operation keys).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from email.message import EmailMessage
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.domain.states import RunState
from cadenza.home import Home
from tests.e2e.serve_helpers import Served, eventually
from tests.support.mailhooks import smtp_server, webhook_receiver

pytestmark = pytest.mark.slow
runner = CliRunner()


def add_ops_users(home: Path) -> None:
    for name in ("alice", "bob"):
        result = runner.invoke(app, ["--home", str(home), "users", "add", name, "--role", "ops",
                                     "--email", f"{name}@example.org"])
        assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["--home", str(home), "users", "add", "carol", "--role",
                                 "viewer", "--email", "carol@example.org"])
    assert result.exit_code == 0, result.output


def log_rows(home: Path) -> list[dict[str, object]]:
    result = runner.invoke(app, ["--home", str(home), "notifications", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, object]] = json.loads(result.stdout)
    return rows


def test_the_brief_example_missed_run_mails_each_ops_user_once(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    assert runner.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    add_ops_users(home)
    with smtp_server() as smtp, webhook_receiver() as hook:
        settings = home / "cadenza.toml"
        text = settings.read_text()
        assert "port = 8025" in text and 'notify = ["role:ops"]' in text  # as shipped
        settings.write_text(text.replace("port = 8025", f"port = {smtp.port}") + f"""
[channels.chat]
type = "webhook"
url = "{hook.url}"
format = "teams"
allow_private = true

[[rules]]
name = "missed-to-chat"
on = ["missed"]
jobs = ["sales-*"]
notify = ["channel:chat"]
channel = "chat"
""")
        # 01:55 in Paris (CET, UTC+1) on 2027-01-05: up, then stopped before 02:00.
        first = Served(home, fake_now="2027-01-05T00:55:00+00:00")
        try:
            first.wait_ready(120)  # a loaded machine boots slowly
        finally:
            first.stop()
        # Back at 02:10 Paris: the 02:00 fire is owed and past its grace: MISSED.
        second = Served(home, fake_now="2027-01-05T01:10:00+00:00")
        try:
            second.wait_ready(120)  # a loaded machine boots slowly

            def both_mailed() -> list[tuple[list[str], EmailMessage]] | None:
                mails = smtp.inbox.mails
                return mails if len(mails) >= 2 and hook.posts else None

            eventually(both_mailed, 40, "the e-mails of the missed run")
            time.sleep(3)  # real time: let a duplicate, if any, arrive before counting
        finally:
            output = second.stop()
    store = Home(home.resolve()).open_store()
    try:
        runs = store.list_runs(job="sales-load", limit=10)
    finally:
        store.close()
    missed = [r for r in runs if r.state is RunState.MISSED]
    assert [r.scheduled_for.isoformat() for r in missed if r.scheduled_for] == [
        "2027-01-05T01:00:00+00:00"], output
    assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
        "alice@example.org", "bob@example.org"]
    for address in ("alice@example.org", "bob@example.org"):
        (mail,) = smtp.inbox.to(address)
        assert "sales-load" in mail["Subject"] and "missed" in mail["Subject"]
        assert "2027-01-05 02:00 CET (Europe/Paris)" in mail["Subject"]
        body = mail.get_body(("plain",)).get_content()
        assert "Job:        sales-load" in body
        assert "Scheduled:  2027-01-05 02:00 CET (Europe/Paris)" in body
        assert f"http://127.0.0.1:8765/runs/{missed[0].id}" in body
    ((_, card),) = hook.posts
    assert card["@type"] == "MessageCard" and "sales-load" in card["title"]
    rows = log_rows(home)
    assert sorted((r["recipient"], r["state"]) for r in rows) == [
        ("alice@example.org", "SENT"), ("bob@example.org", "SENT"), ("webhook:chat", "SENT")]


FAILING_PLUGIN = '''
import time

import cadenza


def broken():
    raise cadenza.Fatal("the warehouse refused the load")


def slow(seconds=5):
    time.sleep(float(seconds))
    return 1
'''


def alert_home(tmp_path: Path, smtp_port: int, jobs: str) -> Path:
    home = tmp_path / "home"
    assert runner.invoke(app, ["init", str(home)]).exit_code == 0
    (home / "plugins" / "cz_notify_e2e.py").write_text(FAILING_PLUGIN)
    (home / "jobs.toml").write_text(jobs)
    with (home / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write(f"""
[channels.mail]
type = "email"
host = "127.0.0.1"
port = {smtp_port}
starttls = false
sender = "cadenza@example.org"
timeout = "5s"
""")
    add_ops_users(home)
    return home


def run_job(home: Path, job: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "cadenza", "--home", str(home), "run", job,
                           "--json"], capture_output=True, text=True, timeout=120)
    run: dict[str, object] = json.loads(done.stdout)
    return run


def test_kill_9_while_sending_then_restart_sends_once(tmp_path: Path) -> None:
    jobs = """
[jobs.broken]
retry = { attempts = 1 }
[jobs.broken.alerts]
recipients = ["role:ops"]
[[jobs.broken.steps]]
name = "load"
type = "python"
callable = "cz_notify_e2e:broken"
isolation = "thread"
"""
    with smtp_server() as smtp:
        home = alert_home(tmp_path, smtp.port, jobs)
        first = Served(home)
        killed: list[int] = []

        def kill_the_sender(rcpt: list[str], message: EmailMessage) -> str | None:
            if not killed:  # the first message: the serve dies in the middle of sending
                killed.append(first.proc.pid)
                first.proc.kill()
                return "451 4.3.0 the server went away"
            return None

        smtp.inbox.on_message = kill_the_sender
        try:
            first.wait_ready(120)  # a loaded machine boots slowly
            run = run_job(home, "broken")
            assert run["state"] == "FAILED"
            eventually(lambda: first.proc.poll() is not None, 30, "the serve killed")
        finally:
            first.stop()
        assert killed and smtp.inbox.mails == []
        assert all(r["state"] != "SENT" for r in log_rows(home))
        second = Served(home)
        try:
            second.wait_ready(120)  # a loaded machine boots slowly
            eventually(lambda: len(smtp.inbox.mails) >= 2, 30, "the alerts after restart")
            time.sleep(3)  # real time: a duplicate, if any, would arrive now
        finally:
            second.stop()
    assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
        "alice@example.org", "bob@example.org"]
    assert all(f"Run:        {run['id']}" in m.get_body(("plain",)).get_content()
               for _, m in smtp.inbox.mails)
    sent = [(r["recipient"], r["state"]) for r in log_rows(home) if r["state"] == "SENT"]
    assert sorted(sent) == [("alice@example.org", "SENT"), ("bob@example.org", "SENT")]


def test_long_run_warns_once_while_running_then_the_run_ends(tmp_path: Path) -> None:
    jobs = """
[jobs.slow]
[jobs.slow.alerts]
recipients = ["role:ops"]
long_run = "2s"
[[jobs.slow.steps]]
name = "wait"
type = "python"
callable = "cz_notify_e2e:slow"
isolation = "thread"
op_kwargs = { seconds = 5 }
"""
    with smtp_server() as smtp:
        home = alert_home(tmp_path, smtp.port, jobs)
        served = Served(home)
        try:
            served.wait_ready(120)  # a loaded machine boots slowly
            run = run_job(home, "slow")
            time.sleep(3)  # real time: a second warning, if any, would arrive now
        finally:
            served.stop()
    assert run["state"] == "SUCCEEDED"
    assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
        "alice@example.org", "bob@example.org"]
    for _, mail in smtp.inbox.mails:
        assert mail["Subject"].startswith("[cadenza] slow is still running")
        body = mail.get_body(("plain",)).get_content()
        assert "State:      RUNNING" in body  # rendered while the run was running
        assert "running longer than 2s" in body


STEP_PLUGIN = '''
from pathlib import Path


def write_report(ctx):
    root = Path(ctx.settings.file_roots(ctx.home)[0])
    root.mkdir(parents=True, exist_ok=True)
    (root / "sales.csv").write_text("period,total\\\\n2027-01,42\\\\n")
    return {"path": "sales.csv"}
'''


def test_a_notify_step_killed_mid_sending_resumes_without_sending_twice(
        tmp_path: Path) -> None:
    jobs = """
[jobs.report]
[[jobs.report.steps]]
name = "write"
type = "python"
callable = "cz_notify_step_e2e:write_report"
isolation = "thread"
[[jobs.report.steps]]
name = "tell"
type = "notify"
to = ["role:ops"]
subject = "Sales report"
body = "Attached."
attach = ["sales.csv"]
"""
    with smtp_server() as smtp:
        home = alert_home(tmp_path, smtp.port, jobs)
        (home / "plugins" / "cz_notify_step_e2e.py").write_text(STEP_PLUGIN)
        first = Served(home)
        killed: list[str] = []

        def kill_on_the_second(rcpt: list[str], message: EmailMessage) -> str | None:
            if rcpt == ["bob@example.org"] and not killed:
                killed.extend(rcpt)  # alice's delivery is recorded; the serve dies now
                first.proc.kill()
                return "451 4.3.0 the server went away"
            return None

        smtp.inbox.on_message = kill_on_the_second
        try:
            first.wait_ready(120)  # a loaded machine boots slowly
            queued = subprocess.run(
                [sys.executable, "-m", "cadenza", "--home", str(home), "run", "report",
                 "--no-wait", "--json"], capture_output=True, text=True, timeout=120)
            assert queued.returncode == 0, queued.stderr
            eventually(lambda: first.proc.poll() is not None, 60, "the serve killed")
        finally:
            first.stop()
        assert killed == ["bob@example.org"]
        assert [rcpt for rcpt, _ in smtp.inbox.mails] == [["alice@example.org"]]
        second = Served(home)
        try:
            second.wait_ready(120)  # a loaded machine boots slowly

            def finished() -> object:
                store = Home(home.resolve()).open_store()
                try:
                    runs = store.list_runs(job="report", limit=5)
                finally:
                    store.close()
                return runs and runs[0].state is RunState.SUCCEEDED and runs[0]

            run = eventually(finished, 90, "the resumed run to succeed")
        finally:
            second.stop()
    assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
        "alice@example.org", "bob@example.org"]
    for _, mail in smtp.inbox.mails:
        (attachment,) = list(mail.iter_attachments())
        assert attachment.get_filename() == "sales.csv"
    sent = [r for r in log_rows(home) if r["run_id"] == getattr(run, "id", None)]
    assert sorted((r["recipient"], r["state"]) for r in sent) == [
        ("alice@example.org", "SENT"), ("bob@example.org", "SENT")]
