"""A parameter's type is its declared default's; :func:`convert` turns text (``-p``, the
form), JSON values (the API) and TOML values (presets, ``call_job``) into it, or names the
parameter and the type it expected."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest

from cadenza.domain.params import ParamTypeError, convert, convert_all, param_type


@pytest.mark.parametrize(("default", "kind"), [
    (1, "integer"), (0.5, "float"), (True, "boolean"), (date(2027, 1, 31), "date"),
    (datetime(2027, 1, 31, 8), "datetime"), ([1], "list"), ({"a": 1}, "table"),
    ("x", "string"), ("${month.current}", "string"), (None, "any"),
])
def test_the_type_is_the_declared_defaults(default: Any, kind: str) -> None:
    assert param_type(default) == kind


@pytest.mark.parametrize(("default", "given", "expected"), [
    (1, "7", 7), (1, " -3 ", -3), (1, 7, 7),
    (0.5, "3", 3.0), (0.5, "2.5e3", 2500.0), (0.5, 2, 2.0), (0.5, 1.25, 1.25),
    (False, "true", True), (True, "False", False), (True, False, False),
    (date(2027, 1, 1), "2027-02-28", "2027-02-28"),
    (date(2027, 1, 1), date(2027, 3, 1), "2027-03-01"),
    (datetime(2027, 1, 1), "2027-02-28T06:30:00", "2027-02-28T06:30:00"),
    (datetime(2027, 1, 1), "2027-02-28 06:30:00+01:00", "2027-02-28T06:30:00+01:00"),
    (datetime(2027, 1, 1), datetime(2027, 3, 1, tzinfo=UTC), "2027-03-01T00:00:00+00:00"),
    ([], '["a", 1]', ["a", 1]), ([], [1, 2], [1, 2]),
    ({}, '{"k": [1]}', {"k": [1]}), ({}, {"k": 1}, {"k": 1}),
    ("x", "42", "42"), ("x", "", ""),
    (None, 42, 42), (None, "text", "text"),
    (1, "${run.id}", "${run.id}"),  # a token: resolved and typed when the run starts
])
def test_values_convert_to_the_type(default: Any, given: Any, expected: Any) -> None:
    converted = convert("p", given, default)
    assert converted == expected and type(converted) is type(expected)


@pytest.mark.parametrize(("default", "given", "message"), [
    (1, "x", "parameter p: expected an integer, got 'x'"),
    (1, "7.0", "parameter p: expected an integer, got '7.0'"),
    (1, "1_000", "parameter p: expected an integer, got '1_000'"),
    (1, True, "parameter p: expected an integer, got True"),
    (1, 7.5, "parameter p: expected an integer, got 7.5"),
    (0.5, "nan", "parameter p: expected a number, got 'nan'"),
    (0.5, "inf", "parameter p: expected a number, got 'inf'"),
    (0.5, False, "parameter p: expected a number, got False"),
    (True, "yes", "parameter p: expected true or false, got 'yes'"),
    (True, 1, "parameter p: expected true or false, got 1"),
    (date(2027, 1, 1), "2027-02-30", "parameter p: expected a date (YYYY-MM-DD), got "
                                     "'2027-02-30'"),
    (date(2027, 1, 1), datetime(2027, 1, 1), "parameter p: expected a date (YYYY-MM-DD)"),
    (datetime(2027, 1, 1), "tomorrow", "parameter p: expected a date and time"),
    (datetime(2027, 1, 1), date(2027, 1, 1), "parameter p: expected a date and time"),
    ([], "{}", "parameter p: expected a list (JSON, like [1, 2]), got '{}'"),
    ([], "[1,", "parameter p: expected a list"),
    ({}, "[1]", "parameter p: expected a table"),
    ({}, [1], "parameter p: expected a table"),
    ("x", 5, "parameter p: expected a string, got 5"),
])
@pytest.mark.reliability_case(4)
def test_a_value_that_does_not_convert_names_the_parameter_and_the_type(
        default: Any, given: Any, message: str) -> None:
    with pytest.raises(ParamTypeError) as caught:
        convert("p", given, default)
    assert str(caught.value).startswith(message)


def test_a_label_names_where_the_value_was_given() -> None:
    with pytest.raises(ParamTypeError, match=r"^--arg load\.limit: expected an integer"):
        convert("limit", "x", 5, label="--arg load.limit")


def test_convert_all_keeps_undeclared_names_and_lists_every_problem() -> None:
    values, problems = convert_all({"n": "7", "b": "maybe", "d": "x", "other": "1"},
                                   {"n": 1, "b": True, "d": date(2027, 1, 1)})
    assert values == {"n": 7, "b": "maybe", "d": "x", "other": "1"}
    assert problems == ["parameter b: expected true or false, got 'maybe'",
                        "parameter d: expected a date (YYYY-MM-DD), got 'x'"]
