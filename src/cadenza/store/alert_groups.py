"""Alert groups and their one-use links (docs/notifications.md "Repeated failures").

A group gathers the failures of one job with one error class, from the first alert to the
recovery: :meth:`AlertGroups.admit` opens one (the caller sends the alert) or counts a
failure into the open one (nothing is sent then); :meth:`AlertGroups.mark_told` records a
reminder; :meth:`AlertGroups.close` ends it. :meth:`AlertGroups.snooze` and
:meth:`AlertGroups.acknowledge` are a person's, each with an ALERT_CHANGED event naming them.

A link of an alert e-mail is a random token; only its SHA-256 is stored, with its action, its
group and its end. :meth:`AlertGroups.use_link` spends it once.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState
from cadenza.store.tables import alert_groups, alert_links, runs

LinkAction = Literal["snooze_1h", "snooze_morning", "ack"]
LINK_ACTIONS: tuple[LinkAction, ...] = ("snooze_1h", "snooze_morning", "ack")
LinkState = Literal["ok", "used", "expired", "unknown"]


@dataclass(frozen=True)
class AlertGroup:
    """One group (see the module doc); ``targets`` as the outbox keeps them (JSON)."""

    id: int
    job_id: str
    error_class: str
    event: str
    failures: int
    told: int
    first_run_id: str | None
    last_run_id: str | None
    targets: list[dict[str, Any]]
    opened_at: datetime
    last_failure_at: datetime
    last_told_at: datetime
    snoozed_until: datetime | None
    snoozed_by: str | None
    acked_at: datetime | None
    acked_by: str | None
    closed_at: datetime | None

    @classmethod
    def from_row(cls, row: Any) -> AlertGroup:
        m = row._mapping
        return cls(m["id"], m["job_id"], m["error_class"], m["event"], m["failures"],
                   m["told"], m["first_run_id"], m["last_run_id"],
                   json.loads(m["targets_json"]), m["opened_at"], m["last_failure_at"],
                   m["last_told_at"], m["snoozed_until"], m["snoozed_by"], m["acked_at"],
                   m["acked_by"], m["closed_at"])

    def snoozed(self, now: datetime) -> bool:
        """Whether it is muted at ``now``."""
        return self.snoozed_until is not None and self.snoozed_until > now

    def as_json(self, now: datetime) -> dict[str, Any]:
        return {"id": self.id, "job_id": self.job_id, "error_class": self.error_class,
                "event": self.event, "failures": self.failures, "told": self.told,
                "first_run_id": self.first_run_id, "last_run_id": self.last_run_id,
                "opened_at": self.opened_at.isoformat(),
                "last_failure_at": self.last_failure_at.isoformat(),
                "snoozed_until": self.snoozed_until.isoformat()
                if self.snoozed_until is not None and self.snoozed(now) else None,
                "snoozed_by": self.snoozed_by if self.snoozed(now) else None,
                "acked_at": self.acked_at.isoformat() if self.acked_at else None,
                "acked_by": self.acked_by,
                "closed_at": self.closed_at.isoformat() if self.closed_at else None}


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AlertGroups:
    """The alert groups of a store (``store``: a :class:`~cadenza.store.Store`)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def _get(self, c: sa.Connection, group_id: int) -> AlertGroup | None:
        row = c.execute(sa.select(alert_groups).where(alert_groups.c.id == group_id)).first()
        return AlertGroup.from_row(row) if row is not None else None

    def get(self, group_id: int) -> AlertGroup | None:
        """The group ``group_id``, or None."""
        with self.store.read() as c:
            return self._get(c, group_id)

    def admit(self, job_id: str, error_class: str, event: str, run_id: str,
              targets: list[dict[str, Any]], now: datetime) -> tuple[AlertGroup, bool]:
        """The failure of ``run_id``: (its group, True) when it opens one (alert now), else
        (the open group, False) with the failure counted. Asking again for a run already
        counted changes nothing (a retried delivery)."""
        key = f"{job_id}:{error_class}"[:300]
        with self.store.write() as c:
            inserted = c.execute(self.store._insert_ignore(alert_groups, ["open_key"]), {
                "open_key": key, "job_id": job_id, "error_class": error_class[:200],
                "event": event, "failures": 1, "told": 1, "first_run_id": run_id,
                "last_run_id": run_id, "targets_json": json.dumps(targets),
                "opened_at": now, "last_failure_at": now, "last_told_at": now}).rowcount
            query = sa.select(alert_groups).where(alert_groups.c.open_key == key)
            if self.store.dialect == "postgresql":
                query = query.with_for_update()
            group = AlertGroup.from_row(c.execute(query).one())
            if inserted or group.first_run_id == run_id:
                return group, True
            if group.last_run_id == run_id:
                return group, False
            c.execute(alert_groups.update().where(alert_groups.c.id == group.id).values(
                failures=alert_groups.c.failures + 1, last_run_id=run_id,
                last_failure_at=now))
            return self._get(c, group.id) or group, False

    def any_open(self) -> bool:
        """Whether a group is open: one SELECT outside any transaction, so that an idle
        sender's round writes nothing (not even an empty read transaction's COMMIT)."""
        return bool(self.store._quick_rows(
            "SELECT 1 FROM alert_groups WHERE closed_at IS NULL LIMIT 1", ()))

    def open_groups(self) -> list[AlertGroup]:
        """Every open group, oldest first."""
        with self.store.read() as c:
            rows = c.execute(sa.select(alert_groups).where(alert_groups.c.closed_at.is_(None))
                             .order_by(alert_groups.c.id)).all()
        return [AlertGroup.from_row(r) for r in rows]

    def recent(self, limit: int = 50) -> list[AlertGroup]:
        """Open groups, then the latest closed ones, at most ``limit``."""
        with self.store.read() as c:
            rows = c.execute(sa.select(alert_groups).order_by(
                alert_groups.c.closed_at.is_not(None), alert_groups.c.id.desc()
            ).limit(limit)).all()
        return [AlertGroup.from_row(r) for r in rows]

    def recovered(self, group: AlertGroup) -> str | None:
        """The id of a run of the group's job that SUCCEEDED after its last failure."""
        with self.store.read() as c:
            row = c.execute(sa.select(runs.c.id).where(
                runs.c.job_id == group.job_id, runs.c.state == RunState.SUCCEEDED.value,
                runs.c.finished_at > group.last_failure_at).limit(1)).first()
        return row[0] if row is not None else None

    def mark_told(self, group_id: int, failures: int, now: datetime) -> bool:
        """A message covered ``failures`` failures at ``now``; False when another node did."""
        with self.store.write() as c:
            return bool(c.execute(alert_groups.update().where(
                alert_groups.c.id == group_id, alert_groups.c.told < failures,
                alert_groups.c.closed_at.is_(None)).values(
                told=failures, last_told_at=now)).rowcount)

    def close(self, group_id: int, now: datetime) -> bool:
        """End the group (its job recovered); False when it was closed already."""
        with self.store.write() as c:
            return bool(c.execute(alert_groups.update().where(
                alert_groups.c.id == group_id, alert_groups.c.closed_at.is_(None)).values(
                closed_at=now, open_key=None)).rowcount)

    def snooze(self, group_id: int, until: datetime, by: str, now: datetime) -> AlertGroup:
        """Mute the group until ``until`` (its failures are still counted)."""
        return self._change(group_id, by, now, {"snoozed_until": until, "snoozed_by": by},
                            f"snoozed until {until.isoformat()}")

    def acknowledge(self, group_id: int, by: str, now: datetime) -> AlertGroup:
        """Someone is on it: no more reminders; the recovery is still said."""
        return self._change(group_id, by, now, {"acked_at": now, "acked_by": by},
                            "acknowledged")

    def _change(self, group_id: int, by: str, now: datetime, values: dict[str, Any],
                what: str) -> AlertGroup:
        with self.store.write() as c:
            group = self._get(c, group_id)
            if group is None:
                raise LookupError(f"no alert group {group_id}")
            if group.closed_at is not None:
                raise ValueError(f"alert group {group_id} is closed: {group.job_id} "
                                   f"recovered at {group.closed_at.isoformat()}")
            c.execute(alert_groups.update().where(alert_groups.c.id == group_id)
                      .values(**values))
            self.store.append_event(
                EventType.ALERT_CHANGED, f"alert of {group.job_id} ({group.error_class}, "
                f"{group.failures} failure(s)) {what} by {by}", level=Level.INFO,
                payload={"group": group_id, "job_id": group.job_id, "action": what},
                actor=by, conn=c)
            changed = self._get(c, group_id)
        assert changed is not None
        return changed

    def make_links(self, group_id: int, expires_at: datetime) -> dict[LinkAction, str]:
        """A fresh token per action for the group, valid until ``expires_at``."""
        tokens = {action: secrets.token_urlsafe(32) for action in LINK_ACTIONS}
        with self.store.write() as c:
            c.execute(alert_links.insert(), [
                {"token_hash": _hash(token), "group_id": group_id, "action": action,
                 "expires_at": expires_at} for action, token in tokens.items()])
        return tokens

    def peek_link(self, token: str, now: datetime
                  ) -> tuple[LinkState, AlertGroup | None, LinkAction | None]:
        """What a link is, without spending it."""
        with self.store.read() as c:
            row = c.execute(sa.select(alert_links).where(
                alert_links.c.token_hash == _hash(token))).first()
            if row is None:
                return "unknown", None, None
            m = row._mapping
            group = self._get(c, m["group_id"])
        state: LinkState = "used" if m["used_at"] is not None else \
            "expired" if m["expires_at"] <= now else "ok"
        return state, group, m["action"]

    def use_link(self, token: str, now: datetime) -> bool:
        """Spend the link once; False when it is unknown, used or expired."""
        with self.store.write() as c:
            return bool(c.execute(alert_links.update().where(
                alert_links.c.token_hash == _hash(token), alert_links.c.used_at.is_(None),
                alert_links.c.expires_at > now).values(used_at=now)).rowcount)
