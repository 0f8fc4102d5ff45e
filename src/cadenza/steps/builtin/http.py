"""``http``: one HTTP request, to a URL or to a path of an ``http`` connection.

How a run goes (the user's view is in ``docs/steps.md``):

* target: ``url`` (always under the strict egress policy: no private address), or the
  connection's ``base_url`` joined with ``path`` (staying on that origin, no ``..``),
  under the connection's policy (``allow_private``) or to its in-process ``app``; the
  step's ``query`` is appended to the query string the URL or the path already has;
* route (docs/pools.md): when the run holds a route (``ctx.route(via)``; ``via = POOL`` asks for
  one of that pool, and without one the step refuses to go direct), the request goes
  through its HTTP or SOCKS5 proxy (:mod:`cadenza.resources.egress`); the egress policy
  still judges the target; the proxy's failures (refused, 407, tunnel, died mid-request)
  raise :class:`ResourceFault` naming the route; its credentials appear nowhere; with
  ``check_egress`` on the pool's health table, the route's egress region is asked of the
  pool's ``ip_echo_url`` first and a mismatch is a :class:`ResourceFault` too;
* headers: the connection's, then the step's; POST, PUT, PATCH and DELETE carry an
  ``Idempotency-Key`` (``idempotency_key``, else ``${run.id}:${step}``); a line break,
  NUL or non-ASCII character in a header value refuses the step before anything is sent;
* one deadline for the whole exchange (every hop and the body): the step's remaining time,
  capped by the connection's ``timeout``;
* redirects are followed (at most 10; a 3xx listed in ``expect`` is not), each hop checked
  by the egress policy, secret-looking headers dropped when the origin changes; every hop
  writes an HTTP_REQUEST event (method, host, status, latency_ms, route);
* the body is read with a bound on decoded bytes (64 KiB, or 10 MiB for JSON);
* exactly once (docs/exactly-once.md): a POST, PUT, PATCH or DELETE runs inside
  ``ctx.once("http:" + KEY)`` where KEY is the Idempotency-Key it sends; once a request
  succeeded (its status in ``expect``) and was recorded, a retried or resumed step returns
  the recorded output and sends nothing. A failed request records nothing;
* cancel: the exchange runs in a helper thread while the step watches ``ctx.cancelled()``
  every :data:`CANCEL_POLL` seconds; when it becomes true the step stops at once (the
  client is closed and the helper thread, still blocked on the socket, is abandoned).

Output: ``status``, ``elapsed_ms``, ``url`` (redacted), ``headers`` (lower-case names,
secret-looking values masked), ``preview`` (text, at most 64 KiB), ``json`` (the decoded
body when it is JSON within 10 MiB, else None) and ``truncated`` (the preview is partial).
"""

from __future__ import annotations

import codecs
import json
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Annotated, Any, Literal
from urllib.parse import unquote

import httpx
from pydantic import Field, JsonValue, model_validator

from cadenza import __version__
from cadenza.audit import REDACTED, Redactor, is_secret_key
from cadenza.clock import Clock, SystemClock
from cadenza.config.labels import ADVANCED
from cadenza.config.schema_settings import HttpConnection
from cadenza.config.types import HeaderMap, HttpUrl, JsonMap, Ref, StatusPatterns, fail
from cadenza.domain.errors import Deferred, Fatal, ResourceFault, Retryable, StepError
from cadenza.domain.texts import cut_before_redaction
from cadenza.netguard import (
    ALLOWED_SCHEMES,
    EgressPolicy,
    EgressRefused,
    PublicPolicy,
    Resolver,
    default_is_public,
    guarded_client,
    read_body,
    redacted_url,
    system_resolver,
)
from cadenza.resources.egress import (
    EchoError,
    check_scheme,
    clean,
    egress_of,
    proxy_transport,
    region_mismatch,
    routed_client,
    routed_errors,
)
from cadenza.resources.leased import LeasedResource
from cadenza.steps.base import RUN_TUNABLE, StepConfig
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult, clock_of

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

PREVIEW_CAP = 64 * 1024
JSON_CAP = 10 * 1024 * 1024
MAX_REDIRECTS = 10
IN_PROCESS = "in-process"
USER_AGENT = f"cadenza/{__version__}"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
RETRYABLE_STATUSES = frozenset({408, 502, 503, 504})
DEFAULT_RETRY_AFTER = timedelta(seconds=60)
MAX_RETRY_AFTER = timedelta(days=1)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_MAX_HEADERS, _MAX_HEADER_VALUE, _EXCERPT = 64, 1024, 200
_SYSTEM_CLOCK = SystemClock()
CANCEL_POLL = 0.05
"""How often a step waiting for its HTTP exchange checks ``ctx.cancelled()``."""


class HttpConfig(StepConfig):
    """``url``, or ``connection`` (type http) plus an optional ``path`` starting with "/";
    ``json`` or ``body`` (not both); ``expect`` lists the accepted statuses (``"2xx"``,
    ``204``...); ``via`` names a route pool (default: the run's leased route)."""

    url: HttpUrl | None = Field(None, description=(
        "The address to call, e.g. https://api.example.com/v1/export; or a connection."))
    connection: Annotated[str | None, Ref("connection", "http")] = Field(None, description=(
        "An http connection of cadenza.toml (its base URL and credentials), instead of a URL."))
    path: str | None = Field(None, description=(
        "Added to the connection's base URL, starting with /, e.g. /v1/export."))
    method: Method = Field("GET", description="The HTTP method.")
    headers: HeaderMap = Field(default_factory=dict, description=(
        "Extra request headers, one per line, e.g. Accept = \"text/csv\"."))
    query: JsonMap = Field(default_factory=dict, title="Query string", description=(
        "Parameters added to the URL, one per line, e.g. month = \"${params.period}\"."))
    json_: JsonValue = Field(None, alias="json", title="JSON body", description=(
        "A value sent as JSON, e.g. { id = 3 }; or a body, not both."))
    body: str | None = Field(None, description="Text sent as the request body.")
    expect: StatusPatterns = Field(default_factory=lambda: ["2xx"], title="Accepted statuses",
                                   json_schema_extra=ADVANCED | RUN_TUNABLE, description=(
        "The HTTP statuses that count as success, e.g. 2xx or 204 (default: 2xx)."))
    via: Annotated[str | None, Ref("pool", "route")] = Field(None, title="Route pool",
                                                            json_schema_extra=ADVANCED,
                                                            description=(
        "A route pool to send the request through (default: the run's leased route)."))
    idempotency_key: str | None = Field(None, json_schema_extra=ADVANCED, description=(
        "Sent as the Idempotency-Key header, so a retry is not done twice by the server, "
        "e.g. ${run.id}-${step.name}."))

    @model_validator(mode="after")
    def _target(self) -> HttpConfig:
        if (self.url is None) == (self.connection is None):
            fail("expected exactly one of 'url' or 'connection' (with 'path')")
        if self.path is not None:
            if self.connection is None:
                fail("'path' is used only with 'connection'; with 'url', put the path in it")
            if not self.path.startswith("/") or "://" in self.path:
                fail(f"expected a path starting with '/' (relative to the connection's "
                     f"base_url), got {self.path!r}")
        if self.json_ is not None and self.body is not None:
            fail("expected either 'json' or 'body', not both")
        return self


@dataclass
class _Target:
    url: httpx.URL
    client: httpx.Client
    owned: bool  # made by the step, closed by it; a ctx.connection() client is the ctx's
    budget: float
    route: str | None
    base_headers: Mapping[str, str]
    leased: LeasedResource | None = None  # the route sent through, if any


class HttpStep(StepType):
    """Call an HTTP endpoint (docs/steps.md). ``resolver`` and ``is_public`` replace the defaults
    of a bare ``url``'s egress policy (tests); time is read from ``ctx.clock``, or from
    ``clock`` when given."""

    name = "http"
    Config = HttpConfig

    def __init__(self, *, resolver: Resolver | None = None, is_public: PublicPolicy | None = None,
                 clock: Clock | None = None) -> None:
        self._policy = EgressPolicy(False, resolver or system_resolver,
                                    is_public or default_is_public)
        self._clock = clock

    def run(self, ctx: StepContext, config: HttpConfig) -> StepResult:
        """Send the request, follow redirects, read the answer; raise the error class
        (docs/retries.md) of any failure."""
        once = getattr(ctx, "once", None)
        if config.method in UNSAFE_METHODS and callable(once):
            key = _operation_key(ctx, config)
            output = once(f"http:{key}", self._call, ctx, config)
            return StepResult(output=output)
        return StepResult(output=self._call(ctx, config))

    def _clock_of(self, ctx: StepContext) -> Clock:
        return self._clock if self._clock is not None else clock_of(ctx)

    def _call(self, ctx: StepContext, config: HttpConfig) -> dict[str, Any]:
        """One request (with its redirects): the step's output, or the error's class."""
        target = self._target(ctx, config)
        clock = self._clock_of(ctx)
        started = clock.monotonic()
        deadline = started + target.budget
        try:
            if target.leased is not None:
                self._check_egress(ctx, target.leased, deadline, clock)
            headers = _request_headers(ctx, config, target.base_headers)
            with _translated(target.url), routed_errors(
                    target.leased, f"{config.method} {redacted_url(target.url)}"):
                request = target.client.build_request(
                    config.method, with_query(target.url, _query(config.query)),
                    headers=headers, json=config.json_, content=None if config.body is None
                    else config.body.encode("utf-8"))

                def exchange() -> tuple[httpx.Response, bool, bytes, bool, bool]:
                    response = self._exchange(ctx, target, request, config.expect, deadline,
                                              clock)
                    try:
                        is_json = _is_json(response)
                        body, truncated, raw = read_body(
                            response, JSON_CAP if is_json else PREVIEW_CAP, deadline,
                            ctx.cancelled, clock)
                    finally:
                        response.close()
                    return response, is_json, body, truncated, raw

                response, is_json, body, truncated, raw = _abortable(
                    ctx, exchange, target.client.close, f"{config.method} "
                    f"{redacted_url(target.url)}")
        finally:
            if target.owned:
                target.client.close()
        self._check_status(response, body, config.expect, clock, target.leased)
        elapsed_ms = round((clock.monotonic() - started) * 1000)
        decoded = _decode_json(body, ctx) if is_json and not raw and not truncated else None
        if is_json and truncated:
            ctx.log.warning("JSON answer larger than %s bytes: not decoded", JSON_CAP)
        ctx.log.info("%s %s: %s in %s ms", config.method, redacted_url(response.request.url),
                     response.status_code, elapsed_ms)
        return {
            "status": response.status_code, "elapsed_ms": elapsed_ms,
            "url": redacted_url(response.request.url), "headers": _headers_out(response),
            "preview": _text(body[:PREVIEW_CAP], response, cut=len(body) > PREVIEW_CAP),
            "json": decoded, "truncated": truncated or len(body) > PREVIEW_CAP,
        }

    def _target(self, ctx: StepContext, config: HttpConfig) -> _Target:
        """Where the request goes and the client that sends it: through the run's route
        (:func:`route_of`) when there is one (an in-process ``app`` connection never leaves
        the process)."""
        route = route_of(ctx, config.via)
        remaining = ctx.remaining()
        if config.url is not None:
            if route is not None:
                return _Target(_parse_url(config.url), routed_client(self._policy, route),
                               True, remaining, route.resource_id, {}, route)
            return _Target(_parse_url(config.url), guarded_client(self._policy), True,
                           remaining, None, {})
        name = config.connection or ""
        definition = ctx.settings.connections.get(name)
        if not isinstance(definition, HttpConnection):
            raise Fatal(f"connection {name!r} is not an http connection of cadenza.toml")
        url = _join(definition.base_url, config.path)
        for header, value in definition.headers.items():
            _check_header(header, value, f"connection {name!r}: ")
        if route is not None and definition.app is None:
            policy = EgressPolicy(definition.allow_private, self._policy.resolver,
                                  self._policy.is_public)
            budget = min(remaining, definition.timeout.total_seconds())
            routed = routed_client(policy, route, verify=definition.verify_tls,
                                   headers=dict(definition.headers), timeout=budget)
            return _Target(url, routed, True, budget, route.resource_id, definition.headers,
                           route)
        client = ctx.connection(name)
        if not isinstance(client, httpx.Client):
            raise Fatal(f"connection {name!r} did not give an HTTP client")
        return _Target(url, client, False, min(remaining, definition.timeout.total_seconds()),
                       IN_PROCESS if definition.app else None, definition.headers)

    def _check_egress(self, ctx: StepContext, route: LeasedResource, deadline: float,
                      clock: Clock) -> None:
        """With ``check_egress`` on the route's pool: the egress region, asked of the pool's
        ``ip_echo_url`` through the route, must be the route's ``region``
        (:class:`ResourceFault` otherwise). The echo URL is the operator's: not judged by
        the egress policy, and sent none of the step's headers."""
        pool = ctx.settings.pools.get(route.pool)
        health = None if pool is None else pool.health
        if health is None or not health.check_egress or health.ip_echo_url is None \
                or route.region is None:
            return
        url = httpx.URL(str(health.ip_echo_url))
        budget = min(deadline - clock.monotonic(), health.timeout.total_seconds())
        began = clock.monotonic()
        status: int | None = None
        problem: str | None = None
        seen: tuple[str, str | None] | None = None
        try:
            with _translated(url), routed_errors(route, f"egress check {redacted_url(url)}"), \
                    httpx.Client(transport=proxy_transport(check_scheme(route)),
                                 trust_env=False, timeout=max(budget, 0.1)) as client:
                seen = egress_of(client, str(url), ip_key=health.ip_key,
                                 country_key=health.country_key)
                status = 200
        except EchoError as exc:
            problem = str(exc)
            raise Retryable(f"egress check of route {route.resource_id}: {exc}") from None
        except StepError as exc:
            problem = clean(str(exc), route.proxy)
            raise
        finally:
            ctx.event("HTTP_REQUEST", f"GET {url.host}: {status or problem} (egress check)", {
                "method": "GET", "host": url.host, "port": url.port, "status": status,
                "latency_ms": round((clock.monotonic() - began) * 1000),
                "route": route.resource_id, "pool": route.pool, "url": redacted_url(url),
                "hop": 0, "error": problem, "purpose": "egress check",
            }, level="INFO" if problem is None else "WARNING")
        mismatch = region_mismatch(route, seen[1])
        if mismatch is not None:
            raise ResourceFault(f"route {route.resource_id}: {mismatch} (egress {seen[0]}); "
                                f"refusing to send through it", resource_id=route.resource_id)

    def _exchange(self, ctx: StepContext, target: _Target, request: httpx.Request,
                  expect: list[str], deadline: float, clock: Clock) -> httpx.Response:
        for hop in range(MAX_REDIRECTS + 1):
            remaining = deadline - clock.monotonic()
            if remaining <= 0 or ctx.cancelled():
                raise Retryable(f"{request.method} {redacted_url(request.url)}: stopped "
                                f"before hop {hop + 1}: out of time or canceled")
            request.extensions["timeout"] = httpx.Timeout(remaining).as_dict()
            response = self._send(ctx, target, request, hop, clock)
            nxt = response.next_request
            if nxt is None or _matches(response.status_code, expect):
                return response
            response.close()
            if hop == MAX_REDIRECTS:
                break
            if _origin(nxt.url) != _origin(request.url):
                for name in [n for n in nxt.headers if is_secret_key(n)]:
                    del nxt.headers[name]
            request = nxt
        raise Fatal(f"{redacted_url(target.url)}: more than {MAX_REDIRECTS} redirects")

    def _send(self, ctx: StepContext, target: _Target, request: httpx.Request,
              hop: int, clock: Clock) -> httpx.Response:
        started = clock.monotonic()
        status: int | None = None
        problem: str | None = None
        try:
            response = target.client.send(request, stream=True, follow_redirects=False)
            status = response.status_code
            return response
        except EgressRefused as exc:
            problem = f"refused: {exc}"
            raise
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            raise
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
            if target.route != IN_PROCESS:
                raise
            raise Fatal(f"the in-process HTTP app failed: {problem}") from exc
        finally:
            latency_ms = round((clock.monotonic() - started) * 1000)
            host = request.url.host
            if problem is not None and target.leased is not None:
                problem = clean(problem, target.leased.proxy)
            ctx.event("HTTP_REQUEST", f"{request.method} {host}: {status or problem}", {
                "method": request.method, "host": host, "port": request.url.port,
                "status": status, "latency_ms": latency_ms, "route": target.route,
                "pool": None if target.leased is None else target.leased.pool,
                "url": redacted_url(request.url), "hop": hop, "error": problem,
            }, level="INFO" if problem is None else "WARNING")

    def _check_status(self, response: httpx.Response, body: bytes, expect: list[str],
                      clock: Clock | None = None, route: LeasedResource | None = None
                      ) -> None:
        status = response.status_code
        if _matches(status, expect):
            return
        where = f"{response.request.method} {redacted_url(response.request.url)}: HTTP " \
                f"{status} {response.reason_phrase}".rstrip()
        if status == 429:
            now = (clock or self._clock or _SYSTEM_CLOCK).now()
            until = retry_after(response.headers.get("retry-after"), now)
            raise Deferred(until, f"{where}; retry after {until.isoformat()}")
        if status in RETRYABLE_STATUSES:
            raise Retryable(where)
        if status == 407:
            raise ResourceFault(f"{where} (the proxy refused its credentials)", resource_id=(
                None if route is None else route.resource_id))
        text = " ".join(_text(body[:PREVIEW_CAP], response, cut=True).split())
        excerpt = Redactor().redact_text(cut_before_redaction(text, _EXCERPT, ""))
        raise Fatal(f"{where}, expected {' or '.join(expect)}" + (f": {excerpt}" if excerpt
                                                                 else ""))


def route_of(ctx: StepContext, via: str | None) -> LeasedResource | None:
    """The route this step sends through: ``ctx.route(via)`` (a route of pool ``via``, or
    without ``via`` any route the run holds). :class:`Fatal` when ``via`` names a pool and
    no route of it is held: the step never goes direct instead."""
    getter = getattr(ctx, "route", None)
    route = getter(via) if callable(getter) else None
    if route is not None and not isinstance(route, LeasedResource):
        raise Fatal(f"the run's route is not a leased resource: {type(route).__name__}")
    if via is not None and route is None:
        raise Fatal(f"'via' ({via!r}): the run holds no route of pool {via!r}; refusing to "
                    f"go direct")
    return route


def _abortable(ctx: StepContext, fn: Any, abort: Any, what: str) -> Any:
    """``fn()`` in a helper thread, watched: when ``ctx.cancelled()`` becomes true, call
    ``abort()`` and stop waiting (a socket read blocked in the helper cannot be
    interrupted portably; it ends at its own timeout, its result unused). Canceled:
    :class:`Fatal`; out of time: :class:`Retryable`."""
    done = threading.Event()
    outcome: list[Any] = [None, None]

    def body() -> None:
        try:
            outcome[0] = fn()
        except BaseException as exc:  # handed to the step's thread
            outcome[1] = exc
        finally:
            done.set()

    threading.Thread(target=body, name="cadenza-http", daemon=True).start()
    while not done.wait(CANCEL_POLL):
        if ctx.cancelled():
            try:
                abort()
            except Exception:  # the step stops anyway; closing is best effort
                pass
            if ctx.remaining() <= 0:
                raise Retryable(f"{what}: step timeout: the request was aborted")
            raise Fatal(f"{what}: step canceled: the request was aborted")
    if outcome[1] is not None:
        raise outcome[1]
    return outcome[0]


def _operation_key(ctx: StepContext, config: HttpConfig) -> str:
    """The Idempotency-Key a POST/PUT/PATCH/DELETE sends: ``idempotency_key``, else an
    ``Idempotency-Key`` header of the step, else ``${run.id}:${step}``."""
    if config.idempotency_key is not None:
        return config.idempotency_key
    for name, value in config.headers.items():
        if name.lower() == "idempotency-key":
            return value
    return f"{ctx.run.id}:{ctx.step.name}"


# --- errors (docs/retries.md): every httpx failure is translated here ----------------------

@contextmanager
def _translated(url: httpx.URL) -> Iterator[None]:
    where = redacted_url(url)
    try:
        yield
    except StepError:
        raise
    except httpx.ProxyError as exc:
        raise ResourceFault(f"{where}: proxy error: {exc}") from exc
    except httpx.TimeoutException as exc:
        raise Retryable(f"{where}: timed out ({type(exc).__name__})") from exc
    except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as exc:
        raise Fatal(f"{where}: cannot send this request: {exc}") from exc
    except httpx.TransportError as exc:
        raise Retryable(f"{where}: {type(exc).__name__}: {exc}") from exc
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
        raise Fatal(f"{where}: {type(exc).__name__}: {exc}") from exc


def retry_after(value: str | None, now: datetime) -> datetime:
    """When a ``Retry-After`` header (seconds or an HTTP date) allows the next try; 60 s
    when it is missing or unreadable, at most one day ahead, never in the past."""
    delay = DEFAULT_RETRY_AFTER
    text = (value or "").strip()
    if text.isdigit():
        delay = timedelta(seconds=min(int(text), MAX_RETRY_AFTER.total_seconds()))
    elif text:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            when = None
        if when is not None:
            delay = (when.replace(tzinfo=now.tzinfo) if when.tzinfo is None else when) - now
    return now + max(timedelta(0), min(delay, MAX_RETRY_AFTER))


# --- the request -----------------------------------------------------------------------------

def _parse_url(text: str) -> httpx.URL:
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise Fatal(f"invalid URL: {exc}") from exc
    if url.scheme not in ALLOWED_SCHEMES or not url.host:
        raise EgressRefused(f"refused {redacted_url(url)}: expected an http(s) URL with a host")
    return url


def _join(base_url: str, path: str | None) -> httpx.URL:
    """``base_url`` + ``path``, refused unless it stays on the base's origin, without
    ``..`` (also percent-encoded) or control characters."""
    base = _parse_url(base_url)
    if not path:
        return base
    route = path.split("?", 1)[0].split("#", 1)[0]
    if (not path.startswith("/") or path.startswith("//") or "\\" in path
            or any(ord(c) < 32 for c in path)
            or any(unquote(seg) in (".", "..") for seg in route.split("/"))):
        raise Fatal(f"path {path!r}: expected '/...' without '..', '//' or control characters")
    joined = _parse_url(str(base.copy_with(query=None, fragment=None)).rstrip("/") + path)
    if _origin(joined) != _origin(base):
        raise Fatal(f"path {path!r} leaves the connection's base_url")
    return joined


def _request_headers(ctx: StepContext, config: HttpConfig,
                     base: Mapping[str, str]) -> dict[str, str]:
    headers = dict(config.headers)
    key = config.idempotency_key
    named = {n.lower() for n in (*headers, *base)}
    if key is None and config.method in UNSAFE_METHODS and "idempotency-key" not in named:
        key = f"{ctx.run.id}:{ctx.step.name}"
    if key is not None:
        headers = {n: v for n, v in headers.items() if n.lower() != "idempotency-key"}
        headers["Idempotency-Key"] = key
    for name, value in headers.items():
        _check_header(name, value)
    if "user-agent" not in named:
        headers["User-Agent"] = USER_AGENT
    if "accept-encoding" not in named:
        headers["Accept-Encoding"] = "gzip, deflate"  # what read_body decodes with a bound
    return headers


def _check_header(name: str, value: str, where: str = "") -> None:
    """:class:`Fatal` for a header that cannot be sent as it is, naming the header and never
    showing its value (it may be a secret)."""
    if not _HEADER_NAME.fullmatch(name) or any(c in value for c in "\r\n\x00"):
        raise Fatal(f"{where}header {name!r}: names are letters, digits and -, values have no "
                    f"line break or NUL (refused before sending)")
    if not value.isascii():
        raise Fatal(f"{where}header {name!r}: the value holds a non-ASCII character; HTTP "
                    f"header values are ASCII (percent-encode or base64 it; refused before "
                    f"sending)")


def with_query(url: httpx.URL, items: list[tuple[str, str | int | float | bool | None]]
               ) -> httpx.URL:
    """``url`` with ``items`` appended to the query string it already has (kept as written:
    order and repeated names as in the URL, then the step's ``query``)."""
    if not items:
        return url
    added = str(httpx.QueryParams(items)).encode("ascii")
    return url.copy_with(query=url.query + b"&" + added if url.query else added)


def _query(query: Mapping[str, JsonValue]) -> list[tuple[str, str | int | float | bool | None]]:
    """Each value as text (``true``/``false`` for booleans); a list repeats the key; a
    table is sent as compact JSON; None leaves the key out."""
    items: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in query.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str | int | float):  # bool is an int: httpx sends "true"
                items.append((key, item))
            elif item is not None:
                items.append((key, json.dumps(item, separators=(",", ":"))))
    return items


def _origin(url: httpx.URL) -> tuple[str, bytes, int | None]:
    return url.scheme, url.raw_host, url.port


def _matches(status: int, expect: list[str]) -> bool:
    text = str(status)
    return any(p == text or (p.endswith("xx") and p[0] == text[0]) for p in expect)


# --- the answer ------------------------------------------------------------------------------

def _is_json(response: httpx.Response) -> bool:
    kind = str(response.headers.get("content-type", "")).split(";", 1)[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _decode_json(body: bytes, ctx: StepContext) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(body, parse_constant=refuse)
    except (ValueError, RecursionError) as exc:
        ctx.log.warning("the answer says JSON but cannot be decoded: %s",
                        cut_before_redaction(str(exc), 200))
        return None


def _text(data: bytes, response: httpx.Response, *, cut: bool) -> str:
    charset = response.charset_encoding or "utf-8"
    try:
        decoder = codecs.getincrementaldecoder(charset)(errors="replace")
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return str(decoder.decode(data, final=not cut))


def _headers_out(response: httpx.Response) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in list(response.headers.keys())[:_MAX_HEADERS]:
        value = ", ".join(response.headers.get_list(name))
        out[name] = (REDACTED if is_secret_key(name)
                     else cut_before_redaction(value, _MAX_HEADER_VALUE, ""))
    return out
