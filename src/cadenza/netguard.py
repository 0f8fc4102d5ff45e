"""Network safety for HTTP: which addresses a request may reach (docs/steps.md "http"), and answers
read with a bound.

Cadenza refuses, unless a connection says ``allow_private = true``, every target that is
not a public unicast address: loopback, link-local (169.254.169.254, the cloud metadata
endpoint, included), private, unique-local, site-local, shared (CGNAT), multicast,
unspecified (``0.0.0.0``) and reserved addresses. The check runs on the address a
request will really connect to:

* IP literals in every form ``inet_aton`` accepts (``2130706433``, ``0x7f.1``,
  ``017700000001``, ``127.1``) are normalised first; IPv6 addresses that embed an IPv4
  one (``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by
  the embedded address;
* names are resolved once (``socket.getaddrinfo``, injectable) and refused when *any*
  of their addresses is refused;
* :class:`GuardedTransport` checks every request it sends, so every redirect hop is
  checked, and then connects to the address it checked (DNS pinning): the URL's host is
  replaced by that address while the ``Host`` header and the TLS server name (SNI and
  certificate check) stay the original name. A DNS answer that changes between the check
  and the connection (rebinding) therefore cannot redirect the connection;
* only ``http`` and ``https`` are allowed; user-info (``http://public@127.0.0.1/``) plays
  no part, the host judged is the one httpx connects to.

A refused target raises :class:`EgressRefused`, a :class:`~cadenza.domain.errors.Fatal`.

Inbound, :func:`read_body` reads an answer as a stream and stops at a bound on *decoded*
bytes (:class:`BoundedDecoder` inflates gzip/deflate no further than asked), so that a
huge, endless or gzip-bomb answer costs no more memory than the bound; it also stops at
the exchange's deadline. :func:`redacted_url` is how URLs are shown (no user-info,
secret-looking query values masked).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode

import httpx

from cadenza.audit import REDACTED, is_secret_key
from cadenza.clock import Clock, SystemClock
from cadenza.domain.errors import Fatal, Retryable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``resolver(host, port)`` returns the host's addresses as strings, in connection order.
Resolver = Callable[[str, int], Sequence[str]]
#: ``is_public(address)`` says whether a request may reach ``address``.
PublicPolicy = Callable[[Address], bool]

ALLOWED_SCHEMES = ("http", "https")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")
_LEGACY_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")
_CHECKS: tuple[tuple[str, str], ...] = (
    ("is_unspecified", "an unspecified address"),
    ("is_loopback", "a loopback address"),
    ("is_link_local", "a link-local address"),
    ("is_multicast", "a multicast address"),
    ("is_reserved", "a reserved address"),
    ("is_private", "a private address"),
)


class EgressRefused(Fatal):
    """The request's target is not allowed by the egress policy."""


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` from the operating system's resolver, without repeats."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        text = str(info[4][0])
        if text not in seen:
            seen.append(text)
    return seen


def legacy_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """``text`` read as ``inet_aton`` reads it (1 to 4 parts, each decimal, ``0``-octal
    or ``0x``-hex, the last part filling the remaining bytes), or None when it is not an
    IPv4 address in any of these forms."""
    parts = text.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # a trailing dot: "127.0.0.1."
    if not 1 <= len(parts) <= 4 or not all(_LEGACY_PART.fullmatch(p) for p in parts):
        return None
    values = []
    for part in parts:
        if part[:2].lower() == "0x":
            values.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for value in head:
        number = number * 256 + value
    return ipaddress.IPv4Address((number << (8 * (4 - len(head)))) | last)


def literal_address(host: str) -> Address | None:
    """The address ``host`` (a URL's host, without brackets) spells, or None for a name."""
    text = unquote(host).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return legacy_ipv4(text)


def refusal_reason(address: Address) -> str | None:
    """Why ``address`` is not a public unicast address, or None when it is one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            inner = refusal_reason(embedded)
            return f"{inner} (embedded in {address})" if inner else None
        if address in _UNIQUE_LOCAL:
            return "a unique-local address"
        if address.is_site_local:
            return "a site-local address"
    for attribute, label in _CHECKS:
        if getattr(address, attribute):
            return label
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if not address.is_global:
        return "not a globally routable address"
    return None


def default_is_public(address: Address) -> bool:
    """The standard rule: only public unicast addresses."""
    return refusal_reason(address) is None


@dataclass(frozen=True)
class EgressPolicy:
    """Which targets requests may reach. ``allow_private`` lifts the address rule (the
    scheme rule stays); ``resolver`` and ``is_public`` are injectable for tests."""

    allow_private: bool = False
    resolver: Resolver = system_resolver
    is_public: PublicPolicy = default_is_public

    def check(self, url: httpx.URL) -> list[Address]:
        """The addresses a request to ``url`` may connect to, in order (empty when the
        policy allows every address, and the name is then resolved when connecting).
        Raises :class:`EgressRefused`, or ``httpx.ConnectError`` when the name does
        not resolve."""
        if url.scheme not in ALLOWED_SCHEMES:
            raise EgressRefused(f"refused {url.scheme or '(no scheme)'}:// URL: only http "
                                f"and https are allowed")
        host = url.raw_host.decode("ascii", "replace")
        if not host:
            raise EgressRefused("refused a URL without a host")
        if self.allow_private:
            return []
        literal = literal_address(host)
        addresses = [literal] if literal is not None else self._resolve(host, url)
        for address in addresses:
            if not self.is_public(address):
                reason = refusal_reason(address) or "not allowed by the egress policy"
                shown = host if literal is not None else f"{host} ({address})"
                raise EgressRefused(
                    f"refused {shown}: {reason}; set allow_private = true on an http "
                    f"connection to reach such addresses")
        return addresses

    def _resolve(self, host: str, url: httpx.URL) -> list[Address]:
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            answers = self.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpx.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        addresses: list[Address] = []
        for answer in answers:
            address = literal_address(answer)
            if address is None:
                raise EgressRefused(f"refused {host}: the resolver answered {answer!r}, "
                                    f"which is not an address")
            addresses.append(address)
        if not addresses:
            raise httpx.ConnectError(f"cannot resolve {host!r}: no address")
        return addresses


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that checks every request with an :class:`EgressPolicy` and
    connects to the checked address (DNS pinning), trying the addresses in order when
    one refuses the connection. One inner transport (and connection pool) per original
    host, so that a pooled connection is never reused under another name."""

    def __init__(self, policy: EgressPolicy, *, verify: bool = True,
                 factory: Callable[[], httpx.BaseTransport] | None = None) -> None:
        self.policy = policy
        self._factory = factory or (lambda: httpx.HTTPTransport(verify=verify, retries=0))
        self._inner: dict[str, httpx.BaseTransport] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        addresses = self.policy.check(request.url)
        inner = self._transport(request.url)
        if not addresses:
            return inner.handle_request(request)
        failure: httpx.ConnectError | None = None
        for address in addresses:
            try:
                return inner.handle_request(pinned(request, address))
            except httpx.ConnectError as exc:  # nothing was sent: the next address is safe
                failure = exc
        assert failure is not None
        raise failure

    def _transport(self, url: httpx.URL) -> httpx.BaseTransport:
        key = f"{url.scheme}://{url.raw_host.decode('ascii', 'replace')}:{url.port}"
        if key not in self._inner:
            self._inner[key] = self._factory()
        return self._inner[key]

    def close(self) -> None:
        inner, self._inner = list(self._inner.values()), {}
        for transport in inner:
            transport.close()


def pinned(request: httpx.Request, address: Address) -> httpx.Request:
    """``request`` sent to ``address``: same method, path, headers (``Host`` kept) and
    body; for https by name, the TLS server name stays the original host."""
    extensions = dict(request.extensions)
    host = request.url.raw_host.decode("ascii", "replace")
    if request.url.scheme == "https" and literal_address(host) is None:
        extensions["sni_hostname"] = host
    ip = address.compressed if isinstance(address, ipaddress.IPv4Address) \
        else str(address).split("%", 1)[0]
    return httpx.Request(request.method, request.url.copy_with(host=ip),
                         headers=request.headers, stream=request.stream, extensions=extensions)


def guarded_client(policy: EgressPolicy, *, verify: bool = True, **kwargs: object) -> httpx.Client:
    """An httpx Client whose every request goes through a :class:`GuardedTransport`;
    environment proxies and ``.netrc`` are ignored (egress goes only where configured)."""
    transport = GuardedTransport(policy, verify=verify)
    return httpx.Client(transport=transport, trust_env=False, **kwargs)  # type: ignore[arg-type]


# --- inbound: answers read with a bound -------------------------------------------------

def redacted_url(url: httpx.URL) -> str:
    """``url`` without user-info, secret-looking query values masked."""
    if url.userinfo:
        url = url.copy_with(userinfo=b"")
    items = url.params.multi_items()
    if any(is_secret_key(k) for k, _ in items):
        masked = [(k, REDACTED if is_secret_key(k) else v) for k, v in items]
        url = url.copy_with(query=urlencode(masked, safe="*").encode("ascii"))
    return str(url)


class BoundedDecoder:
    """``Content-Encoding`` decoding that never produces more than asked (gzip bombs).
    Encodings other than gzip and deflate are kept as they came (``raw``)."""

    def __init__(self, header: str | None) -> None:
        codings = [c.strip().lower() for c in (header or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        self.gzip = codings in (["gzip"], ["x-gzip"])
        self.raw = bool(codings) and not self.gzip and codings != ["deflate"]
        self._z: Any = zlib.decompressobj(16 + zlib.MAX_WBITS) if self.gzip else None
        self._pending: bytes | None = b"" if codings == ["deflate"] else None

    def decode(self, data: bytes, limit: int) -> bytes:
        if self._pending is not None:  # deflate: wait for two bytes to see the zlib header
            data, self._pending = self._pending + data, None
            if len(data) < 2:
                self._pending = data
                return b""
            wrapped = data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._z = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        if self._z is None:
            return data[:limit]
        try:
            out = bytes(self._z.decompress(data, limit))
            while self.gzip and self._z.eof and self._z.unused_data and len(out) < limit:
                rest, self._z = self._z.unused_data, zlib.decompressobj(16 + zlib.MAX_WBITS)
                out += self._z.decompress(rest, limit - len(out))
            return out
        except zlib.error as exc:
            raise Fatal(f"the answer's body cannot be decoded: {exc}") from exc


def read_body(response: httpx.Response, cap: int, deadline: float,
              cancelled: Callable[[], bool],
              clock: Clock | None = None) -> tuple[bytes, bool, bool]:
    """At most ``cap`` decoded bytes of the body, whether there was more, and whether the
    body was kept in an encoding this step cannot decode; stops (:class:`Retryable`) past
    ``deadline`` on ``clock``'s monotonic time (default: the system clock) or once
    ``cancelled()``."""
    clock = clock if clock is not None else SystemClock()
    if response.is_stream_consumed:  # read already, decoded (a transport answering from memory)
        return response.content[:cap], len(response.content) > cap, False
    decoder = BoundedDecoder(response.headers.get("content-encoding"))
    chunks: list[bytes] = []
    size = 0
    for raw in response.iter_raw():
        out = decoder.decode(raw, cap + 1 - size)
        chunks.append(out)
        size += len(out)
        if size > cap:
            break
        if clock.monotonic() > deadline or cancelled():
            raise Retryable(f"{redacted_url(response.request.url)}: stopped reading the "
                            f"answer: out of time or canceled")
    return b"".join(chunks)[:cap], size > cap, decoder.raw
