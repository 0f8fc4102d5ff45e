"""What tests do to a store that no part of Cadenza does: write a log line by hand, count
failed logins, force a resource transition that must succeed, start and end a run in one
call each (through the claim and a boundary, as a worker does). Built on the store's public
API and its tables; the store itself offers only what Cadenza uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from cadenza.domain.events import Level
from cadenza.domain.states import ResourceState, RunState
from cadenza.domain.texts import cut_redacted
from cadenza.store import Store, later
from cadenza.store.boundary import Boundary, RunEnd
from cadenza.store.records import RunRecord
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


def start_run(store: Store, run_id: str, *, owner: str = "test-worker",
              lease_until: datetime | None = None,
              conn: sa.Connection | None = None) -> RunRecord:
    """Take ``run_id`` as a worker does: the claim (QUEUED -> RUNNING, lease epoch + 1,
    the claim hook), for ``owner`` until ``lease_until`` (default: in 5 minutes). Fails
    the test when the run could not be taken (not QUEUED, or not due yet)."""
    until = lease_until or store.clock.now() + timedelta(minutes=5)
    taken = store.claim_runs(owner, until, run_ids=[run_id], conn=conn)
    assert taken, f"run {run_id} could not be claimed"
    return taken[0]


def end_run(store: Store, run_id: str, to: RunState, *, reason: str | None = None,
            rows: int | None = None, error: str | None = None,
            not_before: datetime | None = None, wait_reason: str | None = None,
            attempt: int | None = None, epoch: int | None = None, actor: str = "system",
            conn: sa.Connection | None = None) -> bool:
    """End a RUNNING run as its worker does: one boundary with a run end (SUCCEEDED,
    FAILED, CANCELED, NEEDS_REVIEW, or QUEUED for a retry), fenced on ``epoch`` (default:
    the run's current one). True when it was applied."""
    if epoch is None:
        run = store.get_run(run_id, conn=conn)
        assert run is not None, f"no run {run_id}"
        epoch = run.lease_epoch
    end = RunEnd(to, rows, error, reason, not_before, wait_reason, attempt)
    (result,) = store.record_boundaries([Boundary(run_id, epoch, run_end=end, actor=actor)],
                                        conn=conn)
    return result.applied


@dataclass(frozen=True)
class Claim:
    """A claim of a run (QUEUED -> RUNNING) as the audit log says it: its own
    RUN_STATE_CHANGED, or the first step's STEP_STARTED that says it too (``run``)."""

    event_id: int
    run_id: str | None
    created_at: datetime
    payload: Mapping[str, Any]
    """The claim's RUN_STATE_CHANGED payload: from, to, epoch, fields (lease owner, until)."""


def claims(store: Store, run_id: str | None = None) -> list[Claim]:
    """The claims of ``run_id`` (of every run when None) in the audit log, oldest first."""
    found = []
    for event in store.list_events(run_id=run_id, limit=100_000):
        said = (event.payload if event.event_type == "RUN_STATE_CHANGED"
                else event.payload.get("run") if event.event_type == "STEP_STARTED"
                else None)
        if said and said.get("from") == "QUEUED" and said.get("to") == "RUNNING":
            found.append(Claim(event.event_id, event.run_id, event.created_at, said))
    return found
