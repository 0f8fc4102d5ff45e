"""``notify``: send a message through a notification channel (docs/notifications.md).

::

    [[jobs.sales-load.steps]]
    name = "tell"
    type = "notify"
    to = ["role:ops", "finance@example.org"]
    subject = "Sales ${params.period} loaded"
    body = "Rows: ${steps.load.rows}"
    attach = ["reports/sales-${params.period}.csv"]   # inside [files].roots
    channel = "mail"                                  # default: the default channel

Recipients are resolved when the step runs (``role:X``: every enabled user with that role
and an e-mail). Each delivery is one operation key, ``notify:RUN:STEP:RECIPIENT``
(``ctx.once``): a step resumed after a crash, or retried after a failure, sends only to the
recipients not yet recorded, so one message per recipient per run. The deliveries are also
recorded in ``notification_log`` (``cadenza notifications list``) with a NOTIFICATION_SENT
event.

Subject and body go through the home's redactor like every other message. A delivery that
no retry can help (a role with no users, an invalid address, a refused recipient) is
logged as FAILED with its reason and the others still go; the step fails (fatal) only when
no recipient at all received the message. An SMTP server that cannot be reached is a
retryable error: the next attempt sends to the recipients still owed.
"""

from __future__ import annotations

import mimetypes
from contextlib import closing
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from cadenza.config.types import FilePath, Identifier, NonEmptyStr, Recipient, Ref
from cadenza.domain.errors import Fatal, Retryable
from cadenza.private_files import of_settings
from cadenza.steps.base import StepConfig, to_list
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult

MAX_ATTACHMENT_BYTES = 20 * 1024 * 1024
"""Attachments of one message, in all (most mail servers refuse more than 25 MB)."""


class NotifyConfig(StepConfig):
    """``to`` (addresses, ``role:X``, ``user:X``) and ``subject``; ``channel`` defaults to
    the default channel of cadenza.toml; ``body`` may hold ``${...}`` tokens; ``attach``
    lists files inside ``[files].roots``."""

    to: Annotated[list[Recipient], BeforeValidator(to_list), Field(min_length=1)] = Field(
        description="Who is told: addresses, role:NAME or user:NAME, e.g. role:ops.")
    subject: NonEmptyStr = Field(description=(
        "The message's subject, e.g. Sales for ${params.period} loaded."))
    channel: Annotated[Identifier | None, Ref("channel")] = Field(None, description=(
        "A channel of cadenza.toml (default: its default channel)."))
    body: str = Field("", description=(
        "The message; ${...} values are filled in, e.g. ${steps.load.rows} rows."))
    attach: list[FilePath] = Field(default_factory=list, title="Attachments", description=(
        "Files to attach, inside the file roots, e.g. ${steps.report.path}."))


class NotifyStep(StepType):
    """Send a notification (docs/notifications.md)."""

    name = "notify"
    Config = NotifyConfig

    def run(self, ctx: StepContext, config: NotifyConfig) -> StepResult:
        """Send one message per recipient (see the module docstring)."""
        from cadenza.home import Home
        from cadenza.notify.channels import DeliveryFailed, Message
        from cadenza.notify.recipients import resolve
        from cadenza.notify.sender import deliver
        from cadenza.store import Store
        from cadenza.store.outbox import FAILED, SENT, Outbox

        settings = ctx.settings
        name = config.channel or settings.default_channel()
        channel = settings.channels.get(name or "")
        if channel is None or name is None:
            raise Fatal(f"step {ctx.step.name!r}: unknown channel {name!r} (channels: "
                        f"{', '.join(settings.channels) or 'none'})")
        redactor = Home(ctx.home).redactor
        message = Message(redactor.redact_text(config.subject),
                          redactor.redact_text(config.body),
                          attachments=tuple(_attachments(ctx, config.attach)))
        step = ctx.step.name
        store = Store.open(settings.store_url(ctx.home), redactor=redactor, migrate=False,
                           clock=ctx.clock)
        sent: list[str] = []
        ids: list[str] = []
        failed: list[str] = []
        transient: list[str] = []
        with closing(store):
            outbox = Outbox(store)
            for delivery in resolve(config.to, name, channel.type, store):
                key = f"notify:{ctx.run.id}:{step}:{delivery.recipient}"
                log_key = f"step:{ctx.run.id}:{step}:{delivery.recipient}"
                target = settings.channels.get(delivery.channel)
                problem = delivery.problem
                if problem is None and target is None:
                    problem = f"unknown channel {delivery.channel!r}"
                if problem is not None or target is None:
                    failed.append(f"{delivery.recipient}: {problem}")
                    outbox.record(log_key, run_id=ctx.run.id, channel=delivery.channel,
                                  recipient=delivery.recipient, state=FAILED, error=problem,
                                  attempts=ctx.step.attempt, event="step", job_id=ctx.run.job_id,
                                  final=True)
                    ctx.log.warning("not sent to %s: %s", delivery.recipient, problem)
                    continue

                def send(to: str = delivery.recipient, through: Any = target) -> str:
                    return deliver(through, to, message)

                try:
                    result = ctx.once(key, send)
                except DeliveryFailed as exc:
                    final = exc.permanent
                    (failed if final else transient).append(f"{delivery.recipient}: {exc}")
                    outbox.record(log_key, run_id=ctx.run.id, channel=delivery.channel,
                                  recipient=delivery.recipient, state=FAILED, error=str(exc),
                                  attempts=ctx.step.attempt, event="step",
                                  job_id=ctx.run.job_id, final=final)
                    ctx.log.warning("not sent to %s: %s", delivery.recipient, exc)
                    continue
                done = outbox.delivered(log_key)
                if done is None or done.state != SENT:
                    outbox.record(log_key, run_id=ctx.run.id, channel=delivery.channel,
                                  recipient=delivery.recipient, state=SENT, error=None,
                                  attempts=ctx.step.attempt, event="step",
                                  job_id=ctx.run.job_id, final=False)
                    ctx.event("NOTIFICATION_SENT", f"step {step}: sent to "
                              f"{delivery.recipient} through {delivery.channel}",
                              {"recipient": delivery.recipient, "channel": delivery.channel})
                sent.append(delivery.recipient)
                ids.append(str(result))
        if transient:
            raise Retryable(f"step {step!r}: not sent yet to {'; '.join(transient)}")
        if not sent:
            raise Fatal(f"step {step!r}: the message reached nobody: {'; '.join(failed)}")
        ctx.log.info("sent %r to %d recipient(s) through %s", message.subject, len(sent), name)
        return StepResult(rows=len(sent), output={"recipients": sent, "message_ids": ids,
                                                  "failed": failed})


def _attachments(ctx: StepContext, paths: list[str]) -> list[Any]:
    from cadenza.notify.channels import Attachment
    from cadenza.steps.builtin.lib import files

    roots = ctx.settings.file_roots(ctx.home)
    out: list[Attachment] = []
    total = 0
    for path in paths:
        found = files.find(path, roots, of_settings(ctx.home, ctx.settings),
                           f"step {ctx.step.name!r}: attach")
        if not found:
            raise Fatal(f"step {ctx.step.name!r}: attach: no file {path!r} inside "
                        f"[files].roots")
        for item in found:
            with files.open_checked(item) as fh:
                content = fh.read(MAX_ATTACHMENT_BYTES + 1 - total)
            total += len(content)
            if total > MAX_ATTACHMENT_BYTES:
                raise Fatal(f"step {ctx.step.name!r}: attachments exceed "
                            f"{MAX_ATTACHMENT_BYTES // (1024 * 1024)} MiB")
            mime = mimetypes.guess_type(item.display)[0] or "application/octet-stream"
            out.append(Attachment(item.path.name, content, mime))
    return out
