"""The CSV reader names an over-long field as such, not as a quote left open."""

from __future__ import annotations

import csv
import io

import pytest

from cadenza.domain.errors import Fatal
from cadenza.steps.base import CsvOptions
from cadenza.steps.readers import open_source


def read_all(data: bytes) -> None:
    source = open_source("csv", io.BytesIO(data), "in/x.csv", CsvOptions())
    for _ in source.batches:
        pass


def test_an_over_long_field_says_so() -> None:
    # 700 KB in one field: longer than pyarrow's 512 KiB block and Python's field limit.
    data = b"id,text\n1,short\n2," + b"x" * 700_000 + b"\n3,short\n"
    with pytest.raises(Fatal) as caught:
        read_all(data)
    message = str(caught.value)
    limit = f"{csv.field_size_limit():,}"
    assert message == (f"in/x.csv: line 3: a field is longer than {limit} characters, the "
                       "longest a CSV field may be")
    assert "quote" not in message


def test_an_over_long_quoted_field_with_paired_quotes_says_so() -> None:
    data = b'id,text\n1,"' + b"y" * 700_000 + b'"\n2,short\n'
    with pytest.raises(Fatal, match=r"line 2: a field is longer than") as caught:
        read_all(data)
    assert "quote" not in str(caught.value)


def test_an_over_long_first_row_says_so() -> None:
    data = b"id," + b"h" * 200_000 + b"\n1,2\n"
    with pytest.raises(Fatal, match=r"in/x\.csv: line 1: a field is longer than"):
        read_all(data)


def test_a_quote_left_open_is_still_named_when_the_field_runs_on() -> None:
    data = b'id,text\n1,"never closed\n' + b"2,more\n" * 30_000
    with pytest.raises(Fatal) as caught:
        read_all(data)
    message = str(caught.value)
    assert "line 2" in message and "quote opened on line 2" in message
