"""The ``notify`` step: a report written by an earlier step goes out as an attachment to
each recipient; a retry after a recipient was refused sends only to those still owed."""

from __future__ import annotations

from pathlib import Path

from notify_home import channels, notify_bench
from tests.support.mailhooks import smtp_server, webhook_receiver

from cadenza.domain.states import RunState, StepState

JOBS = """
[jobs.report]
params = { period = "2027-01" }
retry = { attempts = 3, backoff = "fixed", base_seconds = 1, jitter = 0 }
[[jobs.report.steps]]
name = "write"
type = "python"
callable = "cz_notify_tasks:write_report"
isolation = "thread"
op_kwargs = { path = "sales-2027-01.csv" }
[[jobs.report.steps]]
name = "tell"
type = "notify"
to = ["role:ops", "finance@example.org"]
subject = "Sales ${params.period} ready"
body = "The report of ${params.period} is attached."
attach = ["sales-${params.period}.csv"]
"""


def test_the_attachment_is_delivered_to_each_recipient(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, JOBS, channels(smtp.port, hook.url)) as bench:
        run_id = bench.run("report")
        run = bench.store.get_run(run_id)
        assert run is not None and run.state is RunState.SUCCEEDED, run
        assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
            "alice@example.org", "bob@example.org", "finance@example.org"]
        mail = smtp.inbox.to("finance@example.org")[0]
        assert mail["Subject"] == "Sales 2027-01 ready"
        assert mail.get_body(("plain",)).get_content().strip() == \
            "The report of 2027-01 is attached."
        (attachment,) = list(mail.iter_attachments())
        assert attachment.get_filename() == "sales-2027-01.csv"
        assert attachment.get_content() == "period,total\n2027-01,42\n"
        tell = next(s for s in bench.store.list_step_runs(run_id) if s.step == "tell")
        assert tell.output["recipients"] == ["alice@example.org", "bob@example.org",
                                             "finance@example.org"]
        assert len(tell.output["message_ids"]) == 3
        assert {e.state for e in bench.log(run_id=run_id)} == {"SENT"}


def test_a_retry_sends_only_to_the_recipients_still_owed(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, JOBS, channels(smtp.port, hook.url)) as bench:
        smtp.inbox.refuse_once.add("bob@example.org")
        run_id = bench.run("report")
        tells = [s for s in bench.store.list_step_runs(run_id) if s.step == "tell"]
        assert [(s.attempt, s.state) for s in tells] == [(1, StepState.FAILED),
                                                         (2, StepState.SUCCEEDED)]
        assert "bob@example.org" in (tells[0].error or "") and "451" in (tells[0].error or "")
        got = sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt)
        assert got == ["alice@example.org", "bob@example.org", "finance@example.org"]
        log = {e.recipient: (e.state, e.attempts) for e in bench.log(run_id=run_id)}
        assert log == {"alice@example.org": ("SENT", 1), "bob@example.org": ("SENT", 2),
                       "finance@example.org": ("SENT", 1)}


def test_a_role_without_users_is_a_failed_delivery_and_the_others_go(tmp_path: Path) -> None:
    jobs = JOBS.replace('to = ["role:ops", "finance@example.org"]',
                        'to = ["role:auditors", "finance@example.org"]')
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, jobs, channels(smtp.port, hook.url)) as bench:
        run_id = bench.run("report")
        assert bench.store.get_run(run_id).state is RunState.SUCCEEDED  # type: ignore[union-attr]
        assert [r for r, _ in smtp.inbox.mails] == [["finance@example.org"]]
        log = {e.recipient: (e.state, e.error) for e in bench.log(run_id=run_id)}
        assert log["role:auditors"][0] == "FAILED"
        assert "role 'auditors' has no enabled user" in (log["role:auditors"][1] or "")
