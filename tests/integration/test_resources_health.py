"""The health-check service against real proxies on loopback, driven by a FakeClock.

The checker (cadenza.resources.health) runs its loop on a Lifecycle whose clock is a
FakeClock: the test moves time with ``advance_idle`` and the loop probes what is due. The
probes are real: TCP connections and HTTP requests through a fault-injecting proxy and
tinyproxy to a real IP-echo server, with the pool's timeout (1 s) as the only real wait.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.proxies import (  # noqa: F401
    FR,
    EchoServer,
    FaultProxy,
    echo_fixture,
    fault_proxy_fixture,
    fleet,
    tinyproxy,
)
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock, SystemClock
from cadenza.config.schema_settings import Settings
from cadenza.domain.states import ResourceState
from cadenza.home import Home
from cadenza.lifecycle import Lifecycle
from cadenza.node import Node
from cadenza.resources.health import HealthChecker
from cadenza.store import Store
from cadenza.store.leadership import LeaseLeadership

X = ResourceState
INTERVAL, COOLDOWN, TIMEOUT = 60, 30, 2
NODE_LOOPS = 9
"""Loops of a node that wait on its clock: keeper, reaper, scheduler, retention, dispatcher
(which also watches the config files), health, cooldown ends, notification sender, local
disk check (a lower
count lets the test read before the health loop's first round)."""


def pool_settings(echo: EchoServer, members: list[dict[str, Any]], **health: Any
                  ) -> Settings:
    table = {"interval": f"{INTERVAL}s", "timeout": f"{TIMEOUT}s",
             "probe_url": echo.url("/generate_204"), "ip_echo_url": echo.url("/ip"),
             "threshold": 50, **health}
    return Settings.model_validate({"pools": {"egress": {
        "kind": "route", "cooldown": f"{COOLDOWN}s", "health": table, "members": members}}})


def register(store: Store, settings: Settings) -> None:
    """What the pools sync does at start: one AVAILABLE resource per member."""
    for name, pool in settings.pools.items():
        for member in pool.members:
            store.upsert_resource(member.id, name, pool.kind)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-03-01T10:00:00+00:00")


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'cadenza.db'}", clock=clock)
    yield opened
    opened.close()


class Running:
    """A started checker on a FakeClock; ``step(seconds)`` moves time and waits for it."""

    def __init__(self, checker: HealthChecker, clock: FakeClock) -> None:
        self.checker, self.clock = checker, clock
        self.stack = ExitStack()
        checker.start(self.stack)
        assert clock.wait_until_idle(1, timeout=20), "the first round did not end"

    def step(self, seconds: float) -> None:
        self.clock.advance_idle(seconds, 1, timeout=20)

    def close(self) -> None:
        self.checker.life.stop(10)
        self.stack.close()


def state(store: Store, rid: str = "fr-1") -> tuple[X, Any]:
    record = store.get_resource(rid)
    assert record is not None
    return record.state, record.health


def test_timeouts_cool_down_recover_then_disable(store: Store, clock: FakeClock,
                                                 echo: EchoServer,
                                                 fault_proxy: FaultProxy) -> None:
    settings = pool_settings(echo, [{"id": "fr-1", "proxy": fault_proxy.url,
                                     "region": "FR"}])
    register(store, settings)
    life = Lifecycle(clock)
    run = Running(HealthChecker(store, life, lambda: settings), clock)
    try:
        # First round at start: all three phases pass, egress seen as FR from 127.0.0.2.
        now_state, health = state(store)
        assert now_state is X.AVAILABLE
        assert (health.egress_ip, health.egress_region) == (FR, "FR")
        assert health.score == 100.0 and health.consecutive_successes == 1
        first_check = health.last_checked_at

        # The proxy starts timing out: within one interval the route is COOLDOWN.
        fault_proxy.delay = 5.0
        run.step(INTERVAL)
        now_state, health = state(store)
        assert now_state is X.COOLDOWN
        assert health.last_checked_at == first_check + timedelta(seconds=INTERVAL)
        assert health.last_error_type == "timeout" and health.recent_timeouts == 1
        assert health.score == max(0, 100 - TIMEOUT * 1000 / 20 - 15 - 10)
        assert health.cooldown_until == clock.now() + timedelta(seconds=COOLDOWN)
        cooled_at = clock.now()

        # Not probed again before the cooldown ends; probed once it does (still failing).
        run.step(COOLDOWN - 1)
        assert state(store)[1].last_checked_at == cooled_at
        run.step(1)
        now_state, health = state(store)
        assert health.last_checked_at == cooled_at + timedelta(seconds=COOLDOWN)
        assert now_state is X.COOLDOWN and health.consecutive_failures == 2

        # It answers again: re-probed after the cooldown, AVAILABLE.
        fault_proxy.delay = 0.0
        run.step(COOLDOWN)
        now_state, health = state(store)
        assert now_state is X.AVAILABLE
        assert health.consecutive_failures == 0 and health.recent_timeouts == 2
        assert health.score == 100 - 2 * 10

        # Timing out for good: DISABLED after disable_after (5) consecutive failures.
        fault_proxy.delay = 5.0
        run.step(INTERVAL)
        assert state(store)[0] is X.COOLDOWN
        for _ in range(4):
            run.step(COOLDOWN)
        now_state, health = state(store)
        assert now_state is X.DISABLED
        assert health.consecutive_failures == 5
        disabled_at = health.last_checked_at
        run.step(INTERVAL * 3)  # a DISABLED route is not probed any more
        assert state(store)[1].last_checked_at == disabled_at
    finally:
        run.close()

    changes = store.list_events(resource_id="fr-1", event_type="RESOURCE_STATE_CHANGED")
    moves = [(e.payload["from"], e.payload["to"]) for e in changes]
    assert moves == [(None, "AVAILABLE"), ("AVAILABLE", "COOLDOWN"), ("COOLDOWN", "AVAILABLE"),
                     ("AVAILABLE", "COOLDOWN"), ("COOLDOWN", "DISABLED")]
    assert "5 consecutive failed health checks" in changes[-1].message
    assert "timeout" in changes[-1].message
    checks = store.list_events(resource_id="fr-1", event_type="HEALTH_CHECKED")
    # at start, 2 failing, 1 passing, 5 failing; none once DISABLED
    assert [c.payload["ok"] for c in checks] == [True, False, False, True] + [False] * 5
    requests = store.list_events(resource_id="fr-1", event_type="HTTP_REQUEST")
    assert {r.payload["purpose"] for r in requests} == {"health check"}
    assert {r.payload["route"] for r in requests} == {"fr-1"}


def test_region_mismatch_and_credentials_never_shown(tmp_path: Path, store: Store,
                                                     clock: FakeClock,
                                                     echo: EchoServer) -> None:
    # tinyproxy with basic auth sending from 127.0.0.2 ("FR"), declared DE.
    with tinyproxy(tmp_path / "tp", source=FR, credentials=("cz", "S3cretProxyPw")) as tp:
        settings = pool_settings(echo, [{"id": "de-1", "proxy": tp.url, "region": "DE"},
                                        {"id": "fr-2", "proxy": tp.url, "region": "FR"}])
        register(store, settings)
        checker = HealthChecker(store, Lifecycle(clock), lambda: settings)
        checker.round()
    de, fr = store.get_resource("de-1"), store.get_resource("fr-2")
    assert de is not None and fr is not None and de.health and fr.health
    assert de.health.last_error_type == "region_mismatch"
    assert (fr.health.last_error_type, fr.health.egress_region) == (None, "FR")
    [check] = store.list_events(resource_id="de-1", event_type="HEALTH_CHECKED")
    assert "egress region FR, expected DE" in check.message
    assert check.payload["phase"] == 3
    everything = " ".join(f"{e.message} {e.payload}" for e in store.list_events(limit=10_000))
    everything += " ".join(str(r) for r in store.list_resources())
    assert "S3cretProxyPw" not in everything
    assert "cz:" not in everything


def test_two_hundred_routes_within_one_interval(tmp_path: Path) -> None:
    """200 routes, each through its own proxy (served by another process) that waits
    0.5 s before each request: one by one, two requests each, that is 200 s; the checker,
    50 at a time, does it within the 120 s interval (about 5 s on an idle machine)."""
    with fleet(200, 0.5) as proxies:
        store = Store.open(f"sqlite:///{tmp_path / 'many.db'}", clock=SystemClock())
        try:
            members = [{"id": f"r{i:03}", "proxy": f"http://127.0.0.1:{port}",
                        "region": "FR"} for i, port in enumerate(proxies.proxy_ports)]
            settings = Settings.model_validate({"pools": {"egress": {
                "kind": "route", "members": members, "health": {
                    "interval": "120s", "timeout": "20s", "concurrency": 50,
                    "probe_url": proxies.echo_url("/generate_204"),
                    "ip_echo_url": proxies.echo_url("/ip")}}}})
            register(store, settings)
            checker = HealthChecker(store, Lifecycle(SystemClock()), lambda: settings)
            began = time.monotonic()
            checker.round()
            took = time.monotonic() - began
            print(f"200 routes probed in {took:.2f}s")
            records = store.list_resources("egress")
            assert len(records) == 200
            failed = [e.message for e in store.list_events(event_type="HEALTH_CHECKED",
                                                           limit=1000) if not e.payload["ok"]]
            assert failed == [], failed[:3]
            # every route probed once and passed (a slow machine may score some low)
            assert all(r.health is not None and r.health.consecutive_successes == 1
                       and r.health.latency_ms is not None and r.health.latency_ms >= 500
                       for r in records)
            assert took < 120, f"200 routes took {took:.1f}s"
            assert took < 200 * 2 * 0.5 / 4  # at least 4 times faster than one by one
        finally:
            store.close()


def test_on_postgresql_only_the_leader_probes(pg_url: str, echo: EchoServer,
                                              fault_proxy: FaultProxy) -> None:
    store = Store.open(pg_url, clock=SystemClock())
    leader, follower = LeaseLeadership(pg_url), LeaseLeadership(pg_url)
    try:
        assert leader.acquire() and not follower.acquire()
        settings = pool_settings(echo, [{"id": "fr-1", "proxy": fault_proxy.url,
                                         "region": "FR"}])
        register(store, settings)
        HealthChecker(store, Lifecycle(SystemClock()), lambda: settings,
                      leader=follower).round()
        HealthChecker(store, Lifecycle(SystemClock()), lambda: settings, leader=None).round()
        assert store.get_resource("fr-1").health is None  # type: ignore[union-attr]
        HealthChecker(store, Lifecycle(SystemClock()), lambda: settings,
                      leader=leader).round()
        record = store.get_resource("fr-1")
        assert record is not None and record.health is not None
        assert record.health.egress_region == "FR"
        assert len(store.list_events(resource_id="fr-1", event_type="HEALTH_CHECKED")) == 1
    finally:
        store.close()
        leader.close()
        follower.close()


def test_a_node_probes_its_routes_on_its_clock(tmp_path: Path, echo: EchoServer,
                                               fault_proxy: FaultProxy) -> None:
    """The checker as a service of a whole node (SQLite, FakeClock): it probes at start,
    and a proxy that starts timing out is COOLDOWN one interval later."""
    path = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(path)]).exit_code == 0
    config = path / "cadenza.toml"
    config.write_text(config.read_text() + f'''
[pools.egress]
kind = "route"
cooldown = "{COOLDOWN}s"
[pools.egress.health]
interval = "{INTERVAL}s"
timeout = "{TIMEOUT}s"
probe_url = "{echo.url('/generate_204')}"
[[pools.egress.members]]
id = "fr-1"
proxy = "{fault_proxy.url}"
region = "FR"
''')
    home = Home(path.resolve())
    loaded = home.load_config()
    clock = FakeClock("2027-03-01T10:00:00+00:00")
    store = home.open_store(loaded, clock=clock)
    register(store, loaded.settings)
    node = Node(home, loaded, store, clock=clock, workers=1)
    try:
        assert "health" in [s.name for s in node.services]
        node.start()
        assert clock.wait_until_idle(NODE_LOOPS, timeout=30)
        now_state, health = state(store)
        assert now_state is X.AVAILABLE and health is not None
        assert health.last_checked_at == clock.now()
        fault_proxy.delay = 5.0
        clock.advance_idle(INTERVAL, NODE_LOOPS, timeout=30)
        now_state, health = state(store)
        assert now_state is X.COOLDOWN and health.last_error_type == "timeout"
    finally:
        node.stop(timeout=10)
        store.close()


def test_health_row_and_events_commit_together(store: Store, clock: FakeClock,
                                               echo: EchoServer, fault_proxy: FaultProxy,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A HEALTH_CHECKED event that cannot be written takes the health row and the
    transition with it (one transaction); the next round writes all three."""
    settings = pool_settings(echo, [{"id": "fr-1", "proxy": fault_proxy.url,
                                     "region": "DE"}],  # egress is FR: fails
                             disable_after=1)
    register(store, settings)
    checker = HealthChecker(store, Lifecycle(clock), lambda: settings)
    real = store.append_event

    def failing(event_type: Any, *args: Any, **kwargs: Any) -> int:
        if event_type == "HEALTH_CHECKED":
            raise RuntimeError("injected: the event cannot be written")
        return real(event_type, *args, **kwargs)

    monkeypatch.setattr(store, "append_event", failing)
    with pytest.raises(RuntimeError, match="injected"):
        checker.round()
    assert state(store) == (X.AVAILABLE, None)
    assert store.list_events(resource_id="fr-1", event_type="HTTP_REQUEST") == []
    monkeypatch.setattr(store, "append_event", real)
    checker.round()
    now_state, health = state(store)
    assert now_state is X.DISABLED and health.last_error_type == "region_mismatch"
    assert len(store.list_events(resource_id="fr-1", event_type="HEALTH_CHECKED")) == 1
    assert store.list_events(resource_id="fr-1", event_type="RESOURCE_STATE_CHANGED")[
        -1].payload["to"] == "DISABLED"
