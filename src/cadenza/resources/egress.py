"""Egress through a route: httpx clients that send through a route's proxy, the proxy's
failures as :class:`~cadenza.domain.errors.ResourceFault`, and the egress IP and region.

Used by the ``http`` step (a run's leased route) and by the health checks
(:mod:`cadenza.resources.probe`). HTTP and HTTPS proxies go through httpx's own proxy
support (forwarding for ``http://`` targets, ``CONNECT`` tunnels for ``https://``), SOCKS5
through httpx's SOCKS support (the ``socksio`` package); ``socks5h`` lets the proxy
resolve the name. httpx has no SOCKS4: such a route is refused with a clear message.

The egress policy (:mod:`cadenza.netguard`) still applies to the *target*: every
request (every redirect hop) is checked before it is sent. Through a proxy the request is
sent by name and the proxy resolves it again (httpx cannot keep the TLS server name of a
tunnel to a pinned address); the check refuses a name that resolves here to an address the
policy refuses.

Which failures are the route's (:func:`routed_errors`): the proxy refused the TCP
connection or did not accept it in time; ``CONNECT`` or the SOCKS handshake failed
(httpx ``ProxyError``, which includes a 407 to ``CONNECT``); a 407 answer; and a broken
exchange (read, write or protocol error, read timeout) while the proxy no longer accepts
connections — a proxy that died mid-request. A broken exchange through a proxy that still
answers stays the target's (Retryable).

The proxy URL holds credentials: it is shown only as :func:`shown_proxy` (user-info masked
as ``***``, the one mask of :func:`cadenza.audit.redact.redact_url`), and messages of
httpx's errors are cleaned of it (:func:`clean`).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import re
import socket
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from cadenza.audit.redact import redact_url
from cadenza.domain.errors import Fatal, ResourceFault, StepError
from cadenza.netguard import EgressPolicy, GuardedTransport
from cadenza.resources.leased import LeasedResource

_REGION = re.compile(r"[A-Z0-9_-]{1,16}")
"""A region as an IP echo names it: a country code (``FR``) or a short code of its own."""
SUPPORTED = ("http", "https", "socks5", "socks5h")
"""Proxy schemes httpx can send through."""
DEFAULT_PORTS = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080}
LIVENESS_TIMEOUT = 1.0
"""Seconds :func:`proxy_alive` waits for the proxy to accept a TCP connection."""
SETTLE_SECONDS = 0.2
"""How long a liveness probe's connection must stay open (:func:`proxy_alive`)."""


def shown_proxy(proxy: str) -> str:
    """``proxy`` as it is shown anywhere: its user-info masked by
    :func:`cadenza.audit.redact.redact_url` (``http://user:pw@h:3128`` →
    ``http://***@h:3128``)."""
    return redact_url(proxy)


def proxy_address(proxy: str) -> tuple[str, int]:
    """The host and port a client connects to for ``proxy``."""
    url = httpx.URL(proxy)
    return url.host, url.port or DEFAULT_PORTS.get(url.scheme, 80)


def clean(text: str, proxy: str | None) -> str:
    """``text`` with the proxy's user-info, user name and password taken out: the proxy's
    URL, and any URL with user-info, shown as :func:`shown_proxy` shows it, the pieces
    quoted apart as ``***``."""
    if not proxy:
        return redact_url(text)
    text = redact_url(text.replace(proxy, shown_proxy(proxy)))
    try:
        url = httpx.URL(proxy)
    except httpx.InvalidURL:
        return text
    for secret in sorted({proxy, url.userinfo.decode("ascii", "replace"), url.username,
                          url.password or ""}, key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def check_scheme(route: LeasedResource) -> str:
    """The route's proxy URL; :class:`Fatal` when it has none or httpx cannot use it."""
    if not route.proxy:
        raise Fatal(f"route {route.resource_id} (pool {route.pool}) has no proxy URL")
    scheme = route.proxy.split("://", 1)[0].lower()
    if scheme not in SUPPORTED:
        raise Fatal(f"route {route.resource_id}: proxy scheme {scheme!r} is not supported "
                    f"(use one of {', '.join(SUPPORTED)})")
    return route.proxy


def proxy_transport(proxy: str, *, verify: bool = True) -> httpx.HTTPTransport:
    """An httpx transport that sends every request through ``proxy``, on a new connection
    each time: proxies (tinyproxy among them) close a forwarded exchange's connection
    without saying so, and a reused one then fails as if the route were broken. Verifying
    transports share one TLS context (loading the CA bundle per probe costs more CPU than
    the probe)."""
    return httpx.HTTPTransport(proxy=httpx.Proxy(proxy),
                               verify=_verifying_context() if verify else False, retries=0,
                               limits=httpx.Limits(max_keepalive_connections=0))


@functools.cache
def _verifying_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


class RoutedTransport(GuardedTransport):
    """:class:`GuardedTransport` through a proxy: each request (each redirect hop) is
    checked by the egress policy, then sent by name through the proxy (module doc)."""

    def __init__(self, policy: EgressPolicy, proxy: str, *, verify: bool = True) -> None:
        super().__init__(policy, verify=verify,
                         factory=lambda: proxy_transport(proxy, verify=verify))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.policy.check(request.url)
        return self._transport(request.url).handle_request(request)


def routed_client(policy: EgressPolicy, route: LeasedResource, *, verify: bool = True,
                  **kwargs: Any) -> httpx.Client:
    """An httpx Client sending through ``route``'s proxy, under ``policy`` for the
    targets; environment proxies and ``.netrc`` ignored."""
    transport = RoutedTransport(policy, check_scheme(route), verify=verify)
    return httpx.Client(transport=transport, trust_env=False, **kwargs)


def proxy_alive(proxy: str, timeout: float = LIVENESS_TIMEOUT) -> bool:
    """Whether the proxy accepts a TCP connection within ``timeout`` seconds and keeps it
    open for :data:`SETTLE_SECONDS`. A proxy process being killed still has its listening
    socket for an instant, so a bare connect can succeed; the connection it queued is reset
    when that socket goes, which the short read sees (a live proxy waits for the request)."""
    try:
        host, port = proxy_address(proxy)
        with socket.create_connection((host, port), timeout) as sock:
            sock.settimeout(SETTLE_SECONDS)
            try:
                return sock.recv(1) != b""
            except TimeoutError:
                return True
    except (OSError, httpx.InvalidURL, ValueError):
        return False


_BROKEN = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadTimeout,
           httpx.WriteTimeout, httpx.CloseError)


@contextlib.contextmanager
def routed_errors(route: LeasedResource | None, what: str,
                  alive: Callable[[str], bool] = proxy_alive) -> Iterator[None]:
    """Turn the failures that are ``route``'s into :class:`ResourceFault` naming it (module
    doc); other exceptions pass unchanged. Nothing happens without a route."""
    if route is None or not route.proxy:
        yield
        return
    proxy = route.proxy
    where = f"{what} via route {route.resource_id} ({shown_proxy(proxy)})"
    failure: ResourceFault | None = None
    try:
        yield
    except StepError:
        raise
    except httpx.ProxyError as exc:
        failure = fault(route, f"{where}: the proxy refused the tunnel: "
                               f"{clean(str(exc), proxy)}")
    except httpx.ConnectTimeout:
        failure = fault(route, f"{where}: the proxy did not accept a connection in time")
    except httpx.ConnectError as exc:
        failure = fault(route, f"{where}: cannot connect to the proxy: {clean(str(exc), proxy)}")
    except _BROKEN as exc:
        if alive(proxy):
            raise
        failure = fault(route, f"{where}: the proxy stopped answering during the request "
                               f"({type(exc).__name__}) and no longer accepts connections")
    if failure is not None:
        # Raised outside the handler: the fault does not keep httpx's exception (its
        # traceback holds the proxy's connection, its text may hold the proxy URL).
        raise failure


def fault(route: LeasedResource, message: str) -> ResourceFault:
    """A :class:`ResourceFault` naming ``route``."""
    return ResourceFault(message, resource_id=route.resource_id)


class EchoError(Exception):
    """The IP-echo answer is not what was expected (status, JSON, keys)."""


def egress_of(client: httpx.Client, url: str, *, ip_key: str = "ip",
              country_key: str = "country", timeout: float | None = None
              ) -> tuple[str, str | None]:
    """The egress address and region (upper case, or None when the answer has none) that
    the IP-echo service at ``url`` sees for requests of ``client``. Raises
    :class:`EchoError` for an unusable answer, httpx errors as they come."""
    response = client.get(url, timeout=timeout)
    if response.status_code != 200:
        raise EchoError(f"the IP echo answered HTTP {response.status_code}")
    try:
        data = json.loads(response.content[:65536])
    except ValueError as exc:
        raise EchoError(f"the IP echo's answer is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get(ip_key), str):
        raise EchoError(f"the IP echo's answer has no {ip_key!r} text")
    address = data[ip_key].strip()
    try:
        ipaddress.ip_address(address)
    except ValueError:
        # Never kept nor shown: a broken or hostile echo (or proxy) may answer anything
        # there, such as the Proxy-Authorization it was sent.
        raise EchoError(f"the IP echo's {ip_key!r} is not an IP address") from None
    country = data.get(country_key)
    region = country.strip().upper() if isinstance(country, str) else None
    if region is not None and not _REGION.fullmatch(region):
        raise EchoError(f"the IP echo's {country_key!r} is not a country code")
    return address, region


def region_mismatch(route: LeasedResource, seen: str | None) -> str | None:
    """Why the egress region ``seen`` is not ``route``'s (None when it is, or when the
    route expects none)."""
    if route.region is None:
        return None
    if seen is None:
        return f"egress region unknown, expected {route.region}"
    if seen.upper() != route.region.upper():
        return f"egress region {seen}, expected {route.region}"
    return None
