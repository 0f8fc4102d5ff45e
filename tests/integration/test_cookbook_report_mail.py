"""The brief's cookbook case: a job writes a report with a bar chart to PDF and mails it with
a ``notify`` step, through a real SMTP server (aiosmtpd on loopback). The PDF arrives as an
attachment, opens, and holds the section titles and the chart image."""

from __future__ import annotations

import io
from pathlib import Path

import pypdf
from notify_home import channels, notify_bench
from tests.support.mailhooks import smtp_server, webhook_receiver

from cadenza.domain.states import RunState

JOBS = """
[jobs.sales-report]
params = { month = "2027-01" }
[[jobs.sales-report.steps]]
name = "seed"
type = "sql_query"
connection = "wh"
query = '''CREATE TABLE sales AS SELECT 'North' AS region, 120 AS amount
  UNION ALL SELECT 'South', 80 UNION ALL SELECT 'East', 45'''
[[jobs.sales-report.steps]]
name = "report"
type = "report"
path = "reports/sales-${params.month}.pdf"
title = "Sales ${params.month}"
[[jobs.sales-report.steps.sections]]
title = "Sales by region"
connection = "wh"
query = "SELECT region, amount FROM sales ORDER BY amount DESC"
chart = "bar"
x = "region"
y = "amount"
[[jobs.sales-report.steps.sections]]
title = "Top region"
connection = "wh"
query = "SELECT region FROM sales ORDER BY amount DESC LIMIT 1"
[[jobs.sales-report.steps]]
name = "mail"
type = "notify"
to = ["role:ops"]
subject = "Sales report ${params.month}"
body = "The sales report of ${params.month} is attached."
attach = ["${steps.report.path}"]
"""


def test_a_report_with_a_bar_chart_goes_out_as_a_pdf_attachment(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, JOBS, channels(smtp.port, hook.url)) as bench:
        run_id = bench.run("sales-report")
        run = bench.store.get_run(run_id)
        assert run is not None and run.state is RunState.SUCCEEDED, run
        assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
            "alice@example.org", "bob@example.org"]
        for address in ("alice@example.org", "bob@example.org"):
            (mail,) = smtp.inbox.to(address)
            assert mail["Subject"] == "Sales report 2027-01"
            (attachment,) = list(mail.iter_attachments())
            assert attachment.get_filename() == "sales-2027-01.pdf"
            assert attachment.get_content_type() == "application/pdf"
            reader = pypdf.PdfReader(io.BytesIO(attachment.get_content()))
            text = "\n".join(page.extract_text() for page in reader.pages)
            assert "Sales 2027-01" in text
            assert "Sales by region" in text and "Top region" in text
            assert sum(len(page.images) for page in reader.pages) == 1  # the bar chart
        assert {e.state for e in bench.log(run_id=run_id)} == {"SENT"}
