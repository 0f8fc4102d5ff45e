"""Channels' pure parts: the address check, the MIME message (text, HTML, attachments),
the webhook bodies for json / Slack / Teams, and the sender's backoff."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cadenza.config.schema_settings import EmailChannel, WebhookChannel
from cadenza.notify.channels import (
    Attachment,
    DeliveryFailed,
    Message,
    build_email,
    check_address,
    webhook_body,
)
from cadenza.notify.sender import backoff

MESSAGE = Message("[cadenza] nightly failed", "Job: nightly\n", "<b>nightly</b>",
                  (Attachment("report.csv", b"a,b\n1,2\n", "text/csv"),),
                  {"job": "nightly", "run_id": "R1", "state": "FAILED"})


def test_the_mime_message_has_text_html_and_the_attachment() -> None:
    channel = EmailChannel.model_validate({"type": "email", "host": "h",
                                           "sender": "cadenza@example.org"})
    mail = build_email(channel, "ops@example.org", MESSAGE, "<id@cadenza.local>")
    assert (mail["From"], mail["To"], mail["Message-ID"]) == (
        "cadenza@example.org", "ops@example.org", "<id@cadenza.local>")
    assert mail.get_body(("plain",)).get_content() == "Job: nightly\n"  # type: ignore[union-attr]
    assert "<b>nightly</b>" in mail.get_body(("html",)).get_content()  # type: ignore[union-attr]
    (part,) = list(mail.iter_attachments())
    assert part.get_filename() == "report.csv" and part.get_content_type() == "text/csv"
    assert part.get_content() == "a,b\n1,2\n"


@pytest.mark.parametrize("address", ["a..b@example.org", "x<y@example.org", "a@b@c.org",
                                     "Alice <a@example.org>", "nodomain@localhost"])
def test_invalid_addresses_are_permanent_failures(address: str) -> None:
    with pytest.raises(DeliveryFailed, match="invalid e-mail address") as caught:
        check_address(address)
    assert caught.value.permanent


def test_a_plain_address_passes() -> None:
    assert check_address("ops.desk+cz@example.org") == "ops.desk+cz@example.org"


def hook(fmt: str) -> WebhookChannel:
    return WebhookChannel.model_validate({"type": "webhook", "format": fmt,
                                          "url": "https://hooks.example.org/x"})


def test_webhook_bodies() -> None:
    assert webhook_body(hook("json"), MESSAGE) == {
        "subject": "[cadenza] nightly failed", "text": "Job: nightly\n", "job": "nightly",
        "run_id": "R1", "state": "FAILED"}
    assert webhook_body(hook("slack"), MESSAGE) == {
        "text": "*[cadenza] nightly failed*\nJob: nightly\n"}
    teams = webhook_body(hook("teams"), MESSAGE)
    assert teams["@type"] == "MessageCard" and teams["title"] == "[cadenza] nightly failed"
    assert teams["text"] == "Job: nightly\n"


def test_backoff_doubles_up_to_ten_minutes() -> None:
    assert [backoff(n) for n in (1, 2, 3)] == [timedelta(seconds=s) for s in (10, 20, 40)]
    assert backoff(20) == timedelta(minutes=10)


def test_a_webhook_url_is_shown_without_its_path() -> None:
    from cadenza.notify.channels import shown_url

    assert shown_url("https://hooks.slack.com/services/T0/B0/s3cr3tPath?token=x") == \
        "https://hooks.slack.com/…"
    assert shown_url("http://127.0.0.1:9/hook") == "http://127.0.0.1:9/…"
