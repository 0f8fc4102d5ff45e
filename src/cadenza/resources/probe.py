"""One health probe of one route, in three phases (docs/health-checks.md "The probe"):

1. a TCP connection to the proxy (refused: ``connect``; no answer in time: ``timeout``);
2. the pool's ``probe_url`` through the proxy, expecting 2xx (``status``; a 407:
   ``proxy_auth``; ``CONNECT`` or SOCKS refused: ``tunnel``; out of time: ``timeout``);
3. the pool's ``ip_echo_url`` through the proxy: the egress IP and region (JSON keys
   ``ip_key`` and ``country_key``), compared with the member's ``region``
   (``region_mismatch``; an unusable answer: ``echo``).

A phase whose URL is not configured is skipped; the first failing phase ends the probe.
Every phase waits at most the pool's ``timeout``. The probe's URLs are the operator's own
(``cadenza.toml``): they are not judged by the steps' egress policy (a probe server on a
private network is normal). Latency: the probe URL's round trip through the proxy, else the
TCP connect's, on the :class:`~cadenza.clock.Clock`'s monotonic time. The probe's requests
are returned as :class:`Request` records (the checker writes them as HTTP_REQUEST events);
no text it returns holds the proxy's credentials.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any

import httpx

from cadenza.clock import Clock
from cadenza.config.schema_settings import PoolHealth
from cadenza.domain.health import TIMEOUT, ProbeOutcome
from cadenza.netguard import redacted_url
from cadenza.resources.egress import (
    EchoError,
    clean,
    egress_of,
    proxy_address,
    proxy_transport,
    region_mismatch,
    shown_proxy,
)
from cadenza.resources.leased import LeasedResource


@dataclass(frozen=True, slots=True)
class Request:
    """One request a probe sent (an HTTP_REQUEST event's payload)."""

    method: str
    url: str
    host: str
    port: int | None
    status: int | None
    latency_ms: int
    error: str | None

    def payload(self, route: LeasedResource) -> dict[str, Any]:
        return {"method": self.method, "url": self.url, "host": self.host, "port": self.port,
                "status": self.status, "latency_ms": self.latency_ms, "error": self.error,
                "route": route.resource_id, "pool": route.pool, "purpose": "health check"}


@dataclass
class Probe:
    """A probe's result: the outcome and the requests it sent."""

    outcome: ProbeOutcome
    requests: list[Request] = field(default_factory=list)


class _Failed(Exception):
    def __init__(self, phase: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.phase, self.error_type, self.message = phase, error_type, message


def probe_route(route: LeasedResource, health: PoolHealth, clock: Clock) -> Probe:
    """Probe ``route`` with its pool's ``health`` settings (module doc); never raises for
    the route's failures (they are the outcome)."""
    timeout = health.timeout.total_seconds()
    proxy = route.proxy or ""
    requests: list[Request] = []
    started = clock.monotonic()
    latency: float | None = None
    egress: tuple[str | None, str | None] = (None, None)
    try:
        if not proxy:
            raise _Failed(1, "connect", "the route has no proxy URL")
        latency = _connect(proxy, timeout, clock)
        if health.probe_url is not None or health.ip_echo_url is not None:
            with httpx.Client(transport=proxy_transport(proxy), trust_env=False,
                              timeout=timeout, follow_redirects=False) as client:
                if health.probe_url is not None:
                    latency = _probe_url(client, str(health.probe_url), proxy, clock,
                                         requests)
                if health.ip_echo_url is not None:
                    egress = _echo(client, route, health, clock, requests)
    except Exception as exc:  # anything else is this route's failure too, named
        failure = exc if isinstance(exc, _Failed) else _Failed(
            2 if latency is not None else 1, "error", f"{type(exc).__name__}: {exc}")
        elapsed = (clock.monotonic() - started) * 1000
        return Probe(ProbeOutcome(False, round(elapsed, 1), failure.phase, failure.error_type,
                                  clean(failure.message, proxy), *egress), requests)
    return Probe(ProbeOutcome(True, None if latency is None else round(latency, 1),
                              egress_ip=egress[0], egress_region=egress[1]), requests)


def _connect(proxy: str, timeout: float, clock: Clock) -> float:
    try:
        host, port = proxy_address(proxy)
    except (httpx.InvalidURL, ValueError) as exc:
        raise _Failed(1, "connect", f"unreadable proxy URL: {type(exc).__name__}") from None
    where = f"proxy {shown_proxy(proxy)}"
    began = clock.monotonic()
    try:
        with socket.create_connection((host, port), timeout):
            pass
    except TimeoutError:
        raise _Failed(1, TIMEOUT, f"{where}: no TCP connection within {timeout:g}s") from None
    except OSError as exc:
        raise _Failed(1, "connect", f"{where}: {exc.strerror or exc}") from None
    return (clock.monotonic() - began) * 1000


def _probe_url(client: httpx.Client, url: str, proxy: str, clock: Clock,
               requests: list[Request]) -> float:
    began = clock.monotonic()
    response = _get(client, url, 2, proxy, clock, requests)
    if response.status_code == 407:
        raise _Failed(2, "proxy_auth", "the proxy refused its credentials (HTTP 407)")
    if not 200 <= response.status_code < 300:
        raise _Failed(2, "status", f"probe URL {redacted_url(httpx.URL(url))} answered HTTP "
                      f"{response.status_code}")
    return (clock.monotonic() - began) * 1000


def _echo(client: httpx.Client, route: LeasedResource, health: PoolHealth, clock: Clock,
          requests: list[Request]) -> tuple[str | None, str | None]:
    url = str(health.ip_echo_url)
    began = clock.monotonic()
    status: int | None = None
    error: str | None = None
    try:
        ip, country = egress_of(client, url, ip_key=health.ip_key,
                                country_key=health.country_key)
        status = 200
    except EchoError as exc:
        error = str(exc)
        raise _Failed(3, "echo", error) from None
    except httpx.HTTPError as exc:
        error = clean(f"{type(exc).__name__}: {exc}", route.proxy)
        raise _translate(exc, 3, route.proxy or "") from None
    finally:
        requests.append(_record(url, status, error, began, clock))
    mismatch = region_mismatch(route, country)
    if mismatch is not None:
        raise _Failed(3, "region_mismatch", f"{mismatch} (egress {ip})")
    return ip, country


def _get(client: httpx.Client, url: str, phase: int, proxy: str, clock: Clock,
         requests: list[Request]) -> httpx.Response:
    began = clock.monotonic()
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        requests.append(_record(url, None, clean(f"{type(exc).__name__}: {exc}", proxy),
                                began, clock))
        raise _translate(exc, phase, proxy) from None
    requests.append(_record(url, response.status_code, None, began, clock))
    return response


def _translate(exc: httpx.HTTPError, phase: int, proxy: str) -> _Failed:
    text = clean(str(exc), proxy)
    if isinstance(exc, httpx.TimeoutException):
        return _Failed(phase, TIMEOUT, f"no answer in time through the proxy "
                                       f"({type(exc).__name__})")
    if isinstance(exc, httpx.ProxyError):
        if "407" in text or "username/password" in text.lower():  # HTTP, SOCKS5 auth
            return _Failed(phase, "proxy_auth", f"the proxy refused its credentials: {text}")
        return _Failed(phase, "tunnel", f"the proxy refused the tunnel: {text}")
    if isinstance(exc, httpx.ConnectError):
        return _Failed(phase, "connect", f"cannot connect to the proxy: {text}")
    return _Failed(phase, "tunnel", f"{type(exc).__name__}: {text}")


def _record(url: str, status: int | None, error: str | None, began: float, clock: Clock
            ) -> Request:
    parsed = httpx.URL(url)
    return Request("GET", redacted_url(parsed), parsed.host, parsed.port, status,
                   round((clock.monotonic() - began) * 1000), error)
