"""Run ids, UTC timestamps and JSON text (cadenza.store.codec)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from enum import StrEnum
from pathlib import PurePosixPath

import pytest
import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect

from cadenza.store.codec import (
    RunIdFactory,
    UTCDateTime,
    _base32,
    _json_default,
    dumps,
    loads,
    loads_mapping,
)

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def test_run_ids_sort_by_time_and_never_repeat() -> None:
    make = RunIdFactory()
    same_ms = [make(T0) for _ in range(1000)]
    later = [make(T0 + timedelta(milliseconds=n)) for n in range(1, 50)]
    ids = same_ms + later
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 26 and set(i) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ") for i in ids)
    assert make(T0 - timedelta(hours=1)) > ids[-1]  # a clock stepping back keeps the order


def test_run_ids_from_different_factories_order_by_millisecond() -> None:
    a, b = RunIdFactory(), RunIdFactory()
    assert a(T0) < b(T0 + timedelta(milliseconds=1)) < a(T0 + timedelta(milliseconds=2))
    assert RunIdFactory()(T0)[:10] == "01MB78QN00"  # 48-bit milliseconds, base32


def test_run_ids_in_bulk_are_what_single_calls_give() -> None:
    make = RunIdFactory()
    ids = [make(T0), *make.many(T0, 500), make(T0), *make.many(T0 + timedelta(seconds=1), 3)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) == 505
    assert {i[:10] for i in ids[:502]} == {"01MB78QN00"}
    # The random part counts up by one within a millisecond, across single and bulk calls.
    numbers = [int.from_bytes(base32_digits(i[10:]), "big") for i in ids[:502]]
    assert numbers == list(range(numbers[0], numbers[0] + 502))


def test_base32_digits_are_the_crockford_digits_of_the_number() -> None:
    for number in (0, 1, 31, 32, 1023, 1024, 2**48 - 1, 2**50 - 1, 2**79 + 12345, 2**80 - 1):
        for length in (10, 16):
            expected = "".join(
                "0123456789ABCDEFGHJKMNPQRSTVWXYZ"[(number >> (5 * k)) & 31]
                for k in reversed(range(length))
            )
            assert _base32(number, length) == expected


def base32_digits(text: str) -> bytes:
    value = 0
    for char in text:
        value = value * 32 + "0123456789ABCDEFGHJKMNPQRSTVWXYZ".index(char)
    return value.to_bytes(10, "big")


@pytest.mark.parametrize("name", ["sqlite", "postgresql"])
def test_utc_datetime_stores_utc_and_returns_aware(name: str) -> None:
    dialect: Dialect = sa.create_mock_engine(f"{name}://", executor=print).dialect
    column = UTCDateTime()
    paris_summer = datetime(2027, 7, 1, 2, 0, tzinfo=timezone(timedelta(hours=2)))
    stored = column.process_bind_param(paris_summer, dialect)
    assert stored is not None
    assert stored.replace(tzinfo=UTC) == datetime(2027, 7, 1, 0, 0, tzinfo=UTC)
    back = column.process_result_value(stored, dialect)
    assert back == paris_summer and back is not None and back.tzinfo is UTC
    with pytest.raises(ValueError, match="timezone-aware"):
        column.process_bind_param(datetime(2027, 1, 1), dialect)
    assert column.process_bind_param(None, dialect) is None


def test_sqlite_stores_naive_utc_text_of_one_width() -> None:
    dialect = sa.create_mock_engine("sqlite://", executor=print).dialect
    stored = UTCDateTime().process_bind_param(T0, dialect)
    assert stored is not None and stored.tzinfo is None


class Color(StrEnum):
    RED = "RED"


def test_json_text_is_stable_and_handles_common_types() -> None:
    text = dumps({"b": {Color.RED}, "a": T0, "c": timedelta(seconds=90), "d": b"x", "e": "é"})
    assert text == '{"a":"2027-01-01T00:00:00+00:00","b":["RED"],"c":90.0,"d":"x","e":"é"}'
    assert loads(text)["c"] == 90.0
    assert loads(None) is None and loads_mapping(None) == {}
    with pytest.raises(ValueError):
        loads_mapping("[1, 2]")
    with pytest.raises(TypeError):
        dumps({"x": object()})


@dataclass
class _Point:
    x: int = 1


def test_json_text_reads_back_as_the_standard_library_writes_it() -> None:
    """orjson writes the text; what it refuses is written as before, and what both take
    reads back to the same value."""
    values = [
        {"b": 1, "a": [T0, T0.date(), Decimal("1.5"), Color.RED, PurePosixPath("a/b")]},
        {"zone": datetime(2027, 3, 28, 2, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))},
        {"floats": [2.9995999966558884e-05, 1e20, -0.0, 0.1 + 0.2], "ints": [0, -(2**63)]},
        {"nested": {"z": None, "y": [True, False], "x": {"é": "日本"}}},
    ]
    for value in values:
        text = dumps(value)
        assert loads(text) == json.loads(json.dumps(value, default=_json_default)), text
        assert list(loads(text)) == sorted(loads(text))  # keys sorted
    # Refused by orjson, written by the standard library as it always was.
    assert dumps({2: "y", 1: "x"}) == '{"1":"x","2":"y"}'
    assert dumps({"big": 2**70}) == '{"big":1180591620717411303424}'
    with pytest.raises(TypeError, match="_Point"):  # never stored by its attributes
        dumps({"x": _Point()})
    assert dumps({"x": float("nan")}) == '{"x":null}'  # JSON has no NaN
