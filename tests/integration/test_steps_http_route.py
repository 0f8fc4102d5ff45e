"""The http step through a run's route: real proxies on loopback (tinyproxy for HTTP,
danted and pproxy for SOCKS5, the tests' fault-injecting proxy), a real IP-echo server.

The step gets its route from ``ctx.route(via)`` (the pools branch's StepContext provides
it; here the test context of tests/unit/steps/http_ctx.py gains that one method). The
target is the echo server on 127.0.0.1, which the strict egress policy refuses: as in
test_steps_http_guard.py the step is given an ``is_public`` that counts exactly 127.0.0.1
as public and judges every other address by the real rule.
"""

from __future__ import annotations

import gc
import sys
import threading
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

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
    tinyproxy,
)

from cadenza.config.schema_settings import Settings
from cadenza.domain.errors import Fatal, ResourceFault, Retryable
from cadenza.netguard import Address, EgressRefused, default_is_public
from cadenza.resources.leased import LeasedResource
from cadenza.steps.builtin.http import HttpConfig, HttpStep

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from http_ctx import HttpTestContext, settings_with

SECRET = "Pr0xyS3cret-xyz"


def stand_in_is_public(address: Address) -> bool:
    return address == IPv4Address("127.0.0.1") or default_is_public(address)


class RoutedContext(HttpTestContext):
    """The test ctx plus ``route(pool)``: the route the run holds (of ``pool``, or any)."""

    def __init__(self, home: Path, route: LeasedResource | None, **kwargs: Any) -> None:
        super().__init__(home, kwargs.pop("settings", settings_with()), **kwargs)
        self.held = route
        self.asked: list[str | None] = []

    def route(self, pool: str | None = None) -> LeasedResource | None:
        self.asked.append(pool)
        if self.held is None or (pool is not None and self.held.pool != pool):
            return None
        return self.held


def route(proxy: str, region: str | None = "FR", rid: str = "fr-1") -> LeasedResource:
    return LeasedResource(resource_id=rid, pool="egress", kind="route", proxy=proxy,
                          region=region, fields={}, route=None)


@pytest.fixture
def step() -> HttpStep:
    return HttpStep(is_public=stand_in_is_public)


def call(step: HttpStep, ctx: RoutedContext, **config: Any) -> dict[str, Any]:
    try:
        result = step.run(ctx, HttpConfig.model_validate({"name": "call", "type": "http",
                                                         **config}))
    finally:
        ctx.close()
    assert isinstance(result.output, dict)
    return result.output


def everything(ctx: RoutedContext, *more: object) -> str:
    return " ".join([str(e) for e in ctx.events] + [str(line) for line in
                                                    ctx.log_record.lines]
                    + [str(m) for m in more])


def test_through_tinyproxy_the_target_sees_the_route_egress(
        tmp_path: Path, step: HttpStep, echo: EchoServer) -> None:
    with tinyproxy(tmp_path / "tp", source=FR, credentials=("cz", SECRET)) as proxy:
        ctx = RoutedContext(tmp_path, route(proxy.url))
        out = call(step, ctx, url=echo.url("/ip"))
    assert out["json"] == {"ip": FR, "country": "FR"}
    [event] = ctx.http_events()
    assert (event["route"], event["pool"], event["status"]) == ("fr-1", "egress", 200)
    assert ctx.asked == [None]  # no via: the run's route, whichever pool
    assert SECRET not in everything(ctx, out)


@pytest.mark.parametrize("server", ["danted", "pproxy"])
def test_through_socks5(tmp_path: Path, step: HttpStep, echo: EchoServer,
                        server: str) -> None:
    if server == "danted":
        with danted(tmp_path / "d", source=DE) as proxy:
            ctx = RoutedContext(tmp_path, route(proxy.url, "DE", "de-1"))
            out = call(step, ctx, url=echo.url("/ip"), via="egress")
        assert out["json"] == {"ip": DE, "country": "DE"}
    else:
        with pproxy_socks(tmp_path / "p", credentials=("cz", SECRET)) as proxy:
            ctx = RoutedContext(tmp_path, route(proxy.url, "US", "us-1"))
            out = call(step, ctx, url=echo.url("/ip"), via="egress")
        assert out["json"]["ip"] == "127.0.0.1"
    assert ctx.asked == ["egress"]
    assert ctx.http_events()[0]["route"] in ("de-1", "us-1")
    assert SECRET not in everything(ctx, out)


def test_a_407_is_the_route_at_fault(tmp_path: Path, step: HttpStep, echo: EchoServer,
                                     fault_proxy: FaultProxy) -> None:
    fault_proxy.credentials = ("cz", "right-one")
    ctx = RoutedContext(tmp_path, route(fault_proxy.url_with("cz", SECRET)))
    with pytest.raises(ResourceFault) as caught:
        call(step, ctx, url=echo.url("/hello"))
    assert caught.value.resource_id == "fr-1"
    assert "407" in str(caught.value)
    assert SECRET not in everything(ctx, caught.value)


@pytest.mark.reliability_case(30)
def test_a_407_to_connect_is_the_route_at_fault(tmp_path: Path, step: HttpStep,
                                                fault_proxy: FaultProxy) -> None:
    fault_proxy.credentials = ("cz", "right-one")
    ctx = RoutedContext(tmp_path, route(fault_proxy.url_with("cz", SECRET)))
    with pytest.raises(ResourceFault) as caught:  # https: a CONNECT tunnel, refused
        call(step, ctx, url="https://127.0.0.1:9/x")
    assert caught.value.resource_id == "fr-1"
    assert "refused the tunnel" in str(caught.value)
    assert SECRET not in everything(ctx, caught.value)


def test_a_refusing_proxy_is_the_route_at_fault(tmp_path: Path, step: HttpStep,
                                                echo: EchoServer,
                                                fault_proxy: FaultProxy) -> None:
    fault_proxy.refuse()
    ctx = RoutedContext(tmp_path, route(fault_proxy.url))
    with pytest.raises(ResourceFault) as caught:
        call(step, ctx, url=echo.url("/hello"))
    assert caught.value.resource_id == "fr-1"
    assert "cannot connect to the proxy" in str(caught.value)
    assert echo.seen == []


def test_a_proxy_killed_mid_request_is_the_route_at_fault(
        tmp_path: Path, step: HttpStep, echo: EchoServer) -> None:
    with tinyproxy(tmp_path / "tp", source=FR) as proxy:
        ctx = RoutedContext(tmp_path, route(proxy.url))
        errors: list[BaseException] = []

        def run() -> None:
            try:
                call(step, ctx, url=echo.url("/hold"))
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        assert echo.wait_held()
        proxy.kill()
        worker.join(30)
    [error] = errors
    assert isinstance(error, ResourceFault), error
    assert error.resource_id == "fr-1"
    assert "stopped answering" in str(error)


def test_a_slow_target_through_a_live_proxy_is_not_the_route(
        tmp_path: Path, step: HttpStep, echo: EchoServer, fault_proxy: FaultProxy) -> None:
    """A broken exchange while the proxy still accepts connections stays the target's."""
    ctx = RoutedContext(tmp_path, route(fault_proxy.url), timeout=1.0)
    with pytest.raises(Retryable) as caught:
        call(step, ctx, url=echo.url("/hold"))
    assert not isinstance(caught.value, ResourceFault)


def test_the_egress_guard_still_judges_the_target(tmp_path: Path, step: HttpStep,
                                                  fault_proxy: FaultProxy) -> None:
    ctx = RoutedContext(tmp_path, route(fault_proxy.url))
    with pytest.raises(EgressRefused):
        call(step, ctx, url="http://169.254.169.254/latest/meta-data/")
    assert fault_proxy.requests == 0  # refused before anything reached the proxy


@pytest.mark.reliability_case(30)
def test_via_without_a_route_never_goes_direct(tmp_path: Path, step: HttpStep,
                                               echo: EchoServer) -> None:
    ctx = RoutedContext(tmp_path, None)
    with pytest.raises(Fatal, match="refusing to go direct"):
        call(step, ctx, url=echo.url("/hello"), via="egress")
    assert echo.seen == []


def test_a_connection_target_goes_through_the_route(tmp_path: Path, step: HttpStep,
                                                    echo: EchoServer,
                                                    fault_proxy: FaultProxy) -> None:
    settings = settings_with({"svc": {"type": "http", "base_url": echo.url("/"),
                                      "allow_private": True}})
    ctx = RoutedContext(tmp_path, route(fault_proxy.url), settings=settings)
    out = call(step, ctx, connection="svc", path="/ip")
    assert out["json"] == {"ip": FR, "country": "FR"}
    assert fault_proxy.requests == 1



@pytest.mark.parametrize(("declared", "passes"), [("FR", True), ("DE", False)])
def test_check_egress_refuses_a_route_in_another_region(
        tmp_path: Path, step: HttpStep, echo: EchoServer, fault_proxy: FaultProxy,
        declared: str, passes: bool) -> None:
    settings = Settings.model_validate({"pools": {"egress": {
        "kind": "route", "members": [{"id": "fr-1", "proxy": fault_proxy.url,
                                      "region": declared}],
        "health": {"ip_echo_url": echo.url("/ip"), "check_egress": True}}}})
    ctx = RoutedContext(tmp_path, route(fault_proxy.url, declared), settings=settings)
    if passes:
        out = call(step, ctx, url=echo.url("/hello"))
        assert out["preview"] == "hello"
        assert [p.get("purpose") for p in ctx.http_events()] == ["egress check", None]
    else:
        with pytest.raises(ResourceFault) as caught:
            call(step, ctx, url=echo.url("/hello"))
        assert caught.value.resource_id == "fr-1"
        assert "egress region FR, expected DE" in str(caught.value)
        assert [path for _, path in echo.seen] == ["/ip"]  # nothing sent to the target


# httpcore 1.0.9 does not close the socket of a SOCKS5 handshake the proxy refused (it is
# closed when collected, with a ResourceWarning): collected here, inside this test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.reliability_case(30)
def test_socks_authentication_failure_is_the_route_at_fault(tmp_path: Path, step: HttpStep,
                                                            echo: EchoServer) -> None:
    socks = FaultSocks(source=FR, credentials=("cz", "right-one"))
    try:
        good = RoutedContext(tmp_path, route(socks.url_with("cz", "right-one")))
        assert call(step, good, url=echo.url("/ip"))["json"] == {"ip": FR, "country": "FR"}
        bad = RoutedContext(tmp_path, route(socks.url_with("cz", SECRET)))
        with pytest.raises(ResourceFault) as caught:
            call(step, bad, url=echo.url("/hello"))
    finally:
        socks.close()
    rid, message = caught.value.resource_id, str(caught.value)
    del caught  # the error's context holds httpcore's socket: collected now
    gc.collect()
    assert rid == "fr-1"
    assert "refused the tunnel" in message
    assert SECRET not in everything(bad, message)
    assert [path for _, path in echo.seen] == ["/ip"]
