"""Run ids, UTC timestamps and JSON text (cadenza.store.codec)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum

import pytest
import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect

from cadenza.store.codec import (
    RunIdFactory,
    UTCDateTime,
    _base32,
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
