"""Notifications in the recipient's language and time zone: a user's own setting, else
``[server] language`` (English when unset), with a real SMTP server (aiosmtpd)."""

from __future__ import annotations

from pathlib import Path

from notify_home import channels, notify_bench
from tests.support.mailhooks import smtp_server, webhook_receiver

# Attempts spent, the run waits for review: the alert's event is needs_review.
FAILING = """
[jobs.nightly]
timezone = "Europe/Paris"
schedule = "0 2 * * *"
retry = { attempts = 1 }
[jobs.nightly.alerts]
recipients = ["role:ops", "lead@example.org"]
[[jobs.nightly.steps]]
name = "load"
type = "python"
callable = "cz_notify_tasks:fail"
isolation = "thread"
op_kwargs = { message = "cannot load sales.csv" }
"""


def test_each_recipient_reads_the_alert_in_their_language_and_zone(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, FAILING, channels(smtp.port, hook.url)) as bench:
        bench.store.update_user("alice", language="zh_Hans", timezone="Asia/Shanghai")
        bench.store.update_user("bob", language="fr")
        run_id = bench.run("nightly")
        bench.sender.round()
        alice = smtp.inbox.to("alice@example.org")[0]
        text = alice.get_body(("plain",)).get_content()
        subject = "[cadenza] nightly 待复核 (2027-01-05 16:00 CST (Asia/Shanghai))"
        assert alice["Subject"] == subject, alice["Subject"]
        lines = {line.split(":", 1)[0]: line.split(":", 1)[1].strip()
                 for line in text.splitlines() if ":" in line}
        assert lines["任务"] == "nightly" and lines["失败步骤"] == "load", text
        assert lines["状态"] == "待复核" and lines["运行"] == run_id
        # The run's last log lines follow, as the run wrote them (English events included):
        # what Cadenza itself says comes before them, in the reader's language.
        said, _, excerpt = text.partition("最近的日志行")
        assert excerpt, text
        assert "待复核" in said and "Failed step" not in said and "NEEDS_REVIEW" not in said
        assert "(Asia/Shanghai)" in text and "Europe/Paris" not in text, text
        html = alice.get_body(("html",)).get_content()
        assert 'lang="zh-Hans"' in html and "失败步骤" in html
        bob = smtp.inbox.to("bob@example.org")[0]
        assert bob["Subject"].startswith("[cadenza] nightly est à vérifier"), bob["Subject"]
        text = bob.get_body(("plain",)).get_content()
        assert "Étape en échec: load" in text and "État:" in text and "à vérifier" in text
        assert "Europe/Paris" in text  # no zone of his own: the job's
        lead = smtp.inbox.to("lead@example.org")[0]  # an address: the server's (English)
        assert lead["Subject"].startswith("[cadenza] nightly needs review")
        assert "Failed step: load" in lead.get_body(("plain",)).get_content()


def test_server_language_is_the_default_for_addresses(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook:
        settings = channels(smtp.port, hook.url).replace(
            "[server]\n", '[server]\nlanguage = "fr"\n', 1)
        with notify_bench(tmp_path, FAILING, settings) as bench:
            bench.run("nightly")
            bench.sender.round()
            lead = smtp.inbox.to("lead@example.org")[0]
            assert lead["Subject"].startswith("[cadenza] nightly est à vérifier")
