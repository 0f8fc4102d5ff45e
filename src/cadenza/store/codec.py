"""How Python values are encoded in the store: UTC timestamps, JSON text, run ids.

* Timestamps are stored in UTC on both dialects. PostgreSQL keeps them in ``timestamptz``;
  SQLite has no time type, so they are stored as naive UTC text of one fixed width
  (``YYYY-MM-DD HH:MM:SS.ffffff``), which sorts, compares and deduplicates correctly. Either
  way the store returns timezone-aware UTC datetimes and refuses naive ones: a naive time is
  a bug in the caller, not something to guess about.
* JSON columns are plain text written by :func:`dumps` (sorted keys, datetimes as ISO 8601),
  so that both dialects hold the same bytes and a value never depends on a driver's JSON type.
  ``orjson`` writes it (a run's events are several JSON payloads each, and the standard
  library's encoder cost about a tenth of a short run's CPU); what ``orjson`` refuses and
  the standard library takes (a key that is not a string, an integer past 64 bits, a lone
  surrogate) is written by the standard library. A float reads back the same but may be
  written in another form (``0.00003`` where older rows say ``3e-05``): compare values,
  not text. NaN and infinities are written as ``null`` (JSON has no such numbers).
* Run ids are ULID-like: 48 bits of milliseconds from the store's clock, then 80 random bits,
  in Crockford base32 (26 characters). They sort by creation time; within one process they are
  strictly increasing even when the clock stands still (``FakeClock``) or steps back.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from pathlib import PurePath
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80


def require_aware(value: datetime, what: str = "timestamp") -> datetime:
    """``value`` converted to UTC; :class:`ValueError` if it is naive."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {value.isoformat()}")
    return value.astimezone(UTC)


def aware_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with every ``datetime`` checked aware and converted to UTC."""
    return {
        key: require_aware(value, key) if isinstance(value, datetime) else value
        for key, value in values.items()
    }


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timestamp stored as UTC and returned as an aware UTC ``datetime`` on every dialect."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = require_aware(value)
        # SQLite's DATETIME is text: store the naive UTC wall time so equal instants are equal
        # strings (the fire uniqueness and every range query depend on it).
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def utc_from_raw(value: Any) -> datetime | None:
    """A timestamp column's raw driver value (without :class:`UTCDateTime`'s processing)
    as an aware UTC datetime: SQLite's text, PostgreSQL's datetime. The hot read paths
    select raw values (:data:`cadenza.store.records.RAW_RUN_COLUMNS`): a page of 50 runs
    has 400 timestamps, and SQLAlchemy's two result processors per value cost more than the
    query."""
    if value is None:
        return None
    if type(value) is str:  # naive UTC text; "+00:00" parses to UTC itself, and is
        # several times cheaper than replace(tzinfo=UTC)
        return datetime.fromisoformat(value + "+00:00")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
    return value.astimezone(UTC)  # type: ignore[no-any-return]


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, PurePath):
        return value.as_posix()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"cannot store a value of type {type(value).__name__} as JSON")


_ENCODER = json.JSONEncoder(
    default=_json_default, sort_keys=True, ensure_ascii=False, separators=(",", ":")
)


_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
"""Sorted keys; a dataclass goes to :func:`_json_default`, which refuses it, as the standard
library does (no object is stored by its attributes without saying so)."""


def dumps(value: object) -> str:
    """JSON text for a JSON column (sorted keys, compact, UTF-8 kept as is; see the module
    docstring for what ``orjson`` leaves to the standard library)."""
    try:
        return orjson.dumps(value, default=_json_default, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        # One shared encoder: json.dumps with options builds a new one on every call.
        return _ENCODER.encode(value)


def loads(text: str | None) -> Any:
    """The value of a JSON column (``None`` for SQL NULL)."""
    if text is None:
        return None
    return json.loads(text)


def loads_mapping(text: str | None) -> dict[str, Any]:
    """A JSON object column as a dict (``{}`` for NULL)."""
    if text == "{}":  # most runs' params and overrides: no parse (W6, a page of 50 runs)
        return {}
    value = loads(text)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return dict(value)


_PAIRS = tuple(a + b for a in _CROCKFORD for b in _CROCKFORD)
"""Two base32 digits for each 10-bit value."""


def _base32(number: int, length: int) -> str:
    """The ``length`` (even) lowest base32 digits of ``number``, most significant first."""
    return "".join(
        [_PAIRS[(number >> shift) & 1023] for shift in range(5 * length - 10, -1, -10)]
    )


class RunIdFactory:
    """Time-sortable run ids from a clock's ``now`` (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def __call__(self, now: datetime) -> str:
        return self.many(now, 1)[0]

    def many(self, now: datetime, count: int) -> list[str]:
        """``count`` ids, as ``count`` calls with this ``now`` would give them (increasing)."""
        ms = (require_aware(now) - _EPOCH) // timedelta(milliseconds=1)
        taken: list[tuple[int, int]] = []
        with self._lock:
            for _ in range(count):
                taken.append(self._next(ms))
        prefixes: dict[int, str] = {}
        out: list[str] = []
        for at, rand in taken:
            prefix = prefixes.get(at)
            if prefix is None:
                prefix = prefixes[at] = _base32(at, 10)
            out.append(prefix + _base32(rand, 16))
        return out

    def _next(self, ms: int) -> tuple[int, int]:
        if ms <= self._last_ms:
            # Same millisecond (or the clock stepped back): stay strictly increasing.
            ms, rand = self._last_ms, self._last_random + 1
            if rand >= 1 << _RANDOM_BITS:
                ms, rand = ms + 1, int.from_bytes(os.urandom(10), "big") >> 1
        else:
            # Start in the lower half so a burst in one millisecond cannot overflow.
            rand = int.from_bytes(os.urandom(10), "big") >> 1
        self._last_ms, self._last_random = ms, rand
        return ms, rand


new_run_id = RunIdFactory()
"""The process-wide run id factory."""

_DIGIT = {c: k for k, c in enumerate(_CROCKFORD)}


def run_id_time(run_id: str) -> datetime | None:
    """The millisecond a run id was made at (its first 10 digits), or ``None`` when
    ``run_id`` is not shaped like one. A run's ``created_at`` is never later than the end of
    that millisecond: the factory takes the ``now`` of the run's creation and only moves
    forward from it."""
    if len(run_id) != 26:
        return None
    ms = 0
    for c in run_id[:10]:
        digit = _DIGIT.get(c)
        if digit is None:
            return None
        ms = ms * 32 + digit
    try:
        return _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return None
