"""The schema of ``cadenza.toml`` (docs/configuration.md): server, store, workers, limits, files,
connections, pools, channels, rules, retention.

Defaults (as docs/configuration.md lists them): the server binds 127.0.0.1:8765; the store is
``sqlite:///data/cadenza.db`` under the home; 4 workers, 16 runs at most across nodes;
files live under ``data/files``; runs are kept 90 days and at least the last 100 per job.
String values may hold ``${env.NAME}`` and ``${secret.NAME}``; the loader resolves them.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from cadenza.config.types import (
    Duration,
    EmailAddress,
    HeaderMap,
    HttpUrl,
    Identifier,
    NonEmptyStr,
    Recipient,
    SqlUrl,
    StrictModel,
    fail,
    url_check,
    without_tokens,
)

if TYPE_CHECKING:
    from cadenza.domain.calendar import Calendar

LdapUrl = Annotated[str, url_check(("ldap", "ldaps"), "ldap://127.0.0.1:389")]
ProxyUrl = Annotated[str, url_check(("http", "https", "socks5", "socks5h"),
                                    "http://user:${secret.NAME}@10.1.2.3:3128")]
Port = Annotated[int, Field(ge=1, le=65535)]
RuleEvent = Literal["failed", "needs_review", "succeeded", "canceled", "missed", "long_run",
                    "recovered", "stalled", "late"]
_SECONDS_30 = timedelta(seconds=30)
_APP_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _store_url(value: str) -> str:
    scheme = without_tokens(value).split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in ("sqlite", "postgresql") and not value.startswith("${"):
        fail(f"expected a sqlite:/// or postgresql+psycopg:// URL (the store runs on SQLite or "
             f"PostgreSQL), got a {scheme!r} URL")
    return value


def _region(value: str) -> str:
    if not re.fullmatch(r"[A-Z]{2}", value):
        fail(f"expected a two-letter country code like 'FR', got {value!r}")
    return value


def _network(value: str) -> str:
    import ipaddress

    if value.startswith("${"):
        return value  # checked once resolved
    try:
        ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        fail(f"expected an IP address or a network like \"10.0.0.0/8\", got {value!r}")
    return value.strip()


Network = Annotated[str, AfterValidator(_network)]
"""An IP address (``127.0.0.1``, ``::1``) or a CIDR network (``10.0.0.0/8``)."""


def _read_timeout(value: timedelta) -> timedelta:
    if not timedelta(seconds=1) <= value <= timedelta(minutes=10):
        fail(f'expected between "1s" and "10m" (how long a client may take to send a '
             f"request), got {value.total_seconds():g}s")
    return value


def _leader_lease(value: timedelta) -> timedelta:
    if not timedelta(seconds=2) <= value <= timedelta(minutes=5):
        fail(f'expected a leader lease between "2s" and "5m" (a stopped leader is replaced '
             f"after it), got {value.total_seconds():g}s")
    return value


class ServerSettings(StrictModel):
    """Where the web UI and API listen; ``base_url`` is the address users reach it at.

    ``tls_cert``/``tls_key``: PEM files (relative to the home) to serve https; both or
    neither. ``trusted_proxies``: addresses or networks whose ``X-Forwarded-For`` and
    ``X-Forwarded-Proto`` are believed (nobody's by default). ``metrics_allow``: addresses
    or networks that may read ``/metrics`` without a token (none by default).
    ``header_timeout``: how long a client may take to send a request's line and headers
    (from its first byte, or from the connection); ``body_timeout``: how long it may take
    to send a request's body. A slower client gets 408 and is disconnected (slowloris).
    ``language``: the pages' language for whoever has not picked one with the switch
    (unset: the browser's), and the e-mails' for users without a language of their own.
    ``leader_lease``: on PostgreSQL, how long the node that fires schedules leads without
    renewing; a leader stopped or cut off longer is replaced by another node."""

    host: NonEmptyStr = "127.0.0.1"
    port: Port = 8765
    base_url: HttpUrl | None = None
    tls_cert: NonEmptyStr | None = None
    tls_key: NonEmptyStr | None = None
    trusted_proxies: list[Network] = Field(default_factory=list, max_length=1000)
    metrics_allow: list[Network] = Field(default_factory=list, max_length=1000)
    header_timeout: Annotated[Duration, AfterValidator(_read_timeout)] = timedelta(seconds=10)
    body_timeout: Annotated[Duration, AfterValidator(_read_timeout)] = _SECONDS_30
    language: Literal["en", "fr", "zh_Hans"] | None = None
    leader_lease: Annotated[Duration, AfterValidator(_leader_lease)] = timedelta(seconds=12)

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            fail("expected both tls_cert and tls_key (the certificate and its private key), "
                 "or neither")
        return self

    @property
    def tls(self) -> bool:
        """Whether the server speaks https itself."""
        return self.tls_cert is not None and self.tls_key is not None


class StoreSettings(StrictModel):
    """The database: a SQLite file (relative paths resolve against the home) or PostgreSQL."""

    url: Annotated[SqlUrl, AfterValidator(_store_url)] = "sqlite:///data/cadenza.db"
    sqlite_synchronous: Literal["NORMAL", "FULL"] = "NORMAL"


def _lease_length(value: timedelta) -> timedelta:
    if value < MIN_LEASE:
        fail(f'expected a lease of at least "3s" (it is renewed every third of it), got '
             f"{value.total_seconds():g}s")
    if value > MAX_LEASE:
        fail(f'expected a lease of at most "1h" (a dead worker\'s runs wait this long), got '
             f"{value.total_seconds():g}s")
    return value


MIN_LEASE = timedelta(seconds=3)
MAX_LEASE = timedelta(hours=1)


def _skew_limit(value: timedelta) -> timedelta:
    if not timedelta(seconds=1) <= value <= timedelta(hours=1):
        fail(f'expected a skew between "1s" and "1h" (how far this node\'s clock may differ '
             f"from the store's before its reaper stops), got {value.total_seconds():g}s")
    return value


class WorkerSettings(StrictModel):
    """``count`` concurrent runs on this node; ``max_concurrent_runs`` across all nodes;
    ``lease``: how long a worker's hold on a run lasts without renewal (renewed every third
    of it; a run whose worker died is re-queued once it expires; see docs/leases.md);
    ``max_clock_skew``: how far this node's clock may differ from the store's time before
    the node stops re-queueing other nodes' runs (its reaper)."""

    count: int = Field(4, ge=1, le=1024)
    max_concurrent_runs: int = Field(16, ge=1, le=100_000)
    lease: Annotated[Duration, AfterValidator(_lease_length)] = timedelta(seconds=60)
    max_clock_skew: Annotated[Duration, AfterValidator(_skew_limit)] = _SECONDS_30


class TagLimits(StrictModel):
    """Caps shared by every job carrying a tag."""

    max_concurrency: int | None = Field(None, ge=1, le=100_000)
    budget_per_hour: int = Field(0, ge=0, le=1_000_000)


STEP_OUTPUT_BYTES = 1 << 20
"""The default of ``[limits].step_output_bytes``."""
RUN_LOG_LINES = 100_000
"""The default of ``[limits].run_log_lines``."""


class LimitSettings(StrictModel):
    """Per-tag caps (``[limits.tags.NAME]``) and what one run may store:
    ``step_output_bytes``, the largest output of a step kept (as JSON; a larger one is
    replaced by a summary of its size), and ``run_log_lines``, the most lines of step code
    kept in a run's log (the others are counted, and the count written when the run ends).
    See docs/security.md, "Limits"."""

    tags: dict[Identifier, TagLimits] = Field(default_factory=dict)
    # The store's protection (see the class docstring).
    step_output_bytes: int = Field(STEP_OUTPUT_BYTES, ge=1024, le=64 << 20)
    run_log_lines: int = Field(RUN_LOG_LINES, ge=100, le=10_000_000)


class FileSettings(StrictModel):
    """Directories that file steps may read and write (relative to the home)."""

    roots: list[NonEmptyStr] = Field(default_factory=lambda: ["data/files"], min_length=1)


def _callable_pattern(value: str) -> str:
    from cadenza.plugin_code import PATTERN

    if not PATTERN.fullmatch(value):
        fail(f"expected 'module:function' or 'module:*' with a module written in full (like "
             f"'mypkg.tasks:*'), got {value!r}")
    return value


class SecuritySettings(StrictModel):
    """What jobs.toml may make Cadenza run. ``allowed_callables``: ``module:function``
    patterns (``*`` after the colon) that a ``python`` step may call besides the modules of
    the home's ``plugins/`` folder; see docs/security.md, "Code a job may run"."""

    allowed_callables: list[Annotated[str, AfterValidator(_callable_pattern)]] = Field(
        default_factory=list, max_length=1000, description=(
            "Functions of installed packages that python steps may call besides the home's "
            "plugins/ folder, as module:function or module:* (e.g. \"mypkg.tasks:*\"). "
            "Empty by default: only code of plugins/ runs."))


class SqlConnection(StrictModel):
    """A database reached through SQLAlchemy."""

    type: Literal["sql"]
    url: SqlUrl


def _wsgi_app(value: str) -> str:
    if not _APP_SPEC.fullmatch(value):
        fail(f"expected 'module:attribute' naming a WSGI application in plugins/ (like "
             f"'demo_downstream:app'), got {value!r}")
    return value


class HttpConnection(StrictModel):
    """An HTTP service: base URL, default headers, and whether private addresses are allowed.

    ``timeout`` bounds each request (all its redirect hops and its body), within the
    step's own timeout. ``app = "module:attribute"`` names a WSGI application (imported
    from the home's ``plugins/``) that answers in-process instead of the network: nothing
    leaves the process, so the egress policy does not apply; ``base_url`` still gives the
    paths (its host is not contacted). The demo home uses it to run offline.
    """

    type: Literal["http"]
    base_url: HttpUrl
    headers: HeaderMap = Field(default_factory=dict)
    allow_private: bool = False
    timeout: Duration = _SECONDS_30
    verify_tls: bool = True
    app: Annotated[str, AfterValidator(_wsgi_app)] | None = None


class LdapConnection(StrictModel):
    """An LDAP directory; no ``bind_dn`` means an anonymous bind. TLS (``ldaps://`` or
    ``start_tls``) checks the server's certificate against the system's CAs, or those of
    ``ca_file`` (a PEM file; relative to the home), unless ``verify_tls = false``."""

    type: Literal["ldap"]
    url: LdapUrl
    # Empty is refused: an empty bind_dn would bind anonymously without saying so, and a
    # simple bind with an empty password is an unauthenticated bind.
    bind_dn: NonEmptyStr | None = None
    password: NonEmptyStr | None = None
    start_tls: bool = False
    timeout: Duration = _SECONDS_30
    verify_tls: bool = True
    ca_file: NonEmptyStr | None = None


Connection = Annotated[SqlConnection | HttpConnection | LdapConnection,
                       Field(discriminator="type")]


class PoolHealth(StrictModel):
    """Route health checks: every ``interval``, probe through the proxy; below
    ``threshold`` the route cools down."""

    interval: Duration = timedelta(seconds=60)
    timeout: Duration = timedelta(seconds=5)
    probe_url: HttpUrl | None = None
    ip_echo_url: HttpUrl | None = None
    threshold: float = Field(50, ge=0, le=100)
    disable_after: int = Field(5, ge=1, le=1000)
    """Consecutive failed probes after which the route goes DISABLED."""
    ip_key: NonEmptyStr = "ip"
    """The key of the egress address in the ``ip_echo_url`` JSON answer."""
    country_key: NonEmptyStr = "country"
    """The key of the egress region (ISO country code) in the ``ip_echo_url`` answer."""
    concurrency: int = Field(16, ge=1, le=256)
    """How many routes of the pool are probed at once."""
    check_egress: bool = False
    """Before each ``http`` step through a route of the pool, ask ``ip_echo_url`` through it
    and refuse the route (a resource fault) when its egress region is not its ``region``."""


class PoolMember(StrictModel):
    """One resource. Routes have a ``proxy`` and an expected ``region``; units and
    credentials may bind a route member (``route``) and carry ``fields`` (a credential's
    login values, a unit's settings), which may hold ``${secret.NAME}``."""

    id: Identifier
    proxy: ProxyUrl | None = None
    region: Annotated[str, AfterValidator(_region)] | None = None
    route: Identifier | None = None
    fields: dict[str, str] = Field(default_factory=dict)


class Pool(StrictModel):
    """A named set of resources of one kind."""

    kind: Literal["unit", "route", "credential"]
    cooldown: Duration = _SECONDS_30
    health: PoolHealth | None = None
    members: list[PoolMember] = Field(default_factory=list)


class EmailChannel(StrictModel):
    """SMTP delivery; ``starttls`` upgrades a plain connection, ``ssl`` uses implicit TLS."""

    type: Literal["email"]
    host: NonEmptyStr
    port: Port = 587
    starttls: bool = True
    ssl: bool = False
    username: NonEmptyStr | None = None  # empty would silently skip the login
    password: NonEmptyStr | None = None
    sender: EmailAddress
    timeout: Duration = _SECONDS_30
    default: bool = False

    @model_validator(mode="after")
    def _one_tls_mode(self) -> EmailChannel:
        if self.starttls and self.ssl:
            fail("expected either starttls = true or ssl = true, not both")
        return self


class WebhookChannel(StrictModel):
    """A JSON POST; ``format`` shapes the body for Slack or Teams."""

    type: Literal["webhook"]
    url: HttpUrl
    headers: HeaderMap = Field(default_factory=dict)
    format: Literal["json", "slack", "teams"] = "json"
    allow_private: bool = False
    timeout: Duration = _SECONDS_30
    default: bool = False


class DesktopChannel(StrictModel):
    """A notification on the desktop of the computer the node runs on (D-Bus
    ``org.freedesktop.Notifications`` on Linux, a toast on Windows); a click opens the run in
    the desktop window (``cadenza desktop``), else in the browser."""

    type: Literal["desktop"]
    timeout: Duration = timedelta(seconds=10)
    default: bool = False


Channel = Annotated[EmailChannel | WebhookChannel | DesktopChannel,
                    Field(discriminator="type")]


class Rule(StrictModel):
    """Notify ``notify`` through ``channel`` (default channel when absent) when a job
    selected by ``jobs`` globs or ``tags`` reaches one of the ``on`` events."""

    name: NonEmptyStr
    on: list[RuleEvent] = Field(min_length=1)
    jobs: list[NonEmptyStr] = Field(default_factory=list)
    tags: list[Identifier] = Field(default_factory=list)
    notify: list[Recipient] = Field(min_length=1)
    channel: Identifier | None = None

    @model_validator(mode="after")
    def _selects_jobs(self) -> Rule:
        if not self.jobs and not self.tags:
            fail("expected 'jobs' (globs on job ids, like [\"*\"]) or 'tags' to select jobs")
        return self


def _clock_time(value: str) -> str:
    if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", value):
        fail(f'expected a time of day like "09:00", got {value!r}')
    return value


def _day_key(value: str) -> str:
    try:
        date.fromisoformat(value)
    except ValueError:
        fail(f"expected a date like 2027-12-24 (year-month-day), got {value!r}")
    return value


DayKey = Annotated[str, AfterValidator(_day_key)]
DayNames = dict[DayKey, NonEmptyStr]
WeekdayKey = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


class CalendarSettings(StrictModel):
    """A business calendar: a country's public holidays (``country``, ``subdivision``) plus
    the home's own ``days_off`` and ``working_days`` (``2027-12-24 = "Closing day"``)."""

    country: Annotated[str, AfterValidator(_region)] | None = None
    subdivision: NonEmptyStr | None = None
    language: NonEmptyStr | None = None
    weekend: list[WeekdayKey] | None = Field(None, max_length=6)
    days_off: DayNames = Field(default_factory=dict)
    working_days: DayNames = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known(self) -> CalendarSettings:
        from cadenza.domain.calendar import CalendarError, calendar_from, supported_countries

        if self.country is None:
            if self.subdivision is not None:
                fail("expected 'country' with 'subdivision' (e.g. country = \"FR\", "
                     "subdivision = \"57\")")
            return self
        countries = supported_countries()
        if self.country not in countries:
            fail(f"unknown country {self.country!r}: expected a country code with public "
                 f"holidays, e.g. FR, CN, DE, US")
        subs = countries[self.country]
        if self.subdivision is not None and self.subdivision not in subs:
            fail(f"unknown subdivision {self.subdivision!r} of {self.country}: expected one of "
                 f"{', '.join(subs) or '(none)'}")
        try:
            calendar = calendar_from("check", self.model_dump())
        except CalendarError as exc:
            fail(str(exc))
        if self.language is not None and calendar.language_problem(self.language):
            fail(calendar.language_problem(self.language) or "")
        return self


class AlertSettings(StrictModel):
    """Repeated failures as one alert: the first failure of a job with an error class alerts,
    later ones are counted in a reminder at most every ``reminder_after``, and the job's next
    success closes the group with a recovery message. E-mail links (snooze, acknowledge)
    work without logging in until ``link_valid``; alerts carry the run's last ``log_lines``."""

    group_failures: bool = True
    reminder_after: Duration = timedelta(hours=1)
    link_valid: Duration = timedelta(hours=24)
    log_lines: int = Field(10, ge=0, le=200)
    morning: Annotated[str, AfterValidator(_clock_time)] = "09:00"


class RetentionSettings(StrictModel):
    """How long finished runs, logs and events are kept."""

    days: int = Field(90, ge=1, le=36_500)
    keep_last_per_job: int = Field(100, ge=0, le=1_000_000)


class Settings(StrictModel):
    """The whole of ``cadenza.toml``, validated, with ``${...}`` resolved."""

    server: ServerSettings = Field(default_factory=ServerSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    workers: WorkerSettings = Field(default_factory=WorkerSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    files: FileSettings = Field(default_factory=FileSettings)
    connections: dict[Identifier, Connection] = Field(default_factory=dict)
    pools: dict[Identifier, Pool] = Field(default_factory=dict)
    channels: dict[Identifier, Channel] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    calendars: dict[Identifier, CalendarSettings] = Field(default_factory=dict)
    alerts: AlertSettings = Field(default_factory=AlertSettings)

    @cached_property
    def calendar_objects(self) -> dict[str, Calendar]:
        """The business calendars, built once per loaded configuration."""
        from cadenza.domain.calendar import calendar_from

        return {name: calendar_from(name, table.model_dump())
                for name, table in self.calendars.items()}

    def store_url(self, home: Path) -> str:
        """The store's SQLAlchemy URL with a relative SQLite path made absolute under ``home``."""
        return absolute_sqlite_url(self.store.url, home)

    def file_roots(self, home: Path) -> list[Path]:
        """``[files].roots`` as absolute paths (relative ones resolve against ``home``)."""
        return [(home / root).resolve() for root in self.files.roots]

    def default_channel(self) -> str | None:
        """The channel marked ``default = true``, else the first channel, else None."""
        return default_channel_of(self.channels)


def default_channel_of(channels: dict[str, EmailChannel | WebhookChannel | DesktopChannel]
                       ) -> str | None:
    """The channel marked ``default = true``, else the first one declared, else None."""
    marked = [name for name, ch in channels.items() if ch.default]
    if marked:
        return marked[0]
    return next(iter(channels), None)


def absolute_sqlite_url(url: str, home: Path) -> str:
    """``sqlite:///data/x.db`` → ``sqlite:////HOME/data/x.db``; other URLs unchanged."""
    prefix, sep, rest = url.partition(":///")
    if not sep or prefix.split("+", 1)[0].lower() != "sqlite":
        return url
    path, query_sep, query = rest.partition("?")
    if path in ("", ":memory:") or Path(path).is_absolute():
        return url
    absolute = (home / path).resolve().as_posix()
    return f"{prefix}:///{absolute}{query_sep}{query}"
