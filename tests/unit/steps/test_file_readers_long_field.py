"""The CSV reader names an over-long field as such, not as a quote left open."""

from __future__ import annotations

import csv
import io

import pytest

from cadenza.domain.errors import Fatal
from cadenza.steps.base import CsvOptions
from cadenza.steps.builtin.lib.readers import open_source


def read_all(data: bytes) -> None:
    source = open_source("csv", io.BytesIO(data), "in/x.csv", CsvOptions())
    for _ in source.batches:
        pass


def test_a_long_field_in_a_row_of_up_to_1_mib_is_read() -> None:
    data = b"id,text\n1,short\n2," + b"x" * 700_000 + b"\n3,short\n"
    read_all(data)


def test_an_over_long_field_says_so() -> None:
    # 1.5 MB in one field: longer than a row may be (two 512 KiB blocks), and than Python's
    # field limit, which the strict reader that names the line applies.
    data = b"id,text\n1,short\n2," + b"x" * 1_500_000 + b"\n3,short\n"
    with pytest.raises(Fatal) as caught:
        read_all(data)
    message = str(caught.value)
    limit = f"{csv.field_size_limit():,}"
    assert message == (f"in/x.csv: line 3: over-long field: more than {limit} characters (a "
                       f"row is read up to about 1 MiB, the fields of the first row up to "
                       f"{limit} characters)")
    assert "quote" not in message


def test_a_row_over_1_mib_of_short_fields_says_so() -> None:
    header = b",".join(b"c%d" % i for i in range(1500))
    data = header + b"\n" + b",".join([b"1"] * 1500) + b"\n" + b",".join([b"y" * 1000] * 1500)
    with pytest.raises(Fatal, match=r"^in/x\.csv: a row is longer than about 1 MiB, the "
                                    r"longest a CSV row may be$"):
        read_all(data)


def test_an_over_long_quoted_field_with_paired_quotes_says_so() -> None:
    data = b'id,text\n1,"' + b"y" * 1_500_000 + b'"\n2,short\n'
    with pytest.raises(Fatal, match=r"line 2: over-long field: more than") as caught:
        read_all(data)
    assert "quote" not in str(caught.value)


def test_an_over_long_first_row_says_so() -> None:
    data = b"id," + b"h" * 200_000 + b"\n1,2\n"
    with pytest.raises(Fatal, match=r"in/x\.csv: line 1: over-long field: more than"):
        read_all(data)


def test_a_quote_left_open_is_still_named_when_the_field_runs_on() -> None:
    data = b'id,text\n1,"never closed\n' + b"2,more\n" * 30_000
    with pytest.raises(Fatal) as caught:
        read_all(data)
    message = str(caught.value)
    assert "line 2" in message and "quote opened on line 2 never closed" in message
