"""Notifications: send a test message through a channel, list the deliveries (see
docs/notifications.md).

Operations::

    test(channel, to) -> TestResult          NotFound for an unknown channel,
                                             InvalidRequest for an e-mail channel without --to
    list(run, state, limit) -> [DeliveryView] newest first; needs only cadenza.toml

A test message is sent at once (not through the outbox: the person who asked waits for the
answer) and recorded like any delivery: ``notification_log`` and a NOTIFICATION_SENT event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadenza.domain.addresses import InvalidAddress, check_email
from cadenza.services.errors import InvalidRequest, NotFound

if TYPE_CHECKING:
    from cadenza.services.context import Services

STATES = ("SENT", "FAILED")


@dataclass(frozen=True)
class TestDelivery:
    """One delivery of a test message: SENT, or FAILED with the reason."""

    channel: str
    recipient: str
    state: str
    error: str | None

    def as_json(self) -> dict[str, Any]:
        return {"channel": self.channel, "recipient": self.recipient, "state": self.state,
                "error": self.error}


@dataclass(frozen=True)
class DeliveryView:
    """One row of the delivery log as the shells show it."""

    id: int
    run_id: str | None
    event: str
    channel: str
    recipient: str
    state: str
    attempts: int
    error: str | None
    updated_at: datetime

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "run_id": self.run_id, "event": self.event,
                "channel": self.channel, "recipient": self.recipient, "state": self.state,
                "attempts": self.attempts, "error": self.error, "updated_at": self.updated_at}


class NotificationService:
    def __init__(self, services: Services) -> None:
        self.services = services

    def test(self, channel: str, to: Sequence[str] = ()) -> list[TestDelivery]:
        """Send the test message through ``channel`` to ``to`` (addresses, ``user:X``,
        ``role:X``; a webhook needs none) and record each delivery."""
        from cadenza.notify.channels import DeliveryFailed
        from cadenza.notify.messages import Facts, Renderer
        from cadenza.notify.recipients import resolve
        from cadenza.notify.sender import deliver
        from cadenza.store.codec import new_run_id
        from cadenza.store.outbox import FAILED, SENT, Outbox

        config = self.services.config()
        found = config.settings.channels.get(channel)
        if found is None:
            raise NotFound(f"no channel {channel!r} in cadenza.toml (channels: "
                           f"{', '.join(config.settings.channels) or 'none'})")
        if found.type == "email" and not to:
            raise InvalidRequest(f"channel {channel!r} sends e-mail: name a recipient with "
                                 f"--to ADDRESS (or user:NAME, role:NAME)")
        for item in to:
            kind, colon, _ = item.partition(":")
            if colon and kind in ("user", "role", "channel"):
                continue
            try:
                check_email(item)
            except InvalidAddress as exc:
                raise InvalidRequest(f"--to {item!r} is not an e-mail address: {exc}") \
                    from None
        store = self.services.store()
        message = Renderer(config.home, store.redactor).render(
            Facts("test", None, extra={"channel": channel}), config)
        tag = new_run_id(self.services.clock.now())
        outbox = Outbox(store)
        results: list[TestDelivery] = []
        for delivery in resolve(list(to), channel, found.type, store):
            error = delivery.problem
            target = config.settings.channels.get(delivery.channel)
            if error is None:
                try:
                    if target is None:
                        raise DeliveryFailed(f"unknown channel {delivery.channel!r}",
                                             permanent=True)
                    deliver(target, delivery.recipient, message)
                except DeliveryFailed as exc:
                    error = str(exc)
            state = SENT if error is None else FAILED
            outbox.record(f"test:{tag}:{delivery.recipient}", run_id=None,
                          channel=delivery.channel, recipient=delivery.recipient,
                          state=state, error=error, attempts=1, event="test", job_id=None,
                          final=True)
            results.append(TestDelivery(delivery.channel, delivery.recipient, state,
                                        None if error is None else
                                        store.redactor.redact_text(error)))
        return results

    def list(self, *, run: str | None = None, state: str | None = None,
             limit: int = 100) -> list[DeliveryView]:
        """Deliveries, newest first (``state``: SENT or FAILED)."""
        from cadenza.store.outbox import Outbox

        if state is not None and state.upper() not in STATES:
            raise InvalidRequest(f"unknown state {state!r}: expected SENT or FAILED")
        self.services.settings()
        rows = Outbox(self.services.store()).log(run_id=run, state=state, limit=limit)
        return [DeliveryView(r.id, r.run_id, r.event_key.split(":", 1)[0], r.channel,
                             r.recipient, r.state, r.attempts, r.error, r.updated_at)
                for r in rows]
