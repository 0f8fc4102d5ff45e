"""The sender: one more service of a node, delivering the outbox (docs/notifications.md).

Each round (every :data:`POLL_SECONDS` of the node's clock, or at once when a hook wrote an
intent in this process) the sender

1. queues the long-run warnings and the stalled-schedule alerts that are due
   (:meth:`~cadenza.notify.rules.Notifier.check_long_runs`, ``check_stalled``);
2. claims due intents (:meth:`~cadenza.store.outbox.Outbox.claim`: ``FOR UPDATE SKIP
   LOCKED`` on PostgreSQL, so two nodes never take one intent);
3. for each, resolves the recipients (roles and users read now), renders the message once
   per language and zone of its recipients, and delivers it to each recipient not yet
   delivered: the dedup key is ``event:run:recipient`` in ``notification_log``, so a retry,
   a restart after ``kill -9`` or a second rule naming the same person never sends twice;
4. records each outcome (SENT, or FAILED with the error and the attempts) and a
   NOTIFICATION_SENT event; an intent with a delivery that may succeed later is tried again
   after a backoff (:func:`backoff`: 10 s, 20 s, 40 s ... at most 10 min, :data:`MAX_ATTEMPTS`
   tries), the others are done.

A round whose looks would find what the last one found is skipped: on a SQLite store, while
nothing was committed since a round that left nothing to do (no intent PENDING, no alert
group open) and no rule watches the clock (:meth:`~cadenza.notify.rules.Notifier.
watches_time`), a round reads only the store's ``data_version`` (:mod:`cadenza.store.
data_version`), and the sender sleeps up to :data:`QUIET_SECONDS` instead of
:data:`POLL_SECONDS`: the node's dispatcher, whose idle poll reads ``data_version`` once a
second anyway, wakes it when anything was committed (:meth:`Sender.nudge`), and a hook of
this process wakes it when it writes an intent. An idle node's sender then neither queries
the store nor wakes every two seconds.

A delivery that cannot succeed (unknown channel, a role with no users, an invalid address,
a refused webhook target, a permanent SMTP refusal) is FAILED at once with its reason and
not retried. Nothing here raises out of the loop: a failed round is logged and the next one
runs.

Exactly-once, precisely: an intent is written with its cause (so it is never lost) and a
delivery is recorded right after the channel accepted it; a crash in the instant between the
two sends that one message again after restart (at least once, never lost).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from cadenza.config.loader import LoadedConfig
from cadenza.config.schema_settings import DesktopChannel, EmailChannel, WebhookChannel
from cadenza.lifecycle import Lifecycle
from cadenza.notify.channels import DeliveryFailed, Message, post_webhook, send_email
from cadenza.notify.groups import GROUPED, Grouper
from cadenza.notify.messages import Facts, Renderer
from cadenza.notify.recipients import Delivery, resolve
from cadenza.notify.rules import Notifier
from cadenza.store import Store
from cadenza.store.outbox import FAILED, SENT, Claimed, Intent, Outbox, Target

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0
QUIET_SECONDS = 30.0
"""How long the sender sleeps after a round that left nothing to do on a SQLite store (see
the module doc), unless woken: by a hook of this process, or by the node's dispatcher when
its idle poll finds something committed (:meth:`Sender.nudge`)."""
STALL_CHECK_SECONDS = 60.0
"""How often the sender looks for schedules that did not fire."""
MAX_ATTEMPTS = 10
CLAIM_FOR = timedelta(minutes=5)
"""How long a sender holds an intent it is delivering (a dead sender's intents are taken by
another after this)."""
BATCH = 20


def backoff(attempt: int) -> timedelta:
    """The wait after the ``attempt``-th failed try (1-based): 10 s doubling, at most 10 min."""
    return timedelta(seconds=min(600.0, 10.0 * 2 ** max(0, attempt - 1)))


AnyChannel = EmailChannel | WebhookChannel | DesktopChannel
Deliver = Callable[[AnyChannel, str, Message], str]


def deliver(channel: AnyChannel, recipient: str, message: Message, *,
            home: Path | None = None) -> str:
    """Send through the channel; returns what identifies the delivery (Message-ID, the HTTP
    status, the desktop notification's id). ``home``: where a desktop notification's click
    finds the desktop window. Raises :class:`DeliveryFailed`."""
    if isinstance(channel, EmailChannel):
        return send_email(channel, recipient, message)
    if isinstance(channel, DesktopChannel):
        from cadenza.notify.desktop import DesktopNotices

        return f"desktop {DesktopNotices.shared().show(channel, message, home)}"
    return f"HTTP {post_webhook(channel, message)}"


class Sender:
    """The notification sender service (``name = "notify"``)."""

    name = "notify"

    def __init__(self, store: Store, config: Callable[[], LoadedConfig], life: Lifecycle, *,
                 owner: str, deliver_with: Deliver = deliver) -> None:
        self.store = store
        self.config = config
        self.life = life
        self.owner = owner
        from cadenza.assembly import assemble

        self.notifier: Notifier = assemble(store).notifier
        self.outbox = Outbox(store)
        self.grouper = Grouper(store, self.outbox)
        self.renderer = Renderer(config().home, store.redactor)
        self.deliver = deliver_with if deliver_with is not deliver else functools.partial(
            deliver, home=config().home)
        self._wake = life.wake_on_stop(threading.Event())
        self._changes = store.data_version()
        self._quiet_at: int | None = None
        """The store's data version at the start of the last round that left nothing to do
        (None: the next round makes its looks)."""
        self._hinted = False
        """A hook wrote an intent since the last round began (:meth:`_hint`)."""
        self.install()
        self.started_at: datetime = store.clock.now()
        self._stall_checked: float | None = None

    def install(self) -> None:
        """The store's notifier (its assembly's: the run end and missed hooks) follows this
        sender's configuration, which follows reloads, and wakes this sender's loop."""
        self.notifier.config = self.config
        self.notifier.wake = self._hint

    def start(self, stack: ExitStack) -> None:
        """Take back what a killed sender of this host held, then start the delivery loop
        on its own thread."""
        self.started_at = self.store.clock.now()
        host = self.owner.split(":", 1)[0]
        try:
            freed = self.outbox.release_dead_claims(host, psutil.pid_exists)
        except Exception:  # the store may be down at start: the claims then simply expire
            log.exception("could not release the notification claims of stopped senders")
        else:
            if freed:
                log.warning("took back %d notification(s) a stopped process was sending", freed)
        self.life.spawn(stack, self._loop, "cadenza-notify")

    def _loop(self) -> None:
        try:
            while not self.life.stopping.is_set():
                try:
                    self.round()
                except Exception:  # a round's failure (store down) must not end the service
                    self._quiet_at = None
                    log.exception("notification round failed; trying again")
                quiet = self._quiet_at is not None
                self.life.clock.wait(self._wake, QUIET_SECONDS if quiet else POLL_SECONDS)
                self._wake.clear()
        finally:
            self._changes.close()

    def nudge(self) -> None:
        """Something was committed to the store (the dispatcher's idle poll saw it): make a
        round now (one that only reads ``data_version`` when the commit was seen already)."""
        self._wake.set()

    def _hint(self) -> None:
        """A hook of this process wrote an intent, in a transaction that may not have
        committed yet: make a round now, and do not trust the store's silence until a
        round made after it found nothing (the commit may follow the round's look)."""
        self._hinted = True
        self._wake.set()

    def round(self) -> int:
        """One round (see the module docstring); returns the deliveries attempted."""
        hinted, self._hinted = self._hinted, False
        version = self._changes.token()  # before the looks: a later commit is seen next time
        if not hinted and version is not None and version == self._quiet_at:
            return 0  # nothing committed since a round that left nothing to do
        attempted = self._looks()
        quiet = version is not None and not hinted and self._quiet(attempted)
        self._quiet_at = version if quiet else None
        return attempted

    def _quiet(self, attempted: int) -> bool:
        """Whether the round just made left nothing to do that time alone could bring: no
        delivery attempted, no rule watching the clock, no alert group open (its reminder),
        no intent PENDING (a retry's time, a claim to expire)."""
        return (not attempted and not self.notifier.watches_time()
                and not self.grouper.groups.any_open() and not self.outbox.any_pending())

    def _looks(self) -> int:
        now = self.store.clock.now()
        self.notifier.check_long_runs(now)
        self.notifier.check_late(now)
        self.grouper.check(self.config(), now)
        tick = self.life.clock.monotonic()
        if self._stall_checked is None or tick - self._stall_checked >= STALL_CHECK_SECONDS:
            self._stall_checked = tick
            self.notifier.check_stalled(now, self.started_at)
        attempted = 0
        while not self.life.stopping.is_set():
            claimed = self.outbox.claim(self.owner, BATCH, CLAIM_FOR)
            if not claimed:
                break
            for item in claimed:
                attempted += self._send(item)
        return attempted

    def _send(self, item: Claimed) -> int:
        config = self.config()
        intent = item.intent
        if intent.run_id is not None and intent.event not in ("step", "test"):
            alerts = config.settings.alerts
            if intent.event in GROUPED and alerts.group_failures and intent.job_id:
                extras = self.grouper.admit(item, config, self.store.clock.now())
                if extras is None:  # counted into an open group: told by its reminder
                    self.outbox.settle(item, self.owner, done=True, error=None,
                                       retry_at=None, settled=[])
                    return 0
                intent.context.update(extras)
            if "last_lines" not in intent.context:
                intent.context["last_lines"] = self.grouper.last_lines(intent.run_id,
                                                                       alerts.log_lines)
        attempt = item.attempts + 1
        retry: list[str] = []
        broken: dict[str, str] = {}  # channel → why a delivery through it failed for good
        settled = set(intent.context.get("settled", ()))
        tried = 0
        messages: dict[tuple[str | None, str | None], Message | str] = {}
        for delivery in self._deliveries(item, config):
            variant = (delivery.language, delivery.timezone)  # one rendering per variant
            if variant not in messages:
                try:
                    messages[variant] = self._message(item, config, *variant)
                except Exception as exc:  # a broken template or unreadable run: retried,
                    # then FAILED
                    messages[variant] = f"message not built: {type(exc).__name__}: {exc}"
            built = messages[variant]
            message = built if isinstance(built, Message) else None
            render_error = built if isinstance(built, str) else None
            key = f"{intent.event}:{intent.run_id or intent.job_id}:{delivery.recipient}"
            if intent.event in ("test", "stalled", "late", "reminder", "resolved",
                                "channel_failed"):
                # more than one per run
                key = f"{intent.key}:{delivery.recipient}"
            if key in settled:
                continue  # failed for good in an earlier attempt of this intent
            done = self.outbox.delivered(key)
            if done is not None and done.state == SENT:
                continue  # delivered before (a retry, a restart, another rule)
            problem = delivery.problem or render_error
            permanent = delivery.problem is not None
            if problem is None and message is not None:
                channel = config.settings.channels.get(delivery.channel)
                tried += 1
                try:
                    if channel is None:
                        raise DeliveryFailed(
                            f"unknown channel {delivery.channel!r} (channels: "
                            f"{', '.join(config.settings.channels) or 'none'})", permanent=True)
                    target = delivery.recipient
                    if target.startswith("channel:"):
                        if isinstance(channel, EmailChannel):
                            raise DeliveryFailed(
                                f"{target} is an e-mail channel: name addresses, users or "
                                f"roles to send through it", permanent=True)
                    self.deliver(channel, target, message)
                except DeliveryFailed as exc:
                    problem, permanent = str(exc), exc.permanent
                except Exception as exc:  # a surprise of a library (an address smtplib
                    # cannot encode ...): a failed try with its reason, retried with the
                    # backoff and then FAILED, never an intent claimed again forever
                    problem, permanent = f"{type(exc).__name__}: {exc}", False
            final = problem is None or permanent or attempt >= MAX_ATTEMPTS
            self.outbox.record(key, run_id=intent.run_id, channel=delivery.channel,
                               recipient=delivery.recipient,
                               state=SENT if problem is None else FAILED, error=problem,
                               attempts=attempt, event=intent.event, job_id=intent.job_id,
                               final=final)
            if problem is not None and final:
                settled.add(key)
                if intent.event != "channel_failed" and delivery.problem is None:
                    broken[delivery.channel] = problem
            if problem is not None:
                log.warning("notification %s to %s through %s failed (attempt %d%s): %s",
                            intent.event, delivery.recipient, delivery.channel, attempt,
                            "" if final else ", will retry", problem)
                if not final:
                    retry.append(problem)
        if broken:
            self._report_broken(intent, broken, config)
        retry_at = (self.store.clock.now() + backoff(attempt)) if retry else None
        self.outbox.settle(item, self.owner, done=not retry, error="; ".join(retry) or None,
                           retry_at=retry_at, settled=sorted(settled))
        return tried

    def _report_broken(self, intent: Intent, broken: dict[str, str],
                       config: LoadedConfig) -> None:
        """Tell the same people through every other channel that ``broken`` channels failed
        (once an hour per channel: the key holds the hour)."""
        now = self.store.clock.now()
        people = tuple(dict.fromkeys(to for t in intent.targets for to in t.to))
        intents = []
        for name, problem in broken.items():
            others = [other for other in config.settings.channels if other != name]
            if not others:
                log.error("channel %s is failing (%s) and no other channel can say so",
                          name, problem)
                continue
            intents.append(Intent(
                f"channel_failed:{name}:{now:%Y-%m-%dT%H}", "channel_failed", None,
                intent.job_id, tuple(Target("channel_failed", other, people or
                                            (f"channel:{other}",)) for other in others),
                {"channel": name, "error": problem, "about": intent.event}))
        if intents:
            with self.store.write() as c:
                self.outbox.add(c, intents, now)

    def _deliveries(self, item: Claimed, config: LoadedConfig) -> list[Delivery]:
        default = config.settings.default_channel()
        out: list[Delivery] = []
        for target in item.intent.targets:
            name = target.channel or default
            channel = config.settings.channels.get(name or "")
            if channel is None:
                problem = (f"unknown channel {name!r}" if name else
                           "no channel: cadenza.toml defines no [channels.NAME]")
                out += [Delivery(name or "-", to, problem) for to in target.to]
                continue
            out += resolve(target.to, name or "", channel.type, self.store)
        seen: set[tuple[str, str]] = set()
        unique = []
        for d in out:
            if (d.channel, d.recipient) not in seen:
                seen.add((d.channel, d.recipient))
                unique.append(d)
        return unique

    def _message(self, item: Claimed, config: LoadedConfig, lang: str | None = None,
                 zone: str | None = None) -> Message:
        intent = item.intent
        run = self.store.get_run(intent.run_id) if intent.run_id else None
        steps = tuple(self.store.list_step_runs(intent.run_id)) if intent.run_id else ()
        scheduled = intent.context.get("scheduled_for")
        when = datetime.fromisoformat(scheduled) if isinstance(scheduled, str) else None
        if intent.event == "step":
            return Message(str(intent.context.get("subject", "")),
                           str(intent.context.get("body", "")))
        return self.renderer.render(Facts(intent.event, intent.job_id, run, steps, when,
                                          dict(intent.context)), config, lang=lang, zone=zone)
