"""Field types shared by the settings, the jobs and every step type's config.

Every model derives from :class:`StrictModel`: unknown keys are errors, numbers are
strict (``true`` is not ``1``, ``"5"`` is not ``5``), NaN and infinity are refused, and
loaded configs are immutable. Each constrained type's error says what was expected.

:class:`Ref` marks a field whose value names something defined elsewhere (a connection
of some type, a pool, a job, a channel); the cross-reference check reads these marks, so
a third-party step type gets its references checked by declaring them the same way.
"""

from __future__ import annotations

import difflib
import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Annotated, Any, Literal, NoReturn
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    PlainValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cadenza.config.durations import format_duration, parse_duration
from cadenza.config.labels import ADVANCED, human_title
from cadenza.config.windows import parse_window
from cadenza.domain.addresses import InvalidAddress, check_email
from cadenza.domain.params import TOKEN_RE

ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
ID_EXPECTED = "expected 1 to 64 characters from A-Z a-z 0-9 _ -"
_RECIPIENT = re.compile(r"(role|user|channel):[A-Za-z0-9_.@-]{1,128}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def fail(message: str) -> NoReturn:
    """Raise a validation error whose message is exactly ``message``."""
    raise PydanticCustomError("cadenza", "{message}", {"message": message})


def without_tokens(value: str) -> str:
    """``value`` with each ``${...}`` replaced by ``x``, to check its shape before resolution."""
    return TOKEN_RE.sub("x", value)


def has_tokens(value: str) -> bool:
    """True when ``value`` holds a ``${...}`` token. A shape check that fails on such a value
    is left to the check after substitution, whose message never shows the value."""
    return TOKEN_RE.search(value) is not None


class StrictModel(BaseModel):
    """Base of every config model: no unknown keys, strict types, finite numbers, frozen;
    a field without a ``title`` gets its key's human label (:mod:`cadenza.config.labels`)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, allow_inf_nan=False, populate_by_name=False,
        field_title_generator=human_title,
    )


@dataclass(frozen=True)
class Ref:
    """Marks a field naming a ``connection`` (of type ``subtype``), ``pool`` (of kind
    ``subtype``, any kind when None), ``job`` or ``channel``. On a table field, the table's
    keys are the names."""

    kind: Literal["connection", "pool", "job", "channel", "calendar"]
    subtype: str | None = None


@dataclass(frozen=True)
class InRoots:
    """Marks a file path that must stay inside ``[files].roots``."""


def _duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        fail(f'expected a duration string like "30s", "90m", "2h" or "1d", got '
             f"{type(value).__name__} {value!r}")
    try:
        return parse_duration(value)
    except ValueError as exc:
        fail(str(exc))


def _identifier(value: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        fail(f"{ID_EXPECTED}, got {value!r}")
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        fail("expected a non-empty string")
    return value


_NOT_ZONES = frozenset({"Factory", "localtime", "posixrules"})


@functools.cache
def iana_zone_names() -> frozenset[str]:
    """The zone database's names (tzdata is a dependency); never the system's
    ``localtime``, ``posixrules``, ``Factory`` or the ``posix/`` and ``right/`` copies."""
    return frozenset(
        name for name in zoneinfo.available_timezones()
        if name not in _NOT_ZONES and not name.startswith(("posix/", "right/"))
    )


def zone_problem(value: str) -> str | None:
    """Why ``value`` is not a zone of the IANA database (with the closest name), or None."""
    names = iana_zone_names()
    if value in names:
        return None
    close = difflib.get_close_matches(value, sorted(names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"unknown time zone {value!r}: expected an IANA name from the zone database "
            f"like 'Europe/Paris' or 'UTC'{hint}")


def _timezone(value: str) -> str:
    problem = zone_problem(value)
    if problem is not None:
        fail(problem)
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        fail(f"unknown time zone {value!r}: expected an IANA name like 'Europe/Paris' or 'UTC'")
    return value


def _cron(value: str) -> str:
    from cadenza.domain.cron import CronError, parse_cron

    try:
        parse_cron(value)
    except CronError as exc:
        fail(f"invalid schedule {value!r}: {exc}")
    return value


_CLOCK_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d")


def parse_deadline(value: str) -> time | timedelta:
    """A validated ``start_by`` / ``finish_by``: a time of day, or a duration."""
    clock = _CLOCK_TIME.fullmatch(value.strip())
    if clock is not None:
        return time.fromisoformat(value.strip())
    return parse_duration(value)


def _deadline(value: str) -> str:
    if _CLOCK_TIME.fullmatch(value.strip()):
        return value.strip()
    try:
        parse_duration(value)
    except ValueError:
        fail(f'expected a time of day like "07:00" (in the job\'s zone) or a duration after '
             f'the scheduled time like "2h" or "90m", got {value!r}')
    return value.strip()


def _window(value: str) -> str:
    try:
        parse_window(value)
    except ValueError as exc:
        fail(str(exc))
    return value


def _recipient(value: str) -> str:
    if TOKEN_RE.search(value):
        return value  # resolved at run time, and checked before sending
    if _RECIPIENT.fullmatch(value):
        return value
    try:
        check_email(value)
    except InvalidAddress as exc:
        expected = "expected an e-mail address, role:NAME, user:NAME or channel:NAME"
        fail(f"{expected}, got {value!r}" if "@" not in value
             else f"{expected}, got {value!r}: {exc}")
    return value


def _email(value: str) -> str:
    if has_tokens(value):
        return value  # resolved when read, and checked before sending
    try:
        check_email(value)
    except InvalidAddress as exc:
        fail(f"expected an e-mail address like 'cadenza@example.org', got {value!r}: {exc}")
    return value


def _relative_path(value: str) -> str:
    if not value.strip() or "\x00" in value:
        fail("expected a non-empty file path")
    if ".." in re.split(r"[\\/]", value):
        fail(f"expected a path without '..' segments (paths stay inside [files].roots), "
             f"got {value!r}")
    return value


def url_check(schemes: tuple[str, ...], example: str) -> AfterValidator:
    """A validator for URLs with one of ``schemes`` and a host (``${...}`` allowed inside)."""

    def check(value: str) -> str:
        try:
            parts = urlsplit(without_tokens(value))
            host = parts.hostname
        except ValueError:
            host = None
            parts = None
        bad = parts is None or parts.scheme.lower() not in schemes or not host
        if bad and not has_tokens(value):
            fail(f"expected a URL like {example!r} ({' or '.join(schemes)}), got {value!r}")
        return value

    return AfterValidator(check)


def _sql_url(value: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(without_tokens(value))
    except (ArgumentError, ValueError):
        if has_tokens(value):
            return value
        fail("expected a SQLAlchemy URL like 'sqlite:///data/warehouse.db' or "
             f"'postgresql+psycopg://user@host/db', got {value!r}")
    return value


def _headers(value: dict[str, str]) -> dict[str, str]:
    for name, text in value.items():
        if not _HEADER_NAME.fullmatch(name):
            fail(f"expected HTTP header names of letters, digits and -, got {name!r}")
        if "\r" in text or "\n" in text:
            fail(f"header {name!r}: expected a value without line breaks")
    return value


def _status_patterns(value: object) -> list[str]:
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        text = str(item) if isinstance(item, int) and not isinstance(item, bool) else item
        if not isinstance(text, str) or not re.fullmatch(r"[1-5](\d\d|xx)", text):
            fail(f'expected status codes like 200 or patterns like "2xx", got {item!r}')
        out.append(text)
    if not out:
        fail('expected at least one status code or pattern like "2xx"')
    return out


Duration = Annotated[
    timedelta, PlainValidator(_duration), PlainSerializer(format_duration, return_type=str)
]
NonEmptyStr = Annotated[str, AfterValidator(_non_empty)]
Identifier = Annotated[str, AfterValidator(_identifier)]
Timezone = Annotated[str, AfterValidator(_timezone)]
CronSchedule = Annotated[str, AfterValidator(_cron)]
WindowSpec = Annotated[str, AfterValidator(_window)]
Deadline = Annotated[str, AfterValidator(_deadline)]
"""``start_by`` / ``finish_by``: ``"07:00"`` (the first such time of day at or after the
scheduled time, in the job's zone) or a duration after the scheduled time (``"2h"``)."""
CalendarName = Annotated[Annotated[str, AfterValidator(_identifier)] | None, Ref("calendar")]
"""An optional ``calendar = NAME``: a ``[calendars.NAME]`` of cadenza.toml."""
Recipient = Annotated[str, AfterValidator(_recipient)]
EmailAddress = Annotated[str, AfterValidator(_email)]
RelativePath = Annotated[str, AfterValidator(_relative_path)]
FilePath = Annotated[str, AfterValidator(_relative_path), InRoots()]
HttpUrl = Annotated[str, url_check(("http", "https"), "https://example.org")]
SqlUrl = Annotated[str, AfterValidator(_sql_url)]
HeaderMap = Annotated[dict[str, str], AfterValidator(_headers)]
StatusPatterns = Annotated[list[str], PlainValidator(_status_patterns)]
JsonMap = dict[str, JsonValue]


def _json_value(value: Any, at: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            fail(f"{at}expected a finite number")
        return
    if isinstance(value, list):
        for item in value:
            _json_value(item, at)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                fail(f"{at}expected text keys")
            _json_value(item, at)
        return
    fail(f"{at}expected a string, number, boolean, array or table (a date only as the "
         f"whole value), got {type(value).__name__}")


def _param_value(value: Any) -> Any:
    """A parameter's value: JSON, or a TOML date / date-time as the whole value (it makes a
    date or date-time parameter, see :func:`cadenza.domain.params.param_type`)."""
    if isinstance(value, date | datetime):
        return value
    _json_value(value, "")
    return value


RESERVED_PARAM_NAMES = frozenset({
    "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONHOME",
    "PATHEXT", "COMSPEC", "SYSTEMROOT", "BASH_ENV", "IFS",
})
"""Names a parameter may not take (compared case-insensitively, as Windows does for the
environment): the variables that choose which code a process loads or where it looks."""
RESERVED_PARAM_PREFIXES = ("DYLD_", "LD_", "PYTHON", "CADENZA_")


def _param_name(value: str) -> str:
    if not value.isidentifier():
        fail(f"parameter name {value!r} refused: a name must be an identifier "
             "(letters, digits and '_', not starting with a digit)")
    if value.startswith("__") and value.endswith("__"):
        fail(f"parameter name {value!r} refused: dunder names (__x__) are reserved")
    if value == "ctx":
        fail("parameter name 'ctx' refused: it is reserved, as the name under which a python "
             "step's function receives its step context; choose another name")
    upper = value.upper()
    if upper in RESERVED_PARAM_NAMES or upper.startswith(RESERVED_PARAM_PREFIXES):
        fail(f"parameter name {value!r} refused: it is reserved, as a name of an environment "
             "variable that changes how a program loads code (PATH, LD_*, DYLD_*, PYTHON*, "
             "CADENZA_ ...); choose another name")
    return value


ParamName = Annotated[str, AfterValidator(_param_name)]
ParamValue = Annotated[Any, PlainValidator(_param_value)]
ParamMap = dict[ParamName, ParamValue]
"""A job's, a preset's or a ``call_job`` step's ``params``: each value's type is the
parameter's (a date default makes a date parameter)."""
LogLevel = Literal["WARNING", "INFO", "DEBUG"]
Count = Annotated[int, Field(ge=1, le=1_000_000)]
PoolNeeds = Annotated[dict[Identifier, Count], Ref("pool")]


class RetryPolicy(StrictModel):
    """How a failed step is tried again (docs/retries.md). On a step, keys not given there inherit
    from the job's policy."""

    attempts: int = Field(3, ge=1, le=100, description=(
        "How many times a step is tried in all, the first try included (1: no retry)."))
    backoff: Literal["fixed", "exponential"] = Field("exponential", description=(
        "fixed waits the first delay every time; exponential doubles it at each retry."))
    base_seconds: float = Field(30, ge=0, le=86_400, description=(
        "The wait before the first retry, in seconds, e.g. 30."))
    max_seconds: float = Field(900, ge=0, le=604_800, description=(
        "The longest wait between two tries, in seconds, e.g. 900."))
    jitter: float = Field(0.1, ge=0, le=1, json_schema_extra=ADVANCED, description=(
        "A random share added to each wait so retries do not all fire together, e.g. 0.1 "
        "for up to a tenth more."))

    @model_validator(mode="after")
    def _max_not_below_base(self) -> RetryPolicy:
        given = self.model_fields_set
        if {"base_seconds", "max_seconds"} <= given and self.max_seconds < self.base_seconds:
            fail(f"expected max_seconds ({self.max_seconds:g}) >= base_seconds "
                 f"({self.base_seconds:g})")
        return self

    def merged_over(self, base: RetryPolicy) -> RetryPolicy:
        """This (step) policy with every key it does not set taken from ``base`` (the job's)."""
        values: dict[str, Any] = base.model_dump()
        values.update({k: getattr(self, k) for k in self.model_fields_set})
        values["max_seconds"] = max(values["max_seconds"], values["base_seconds"])
        return RetryPolicy.model_validate(values)
