"""Resources in the store: every (from, to) pair, leases and epochs, registration, health."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum

import pytest
import sqlalchemy as sa
from tests.support.store_helpers import transition_resource_or_raise

from cadenza.clock import FakeClock
from cadenza.domain.errors import InvalidTransition, StoreError
from cadenza.domain.events import EventType
from cadenza.domain.states import RESOURCE_TRANSITIONS, ResourceState, is_allowed
from cadenza.store import StaleEpoch, Store
from cadenza.store.tables import resources

Force = Callable[[sa.Table, object, StrEnum], None]
X = ResourceState


def test_every_resource_state_pair_is_allowed_or_refused_by_the_table(
    store: Store, force: Force, clock: FakeClock
) -> None:
    problems: list[str] = []
    for frm in ResourceState:
        for to in ResourceState:
            rid = f"{frm}-{to}".lower()
            store.upsert_resource(rid, "pairs", "unit")
            force(resources, rid, frm)
            before = store.get_resource(rid)
            seen = len(store.list_events(resource_id=rid))
            clock.advance(1)
            done = store.transition_resource(rid, to, reason="why", actor="tester")
            after = store.get_resource(rid)
            new_events = store.list_events(resource_id=rid)[seen:]
            assert after is not None
            if done != is_allowed(RESOURCE_TRANSITIONS, frm, to):
                problems.append(f"{frm}->{to}: returned {done}")
            elif not done and (after != before or new_events):
                problems.append(f"{frm}->{to}: refused but the row or the log changed")
            elif done:
                if [e.event_type for e in new_events] != [EventType.RESOURCE_STATE_CHANGED]:
                    problems.append(f"{frm}->{to}: events {[e.event_type for e in new_events]}")
                elif (new_events[0].payload["from"], new_events[0].payload["to"]) != (frm, to):
                    problems.append(f"{frm}->{to}: payload {new_events[0].payload}")
                if after.state is not to or after.updated_at != clock.now():
                    problems.append(f"{frm}->{to}: row {after.state}")
    assert problems == []


def test_lease_epochs_fence_a_resource(store: Store, clock: FakeClock) -> None:
    store.upsert_resource("fr-1", "egress", "route")
    until = clock.now() + timedelta(minutes=1)
    assert store.transition_resource(
        "fr-1", X.LEASED, fields={"lease_owner": "run-1", "lease_until": until}
    )
    leased = store.get_resource("fr-1")
    assert leased is not None
    assert (leased.lease_epoch, leased.lease_owner, leased.lease_until) == (1, "run-1", until)
    assert store.transition_resource("fr-1", X.RUNNING, epoch=1)
    # Expired lease reaped: RUNNING -> COOLDOWN clears the holder; then reused by run-2.
    assert store.transition_resource("fr-1", X.COOLDOWN, reason="lease expired", epoch=1)
    cooled = store.get_resource("fr-1")
    assert cooled is not None and (cooled.lease_owner, cooled.lease_until) == (None, None)
    assert store.transition_resource("fr-1", X.AVAILABLE)
    assert store.transition_resource("fr-1", X.LEASED, fields={"lease_owner": "run-2"})
    assert not store.transition_resource("fr-1", X.RUNNING, epoch=1)  # run-1 came back
    with pytest.raises(StaleEpoch):
        transition_resource_or_raise(store, "fr-1", X.RUNNING, epoch=1)
    transition_resource_or_raise(store, "fr-1", X.RUNNING, epoch=2)
    transition_resource_or_raise(store,
        "fr-1", X.FAULT, epoch=2, fields={"last_error": "407 from proxy"}, reason="proxy auth"
    )
    fault = store.get_resource("fr-1")
    assert fault is not None and (fault.state, fault.last_error) == (X.FAULT, "407 from proxy")
    with pytest.raises(InvalidTransition) as info:
        transition_resource_or_raise(store, "fr-1", X.RUNNING)
    assert info.value.frm == X.FAULT
    with pytest.raises(StoreError, match="does not exist"):
        transition_resource_or_raise(store, "nope", X.DISABLED)


def test_registration_keeps_state_and_updates_config(store: Store) -> None:
    store.upsert_resource("u-1", "browsers", "unit", route_id="fr-1")
    transition_resource_or_raise(store, "u-1", X.DISABLED, actor="alice")
    store.upsert_resource("u-1", "browsers", "unit", route_id="de-1")
    store.upsert_resource("c-1", "logins", "credential")
    unit = store.get_resource("u-1")
    assert unit is not None and (unit.state, unit.route_id) == (X.DISABLED, "de-1")
    assert [r.resource_id for r in store.list_resources()] == ["u-1", "c-1"]  # by pool, id
    assert [r.resource_id for r in store.list_resources("logins")] == ["c-1"]
    events = store.list_events(resource_id="u-1")
    assert [e.payload["to"] for e in events] == ["AVAILABLE", "DISABLED"]
    assert events[1].actor == "alice"
    with pytest.raises(ValueError, match="kind"):
        store.upsert_resource("x", "p", "printer")


def test_health_fields_round_trip(store: Store, clock: FakeClock) -> None:
    store.upsert_resource("fr-1", "egress", "route")
    assert store.get_resource("fr-1").health is None  # type: ignore[union-attr]
    store.update_resource_health(
        "fr-1",
        {
            "last_checked_at": clock.now(),
            "latency_ms": 120.5,
            "consecutive_failures": 0,
            "score": 94.0,
            "egress_ip": "203.0.113.9",
            "egress_region": "FR",
        },
    )
    clock.advance(60)
    store.update_resource_health(
        "fr-1",
        {"consecutive_failures": 2, "score": 64.0, "cooldown_until": clock.now()},
    )
    health = store.get_resource("fr-1").health  # type: ignore[union-attr]
    assert health is not None
    assert (health.latency_ms, health.consecutive_failures, health.score) == (120.5, 2, 64.0)
    assert (health.egress_region, health.cooldown_until, health.updated_at) == (
        "FR",
        clock.now(),
        clock.now(),
    )
    with pytest.raises(ValueError, match="unknown health fields"):
        store.update_resource_health("fr-1", {"state": "AVAILABLE"})
