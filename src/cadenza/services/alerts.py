"""Alert groups as a person acts on them (docs/notifications.md "Repeated failures"): list
them, acknowledge one, snooze one for an hour or until the morning, from the page, the API or
a one-use link of an alert e-mail (no login: the link is the permission, spent once)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from cadenza.services.errors import InvalidRequest, NotFound, Refused
from cadenza.store.alert_groups import AlertGroup, AlertGroups, LinkAction, LinkState

if TYPE_CHECKING:
    from cadenza.services.context import Services

Snooze = Literal["1h", "morning"]


@dataclass(frozen=True)
class LinkView:
    """What a one-use link is: ``state`` ok / used / expired / unknown, its group and
    action."""

    state: LinkState
    group: AlertGroup | None
    action: LinkAction | None


class AlertService:
    """The alert groups of a home's store."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def _groups(self) -> AlertGroups:
        return AlertGroups(self.services.store())

    def list(self, limit: int = 50) -> list[AlertGroup]:
        """Open groups first, then the latest closed ones."""
        return self._groups().recent(limit)

    def snooze_until(self, group: AlertGroup, how: Snooze) -> datetime:
        """When a snooze ``how`` ends: in an hour, or at ``[alerts] morning`` in the job's
        zone (today's when it is still ahead)."""
        from cadenza.notify.groups import job_zone, morning_after

        now = self.services.clock.now()
        if how == "1h":
            return now + timedelta(hours=1)
        config = self.services.config()
        return morning_after(now, job_zone(config, group.job_id),
                             config.settings.alerts.morning)

    def _group(self, group_id: int) -> AlertGroup:
        group = self._groups().get(group_id)
        if group is None:
            raise NotFound(f"no alert group {group_id}")
        return group

    def snooze(self, group_id: int, how: Snooze, by: str | None = None) -> AlertGroup:
        """Mute the group's reminders for an hour or until the morning."""
        if how not in ("1h", "morning"):
            raise InvalidRequest(f"expected a snooze of 1h or morning, got {how!r}")
        group = self._group(group_id)
        try:
            return self._groups().snooze(group_id, self.snooze_until(group, how),
                                         by or self.services.actor.id,
                                         self.services.clock.now())
        except ValueError as exc:
            raise Refused(str(exc)) from None

    def acknowledge(self, group_id: int, by: str | None = None) -> AlertGroup:
        """No more reminders for the group; its recovery is still said."""
        self._group(group_id)
        try:
            return self._groups().acknowledge(group_id, by or self.services.actor.id,
                                              self.services.clock.now())
        except ValueError as exc:
            raise Refused(str(exc)) from None

    def link(self, token: str) -> LinkView:
        """What the link ``token`` is, without spending it (the page a click opens: a mail
        scanner that follows links spends nothing)."""
        return LinkView(*self._groups().peek_link(token, self.services.clock.now()))

    def use_link(self, token: str) -> AlertGroup:
        """Do what the link says, once."""
        view = self.link(token)
        if view.state != "ok" or view.group is None or view.action is None:
            raise Refused({"used": "this link was used already",
                           "expired": "this link has expired",
                           }.get(view.state, "this link is not known"))
        if not self._groups().use_link(token, self.services.clock.now()):
            raise Refused("this link was used already")
        by = "link:" + view.action
        if view.action == "ack":
            return self.acknowledge(view.group.id, by)
        return self.snooze(view.group.id, "1h" if view.action == "snooze_1h" else "morning",
                           by)
