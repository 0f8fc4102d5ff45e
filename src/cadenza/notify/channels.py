"""Channels: how one message leaves Cadenza (docs/notifications.md).

* :class:`EmailChannel` settings → :func:`send_email`: ``smtplib`` with STARTTLS
  (``starttls = true``, the default) or implicit TLS (``ssl = true``), optional login (the
  password comes from a ``${secret.NAME}`` reference, resolved by the config loader), a
  plain-text body and an HTML alternative, attachments. MIME is built by the standard
  library's :class:`email.message.EmailMessage`, never by hand.
* :class:`WebhookChannel` settings → :func:`post_webhook`: one JSON POST through the egress
  guard of the ``http`` step (:mod:`cadenza.netguard`): a private, loopback or
  link-local target is refused unless the channel says ``allow_private = true``. ``format``
  shapes the body: ``json`` (Cadenza's own fields), ``slack`` (``{"text": ...}``, what
  Slack incoming webhooks take) or ``teams`` (a MessageCard, what Microsoft Teams incoming
  webhooks take).

Errors are translated here, once: a failure that another try may cure (connection refused,
timeout, a 4xx/5xx transient SMTP reply, an HTTP 5xx or 429) is a :class:`DeliveryFailed`
with ``permanent = False``; one that no retry cures (refused recipient, bad address,
authentication refused, refused egress, HTTP 4xx) has ``permanent = True``.
"""

from __future__ import annotations

import email.utils
import smtplib
import ssl
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

import httpx

from cadenza.config.schema_settings import EmailChannel, WebhookChannel
from cadenza.domain.addresses import InvalidAddress, check_email
from cadenza.netguard import EgressPolicy, EgressRefused, guarded_client


@dataclass(frozen=True)
class Attachment:
    """A file sent with an e-mail: its name as the recipient sees it, and its bytes."""

    filename: str
    content: bytes
    mime: str = "application/octet-stream"


@dataclass(frozen=True)
class Message:
    """One message, already rendered and redacted: ``subject``, ``text`` (plain body),
    ``html`` (optional alternative), ``attachments``, and ``fields`` (what a webhook's JSON
    body carries: job, run, state, link ...)."""

    subject: str
    text: str
    html: str | None = None
    attachments: tuple[Attachment, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)


class DeliveryFailed(Exception):
    """A delivery did not happen; ``permanent``: retrying cannot help."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


def check_address(address: str) -> str:
    """``address`` when it is one plain e-mail address
    (:func:`cadenza.domain.addresses.check_email`); raises :class:`DeliveryFailed`
    (permanent) naming it otherwise."""
    try:
        return check_email(address)
    except InvalidAddress as exc:
        raise DeliveryFailed(f"invalid e-mail address {address!r}: {exc}",
                             permanent=True) from None


def build_email(channel: EmailChannel, to: str, message: Message,
                message_id: str | None = None) -> EmailMessage:
    """The MIME message for ``to``: text, then the HTML alternative, then attachments."""
    mail = EmailMessage()
    mail["Subject"] = message.subject
    mail["From"] = channel.sender
    mail["To"] = to
    mail["Message-ID"] = message_id or email.utils.make_msgid(domain="cadenza.local")
    mail.set_content(message.text)
    if message.html is not None:
        mail.add_alternative(message.html, subtype="html")
    for item in message.attachments:
        maintype, _, subtype = item.mime.partition("/")
        mail.add_attachment(item.content, maintype=maintype, subtype=subtype or "octet-stream",
                            filename=item.filename)
    return mail


def send_email(channel: EmailChannel, to: str, message: Message,
               message_id: str | None = None) -> str:
    """Send ``message`` to one address through ``channel``; returns the Message-ID.

    Raises :class:`DeliveryFailed` with the SMTP server's answer (never the password)."""
    address = check_address(to)
    mail = build_email(channel, address, message, message_id)
    timeout = channel.timeout.total_seconds()
    where = f"SMTP server {channel.host}:{channel.port}"
    try:
        smtp: smtplib.SMTP
        if channel.ssl:
            smtp = smtplib.SMTP_SSL(channel.host, channel.port, timeout=timeout,
                                    context=ssl.create_default_context())
        else:
            smtp = smtplib.SMTP(channel.host, channel.port, timeout=timeout)
        with smtp:
            if channel.starttls and not channel.ssl:
                smtp.starttls(context=ssl.create_default_context())
            if channel.username:
                smtp.login(channel.username, channel.password or "")
            refused = smtp.send_message(mail)
    except smtplib.SMTPAuthenticationError as exc:
        raise DeliveryFailed(f"{where} refused the login of {channel.username!r}: "
                             f"{_reply(exc.smtp_code, exc.smtp_error)}", permanent=True) from None
    except smtplib.SMTPRecipientsRefused as exc:
        answers = "; ".join(f"{who}: {_reply(code, text)}"
                            for who, (code, text) in exc.recipients.items())
        raise DeliveryFailed(f"{where} refused the recipient: {answers}",
                             permanent=_permanent_code(exc.recipients)) from None
    except smtplib.SMTPSenderRefused as exc:
        raise DeliveryFailed(f"{where} refused the sender {channel.sender!r}: "
                             f"{_reply(exc.smtp_code, exc.smtp_error)}",
                             permanent=500 <= exc.smtp_code < 600) from None
    except smtplib.SMTPResponseException as exc:
        raise DeliveryFailed(f"{where} answered {_reply(exc.smtp_code, exc.smtp_error)}",
                             permanent=500 <= exc.smtp_code < 600) from None
    except smtplib.SMTPServerDisconnected as exc:
        raise DeliveryFailed(f"{where} dropped the connection before the message was "
                             f"accepted: {exc or 'connection closed'}", permanent=False) from None
    except smtplib.SMTPNotSupportedError as exc:  # no STARTTLS / AUTH: the settings
        raise DeliveryFailed(f"{where}: {exc} (check starttls, ssl and username of "
                             f"the channel)", permanent=True) from None
    except smtplib.SMTPException as exc:
        raise DeliveryFailed(f"{where}: {exc}", permanent=False) from None
    except ssl.SSLError as exc:
        raise DeliveryFailed(f"{where}: TLS failed: {exc.reason or exc}",
                             permanent=False) from None
    except OSError as exc:  # refused, unreachable, timeout, name not resolved
        raise DeliveryFailed(f"cannot reach {where}: {exc.strerror or exc}",
                             permanent=False) from None
    if refused:
        raise DeliveryFailed(f"{where} refused {', '.join(refused)}", permanent=True)
    return str(mail["Message-ID"])


def _reply(code: int, text: bytes | str) -> str:
    shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return f"{code} {shown}".strip()


def _permanent_code(recipients: dict[str, tuple[int, bytes]]) -> bool:
    return all(500 <= code < 600 for code, _ in recipients.values())


def shown_url(url: str) -> str:
    """How a webhook's URL appears in errors and logs: scheme, host and port only. The path
    of an incoming-webhook URL is its credential (Slack's ``/services/T…/B…/secret``), so it
    is never shown, whether or not it came from a secret."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.host}{port}/…"


def webhook_body(channel: WebhookChannel, message: Message) -> dict[str, Any]:
    """The JSON body for ``channel.format``: Cadenza's fields, Slack's or Teams' shape."""
    if channel.format == "slack":
        return {"text": f"*{message.subject}*\n{message.text}"}
    if channel.format == "teams":
        return {"@type": "MessageCard", "@context": "https://schema.org/extensions",
                "summary": message.subject, "title": message.subject, "text": message.text}
    return {"subject": message.subject, "text": message.text, **message.fields}


def post_webhook(channel: WebhookChannel, message: Message, *,
                 policy: EgressPolicy | None = None) -> int:
    """POST ``message`` as JSON to the channel's URL; returns the HTTP status.

    The egress guard applies (``allow_private`` as for connections). Raises
    :class:`DeliveryFailed`: refused target or a 4xx answer (permanent, except 408 and
    429), connection problems and 5xx (retried)."""
    guard = policy or EgressPolicy(allow_private=channel.allow_private)
    shown = shown_url(channel.url)
    try:
        with guarded_client(guard, timeout=channel.timeout.total_seconds(),
                            follow_redirects=False) as client:
            response = client.post(channel.url, json=webhook_body(channel, message),
                                   headers=dict(channel.headers))
    except EgressRefused as exc:
        raise DeliveryFailed(f"webhook {shown}: {exc}", permanent=True) from None
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"webhook {shown}: {type(exc).__name__}: {exc}",
                             permanent=False) from None
    status = response.status_code
    if status >= 300:
        permanent = 400 <= status < 500 and status not in (408, 429)
        raise DeliveryFailed(f"webhook {shown} answered HTTP {status}", permanent=permanent)
    return status

