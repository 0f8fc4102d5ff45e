"""``cadenza notify test CHANNEL [--to X]`` and ``cadenza notifications list`` against a real
SMTP server and a real webhook receiver."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.mailhooks import smtp_server, webhook_receiver
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()


def make_home(tmp_path: Path, smtp_port: int, hook_url: str) -> Path:
    home = tmp_path / "home"
    assert runner.invoke(app, ["init", str(home)]).exit_code == 0
    with (home / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write(f"""
[channels.mail]
type = "email"
host = "127.0.0.1"
port = {smtp_port}
starttls = false
sender = "cadenza@example.org"
timeout = "5s"

[channels.hook]
type = "webhook"
url = "{hook_url}"
format = "slack"
allow_private = true

[channels.guarded]
type = "webhook"
url = "{hook_url}"
""")
    return home


def cz(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.stdout, result.stderr


def test_send_test_through_each_channel_and_list_the_log(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook:
        home = make_home(tmp_path, smtp.port, hook.url)
        code, stdout, _ = cz(home, "notify", "test", "mail", "--to", "ops@example.org")
        assert code == 0 and "sent to ops@example.org through mail" in stdout
        (mail,) = smtp.inbox.to("ops@example.org")
        assert mail["Subject"] == "[cadenza] Test message from channel mail"
        assert "cadenza notify test mail" in mail.get_body(("plain",)).get_content()

        code, stdout, _ = cz(home, "notify", "test", "hook")
        assert code == 0 and "sent to webhook:hook" in stdout
        (_, body), = hook.posts
        assert set(body) == {"text"} and "Test message from channel hook" in body["text"]

        code, _, stderr = cz(home, "notify", "test", "guarded")
        assert code == 1
        assert "FAILED to webhook:guarded" in stderr and "refused 127.0.0.1" in stderr
        assert len(hook.posts) == 1

        code, stdout, _ = cz(home, "notifications", "list", "--json")
        rows = json.loads(stdout)
        assert [(r["event"], r["recipient"], r["state"]) for r in rows] == [
            ("test", "webhook:guarded", "FAILED"), ("test", "webhook:hook", "SENT"),
            ("test", "ops@example.org", "SENT")]
        code, stdout, _ = cz(home, "notifications", "list", "--state", "failed", "--json")
        assert [r["recipient"] for r in json.loads(stdout)] == ["webhook:guarded"]
        code, stdout, _ = cz(home, "notifications", "list")
        assert code == 0 and "ops@example.org" in stdout


def test_bad_requests_are_clear_errors(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook:
        home = make_home(tmp_path, smtp.port, hook.url)
        code, _, stderr = cz(home, "notify", "test", "sms")
        assert code == 1 and "no channel 'sms' in cadenza.toml" in stderr
        assert "mail, hook, guarded" in stderr
        code, _, stderr = cz(home, "notify", "test", "mail")
        assert code == 2 and "--to" in stderr
        code, _, stderr = cz(home, "notify", "test", "mail", "--to", "role:ops")
        assert code == 1 and "role 'ops' has no enabled user" in stderr
        code, _, stderr = cz(home, "notifications", "list", "--state", "LOST")
        assert code == 2 and "expected SENT or FAILED" in stderr
        assert smtp.inbox.mails == []


def test_a_failure_of_run_local_is_delivered_by_a_later_sender(tmp_path: Path) -> None:
    from cadenza.clock import SystemClock
    from cadenza.home import Home
    from cadenza.lifecycle import Lifecycle
    from cadenza.notify.sender import Sender
    from cadenza.store.outbox import Outbox

    with smtp_server() as smtp, webhook_receiver() as hook:
        home = make_home(tmp_path, smtp.port, hook.url)
        (home / "plugins" / "cz_notify_cli.py").write_text(
            "import cadenza\n\ndef broken():\n    raise cadenza.Fatal('no file')\n")
        (home / "jobs.toml").write_text(
            '[jobs.broken]\n[jobs.broken.alerts]\nrecipients = ["ops@example.org"]\n'
            '[[jobs.broken.steps]]\nname = "s"\ntype = "python"\n'
            'callable = "cz_notify_cli:broken"\nisolation = "thread"\n')
        code, _, stderr = cz(home, "run", "broken", "--local")
        assert code != 0, stderr
        assert smtp.inbox.mails == []  # nothing sends without a serve...
        loaded = Home(home.resolve())
        config = loaded.load_config()
        store = loaded.open_store(config)
        try:
            assert Outbox(store).pending() == 1  # ...but the intent is kept
            sender = Sender(store, lambda: config, Lifecycle(SystemClock()), owner="t:1:1")
            sender.round()
        finally:
            store.close()
        (mail,) = smtp.inbox.to("ops@example.org")
        assert mail["Subject"].startswith("[cadenza] broken failed")
