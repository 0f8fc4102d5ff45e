"""Repeated failures as one alert (docs/notifications.md "Repeated failures").

The sender asks :meth:`Grouper.admit` before it delivers a ``failed`` or ``needs_review``
intent: the first failure of a job with an error class (the failing step's, or the run's
state when no step failed) opens a group and is sent, with one-use links to snooze the group
1 h or until tomorrow morning, or to acknowledge it; a later failure of the same job and
class is counted into the group and not sent. Each sender round, :meth:`Grouper.check`:

* closes a group whose job SUCCEEDED after its last failure, with a ``resolved`` message to
  the first alert's recipients (how many failures, since when);
* sends a ``reminder`` of an open group with failures not yet told, when ``reminder_after``
  has passed since the last message, unless it is snoozed (its failures are told when the
  snooze ends) or acknowledged (someone is on it).

Every alert about a run also carries the run's last log lines (``[alerts] log_lines``).
"""

from __future__ import annotations

import logging
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cadenza.config.loader import LoadedConfig
from cadenza.domain.states import StepState
from cadenza.store import Store
from cadenza.store.alert_groups import AlertGroup, AlertGroups
from cadenza.store.outbox import Claimed, Intent, Outbox, Target

log = logging.getLogger(__name__)

GROUPED = ("failed", "needs_review")
"""The events grouped by job and error class."""


def morning_after(now: datetime, zone: ZoneInfo, at: str) -> datetime:
    """The next ``at`` (``"09:00"``) in ``zone`` after ``now``: "until tomorrow 09:00" (today's
    when it is still ahead, as at 02:00)."""
    wanted = time.fromisoformat(at)
    local = now.astimezone(zone)
    day = local.date() if local.time().replace(tzinfo=None) < wanted \
        else local.date() + timedelta(days=1)
    return datetime.combine(day, wanted, tzinfo=zone)


def job_zone(config: LoadedConfig, job_id: str | None) -> ZoneInfo:
    """The job's zone, else the server's."""
    from cadenza.scheduler.schedules import server_zone

    job = config.jobs.get(job_id or "")
    return ZoneInfo(job.timezone) if job is not None and job.timezone else server_zone()


class Grouper:
    """The groups of one store, as one sender uses them."""

    def __init__(self, store: Store, outbox: Outbox) -> None:
        self.store = store
        self.groups = AlertGroups(store)
        self.outbox = outbox

    def error_class(self, run_id: str, event: str) -> str:
        """The failing step's error class (its name when it has none), else the event."""
        steps = self.store.list_step_runs(run_id)
        failed = next((s for s in reversed(steps) if s.state is StepState.FAILED), None)
        if failed is None:
            return event
        return failed.error_class or f"step {failed.step} failed"

    def last_lines(self, run_id: str, count: int) -> list[str]:
        """The run's last ``count`` log lines (its events included), oldest first."""
        if count <= 0:
            return []
        entries = self.store.run_log(run_id)[-count:]
        return [f"{e.ts:%H:%M:%S} {e.level} {e.step + ': ' if e.step else ''}{e.message}"
                for e in entries]

    def admit(self, item: Claimed, config: LoadedConfig, now: datetime) -> dict[str, Any] | None:
        """None when the failure is counted into an open group (send nothing), else what the
        message adds: the group and its links."""
        intent = item.intent
        assert intent.run_id is not None and intent.job_id is not None
        targets = [t.as_json() for t in intent.targets]
        group, first = self.groups.admit(intent.job_id, self.error_class(
            intent.run_id, intent.event), intent.event, intent.run_id, targets, now)
        if not first:
            log.info("failure of %s (run %s, %s) counted into alert group %d (%d so far): "
                     "no message now", intent.job_id, intent.run_id, group.error_class,
                     group.id, group.failures)
            return None
        return {"group": group.id, "error_class": group.error_class,
                **self.links(group, config, now)}

    def links(self, group: AlertGroup, config: LoadedConfig, now: datetime) -> dict[str, Any]:
        """The group's one-use links as URLs (none without ``[server].base_url``)."""
        base = config.settings.server.base_url
        if not base:
            return {}
        alerts = config.settings.alerts
        tokens = self.groups.make_links(group.id, now + alerts.link_valid)
        root = base.rstrip("/")
        return {**{action: f"{root}/alerts/link/{token}" for action, token in tokens.items()},
                "morning": alerts.morning}

    def check(self, config: LoadedConfig, now: datetime) -> int:
        """Close recovered groups and queue due reminders; returns the intents queued."""
        if not self.groups.any_open():
            return 0
        open_groups = self.groups.open_groups()
        intents: list[Intent] = []
        every = config.settings.alerts.reminder_after
        for group in open_groups:
            targets = tuple(Target.from_json(t) for t in group.targets)
            success = self.groups.recovered(group)
            if success is not None:
                if self.groups.close(group.id, now):
                    intents.append(Intent(
                        f"resolved:{group.id}", "resolved", success, group.job_id, targets,
                        self._facts(group, config)))
                continue
            if group.failures <= group.told or group.acked_at is not None \
                    or group.snoozed(now) or group.last_told_at + every > now:
                continue
            if self.groups.mark_told(group.id, group.failures, now):
                intents.append(Intent(
                    f"reminder:{group.id}:{group.failures}", "reminder", group.last_run_id,
                    group.job_id, targets, {**self._facts(group, config),
                                            "new_failures": group.failures - group.told,
                                            **self.links(group, config, now)}))
        if not intents:
            return 0
        with self.store.write() as c:
            return self.outbox.add(c, intents, now)

    def _facts(self, group: AlertGroup, config: LoadedConfig) -> dict[str, Any]:
        zone = job_zone(config, group.job_id)
        return {"group": group.id, "error_class": group.error_class,
                "failures": group.failures,
                "since": f"{group.opened_at.astimezone(zone):%Y-%m-%d %H:%M} {zone.key}"}

