"""One probe of one route (cadenza.resources.probe), phase by phase, against real proxies
on loopback: danted (SOCKS5), pproxy (SOCKS5 with credentials), the fault-injecting proxy
(refusal, delay, 407, another egress) and the IP-echo server."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from tests.support.proxies import (  # noqa: F401
    DE,
    FR,
    EchoServer,
    FaultProxy,
    FaultSocks,
    danted,
    echo_fixture,
    fault_proxy_fixture,
    pproxy_socks,
)

from cadenza.clock import SystemClock
from cadenza.config.schema_settings import PoolHealth
from cadenza.resources.leased import LeasedResource
from cadenza.resources.probe import probe_route

SECRET = "SocksPw-0451"


def health(echo: EchoServer, **extra: object) -> PoolHealth:
    return PoolHealth.model_validate({"timeout": "3s", "probe_url": echo.url("/generate_204"),
                                      "ip_echo_url": echo.url("/ip"), **extra})


def route(proxy: str, region: str | None = "FR") -> LeasedResource:
    return LeasedResource(resource_id="r-1", pool="egress", kind="route", proxy=proxy,
                          region=region, fields={}, route=None)


def test_all_phases_through_danted(tmp_path: Path, echo: EchoServer) -> None:
    with danted(tmp_path / "d", source=DE) as proxy:
        probe = probe_route(route(proxy.url, "DE"), health(echo), SystemClock())
    outcome = probe.outcome
    assert outcome.ok, outcome
    assert (outcome.egress_ip, outcome.egress_region) == (DE, "DE")
    assert outcome.latency_ms is not None and outcome.latency_ms >= 0
    assert [(r.url, r.status) for r in probe.requests] == [
        (echo.url("/generate_204"), 204), (echo.url("/ip"), 200)]
    assert [path for _, path in echo.seen] == ["/generate_204", "/ip"]


def test_socks_credentials_never_in_the_outcome(tmp_path: Path, echo: EchoServer) -> None:
    with pproxy_socks(tmp_path / "p", credentials=("cz", SECRET)) as proxy:
        good = probe_route(route(proxy.url, "US"), health(echo), SystemClock())
        bad = probe_route(route(proxy.url, "FR"), health(echo), SystemClock())
    assert good.outcome.ok
    assert (bad.outcome.error_type, bad.outcome.phase) == ("region_mismatch", 3)
    assert "egress region US, expected FR" in (bad.outcome.error or "")
    for probe in (good, bad):
        assert SECRET not in f"{probe.outcome} {probe.requests}"


@pytest.mark.parametrize(("fault", "phase", "error_type"), [
    ("refuse", 1, "connect"),
    ("delay", 2, "timeout"),
    ("auth", 2, "proxy_auth"),
    ("region", 3, "region_mismatch"),
])
def test_each_fault_is_named(echo: EchoServer, fault_proxy: FaultProxy, fault: str,
                             phase: int, error_type: str) -> None:
    expected_region = "FR"
    if fault == "refuse":
        fault_proxy.refuse()
    elif fault == "delay":
        fault_proxy.delay = 5.0
    elif fault == "auth":
        fault_proxy.credentials = ("cz", "right-one")
    else:
        expected_region = "DE"  # the proxy egresses from 127.0.0.2, "FR"
    proxy = fault_proxy.url_with("cz", SECRET) if fault == "auth" else fault_proxy.url
    probe = probe_route(route(proxy, expected_region), health(echo), SystemClock())
    outcome = probe.outcome
    assert not outcome.ok
    assert (outcome.phase, outcome.error_type) == (phase, error_type), outcome
    assert SECRET not in f"{outcome} {probe.requests}"
    if fault == "refuse":
        assert echo.seen == []


def test_a_probe_url_that_fails(echo: EchoServer, fault_proxy: FaultProxy) -> None:
    probe = probe_route(route(fault_proxy.url),
                        health(echo, probe_url=echo.url("/missing")), SystemClock())
    assert (probe.outcome.phase, probe.outcome.error_type) == (2, "status")
    assert "HTTP 404" in (probe.outcome.error or "")


def test_without_urls_only_the_tcp_connect(fault_proxy: FaultProxy) -> None:
    probe = probe_route(route(fault_proxy.url), PoolHealth(), SystemClock())
    assert probe.outcome.ok and probe.requests == []
    assert fault_proxy.requests == 0


# httpcore 1.0.9 does not close the socket of a SOCKS5 handshake the proxy refused (it is
# closed when collected, with a ResourceWarning): collected here, inside this test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_socks_credentials_refused(echo: EchoServer) -> None:
    socks = FaultSocks(source=FR, credentials=("cz", "right-one"))
    try:
        good = probe_route(route(socks.url_with("cz", "right-one")), health(echo),
                           SystemClock())
        bad = probe_route(route(socks.url_with("cz", SECRET)), health(echo), SystemClock())
    finally:
        socks.close()
    gc.collect()
    assert good.outcome.ok and good.outcome.egress_region == "FR"
    assert (bad.outcome.phase, bad.outcome.error_type) == (2, "proxy_auth")
    assert SECRET not in f"{bad.outcome} {bad.requests}"
