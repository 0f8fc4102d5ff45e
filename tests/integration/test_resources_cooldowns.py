"""Cooldowns end at their time, with no lease asked (cadenza.resources.cooldowns): a route
given back by a run is probed once more when its cooldown ends (AVAILABLE when the probe
passes, cooling down again when it fails), a unit comes back AVAILABLE; enabling a member
starts its count of failed checks again.

Real parts: SQLite files and PostgreSQL, a fault-injecting HTTP proxy and an IP-echo server
on loopback; time is a FakeClock that the test moves (the loops wait on it).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta
from typing import Any

import pytest
from tests.support.proxies import (  # noqa: F401
    EchoServer,
    FaultProxy,
    echo_fixture,
    fault_proxy_fixture,
    free_port,
)

from cadenza.clock import FakeClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.events import EventType
from cadenza.domain.states import ResourceState
from cadenza.lifecycle import Lifecycle
from cadenza.resources.cooldowns import CooldownEnds
from cadenza.resources.health import HealthChecker
from cadenza.store import Store
from cadenza.store.leadership import LeaseLeadership

X = ResourceState
INTERVAL, ROUTE_COOLDOWN, UNIT_COOLDOWN = 300, 30, 20


def settings_for(echo: EchoServer, proxy: str, dead: str) -> Settings:
    return Settings.model_validate({"pools": {
        "egress": {"kind": "route", "cooldown": f"{ROUTE_COOLDOWN}s",
                   "health": {"interval": f"{INTERVAL}s", "timeout": "2s",
                              "probe_url": echo.url("/generate_204"), "threshold": 50,
                              "disable_after": 3},
                   "members": [{"id": "fr-1", "proxy": proxy},
                               {"id": "fr-2", "proxy": dead}]},
        "desk": {"kind": "unit", "cooldown": f"{UNIT_COOLDOWN}s",
                 "members": [{"id": "u-1"}]}}})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-03-01T10:00:00+00:00")


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[Store]:
    opened = Store.open(store_url, clock=clock)
    yield opened
    opened.close()


def given_back(store: Store, rid: str, until: datetime) -> None:
    """What a run's end does to a member it held: RUNNING -> COOLDOWN until ``until``."""
    assert store.transition_resource(rid, X.LEASED, fields={"lease_owner": "run-1"})
    assert store.transition_resource(rid, X.RUNNING)
    assert store.transition_resource(rid, X.COOLDOWN, reason="released")
    store.update_resource_health(rid, {"cooldown_until": until})


def state(store: Store, rid: str) -> tuple[X, Any]:
    record = store.get_resource(rid)
    assert record is not None
    return record.state, record.health


def test_cooldowns_end_at_their_time_without_a_lease(store: Store, store_url: str,
                                                     clock: FakeClock, echo: EchoServer,
                                                     fault_proxy: FaultProxy) -> None:
    settings = settings_for(echo, fault_proxy.url, f"http://127.0.0.1:{free_port()}")
    for name, pool in settings.pools.items():
        for member in pool.members:
            store.upsert_resource(member.id, name, pool.kind)
    life = Lifecycle(clock)
    stack = ExitStack()
    leader = None
    if store.dialect == "postgresql":  # there the scheduler's leader probes
        leader = LeaseLeadership(store_url, role=f"test-{secrets.randbelow(2**31)}")
        stack.callback(leader.close)
        assert leader.acquire()
    checker = HealthChecker(store, life, lambda: settings, leader=leader)
    ends = CooldownEnds(store, life, lambda: settings, checker)
    checker.start(stack)
    ends.start(stack)
    try:
        assert clock.wait_until_idle(2, timeout=20)
        assert state(store, "fr-1")[0] is X.AVAILABLE
        checked = state(store, "fr-1")[1].last_checked_at
        # fr-2's proxy refuses connections: its first checks fail, but it is not below the
        # threshold yet; put both routes and the unit through a run's end.
        t0 = clock.now()
        for rid in ("fr-1", "fr-2"):
            given_back(store, rid, t0 + timedelta(seconds=ROUTE_COOLDOWN))
        given_back(store, "u-1", t0 + timedelta(seconds=UNIT_COOLDOWN))
        leases = len(store.list_events(event_type=EventType.RESOURCE_LEASED))

        clock.advance_idle(UNIT_COOLDOWN - 1, 2, timeout=20)
        assert state(store, "u-1")[0] is X.COOLDOWN
        clock.advance_idle(1, 2, timeout=20)
        assert state(store, "u-1")[0] is X.AVAILABLE  # at its time, no claim looked
        back = store.list_events(resource_id="u-1")[-1]
        assert back.payload["from"] == "COOLDOWN" and back.payload["to"] == "AVAILABLE"
        assert back.payload["reason"] == "cooldown over (until 10:00:20 UTC)"

        clock.advance_idle(ROUTE_COOLDOWN - UNIT_COOLDOWN - 1, 2, timeout=20)
        assert state(store, "fr-1")[0] is X.COOLDOWN
        assert state(store, "fr-1")[1].last_checked_at == checked  # not probed meanwhile
        clock.advance_idle(1, 2, timeout=20)
        end = t0 + timedelta(seconds=ROUTE_COOLDOWN)
        # The checker planned its next round an interval ahead; the cooldown's end
        # brought it forward: probed once more at the end, passed, AVAILABLE.
        now_state, health = state(store, "fr-1")
        assert (now_state, health.last_checked_at) == (X.AVAILABLE, end)
        checks = store.list_events(resource_id="fr-1", event_type=EventType.HEALTH_CHECKED)
        assert checks[-1].payload["from"] == "COOLDOWN" and checks[-1].payload["ok"] is True
        # fr-2's probe at the end failed: cooling down again, until one more cooldown.
        now_state, health = state(store, "fr-2")
        assert now_state is X.COOLDOWN and health.last_checked_at == end
        assert health.cooldown_until == end + timedelta(seconds=ROUTE_COOLDOWN)
        # No lease was asked for any of it.
        assert len(store.list_events(event_type=EventType.RESOURCE_LEASED)) == leases
    finally:
        life.stop(10)
        stack.close()
