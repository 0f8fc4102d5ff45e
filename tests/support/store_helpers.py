"""What tests do to a store that no part of Cadenza does: write a log line by hand, count
failed logins, force a resource transition that must succeed. Built on the store's public
API and its tables; the store itself offers only what Cadenza uses."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cadenza.domain.events import Level
from cadenza.domain.states import ResourceState
from cadenza.domain.texts import cut_redacted
from cadenza.store import Store, later
from cadenza.store.resources import RESOURCE_MACHINE
from cadenza.store.tables import login_failures, run_logs


def append_log(store: Store, run_id: str, level: Level | str, message: str, *,
               step: str | None = None, conn: sa.Connection | None = None) -> int:
    """Append one line to the run's log (``ts`` = the store's now), redacted as the
    executor's lines are; returns its id. With ``conn``, in the caller's transaction."""

    def insert(c: sa.Connection) -> int:
        if store.dialect == "postgresql":  # after the rows kept for the commit, in order
            later.send(c.connection.driver_connection)
        key = c.execute(run_logs.insert().values(
            run_id=run_id, ts=store.clock.now(), level=Level(level).value, step=step,
            message=cut_redacted(store.redactor.redact_text(message)))).inserted_primary_key
        return int(key[0]) if key is not None else 0

    if conn is not None:
        return insert(conn)
    with store.write() as c:
        return insert(c)


def login_failures_since(store: Store, username: str, address: str,
                         since: datetime) -> tuple[int, int]:
    """Failed logins since ``since``: (for that user, from that address)."""
    col = login_failures.c
    with store.read() as c:
        by_user = c.execute(sa.select(sa.func.count()).select_from(login_failures).where(
            col.username == username[:64], col.failed_at >= since)).scalar_one()
        by_address = c.execute(sa.select(sa.func.count()).select_from(login_failures).where(
            col.address == address[:64], col.failed_at >= since)).scalar_one()
    return int(by_user), int(by_address)


def transition_resource_or_raise(store: Store, resource_id: str, to: ResourceState, *,
                                 actor: str = "system", reason: str | None = None,
                                 fields: Mapping[str, Any] | None = None,
                                 epoch: int | None = None,
                                 conn: sa.Connection | None = None) -> None:
    """``store.transition_resource``, raising what a refused transition means
    (InvalidTransition, StaleEpoch, StoreError for no such resource)."""
    if store.transition_resource(resource_id, to, actor=actor, reason=reason, fields=fields,
                                 epoch=epoch, conn=conn):
        return
    before = store.get_resource(resource_id, conn=conn)
    RESOURCE_MACHINE.refuse(resource_id, ResourceState(to), epoch,
                            None if before is None else ResourceState(before.state))
