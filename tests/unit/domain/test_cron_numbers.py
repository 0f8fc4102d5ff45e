"""Cron numbers are ASCII digits, and a step must fit in its field (SPEC §6)."""

from __future__ import annotations

import re

import pytest

from cadenza.domain.cron import CronError, parse_cron


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("١ * * * *", "minute"),  # Arabic-Indic one: int() reads it as 1
        ("0 ² * * *", "hour"),  # superscript two: isdigit() says yes, int() refuses
        ("0 0 ３ * *", "day-of-month"),  # fullwidth three
        ("*/５ * * * *", "minute"),
        ("0 0 * 1-١٢ *", "month"),
    ],
)
def test_numbers_are_ascii_digits_only(expr: str, field: str) -> None:
    with pytest.raises(CronError) as caught:
        parse_cron(expr)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("expr", "field", "text"),
    [
        ("*/60 * * * *", "minute", "step 60 in '*/60' is larger than the field's range 0-59"),
        ("0 */24 * * *", "hour", "range 0-23"),
        ("0 0 */31 * *", "day-of-month", "range 1-31"),
        ("0 0 1 */12 *", "month", "range 1-12"),
        ("0 0 * * 1/7", "day-of-week", "range 0-6"),
        ("5-10/100 * * * *", "minute", "step 100"),
    ],
)
@pytest.mark.reliability_case(10)
def test_a_step_larger_than_the_field_is_an_error_naming_the_field(
        expr: str, field: str, text: str) -> None:
    with pytest.raises(CronError, match=re.escape(text)) as caught:
        parse_cron(expr)
    assert caught.value.field == field


def test_steps_within_the_range_still_work() -> None:
    assert parse_cron("*/59 * * * *").minutes == frozenset({0, 59})
    assert parse_cron("0 */23 * * *").hours == frozenset({0, 23})
    assert parse_cron("0 0 * * */6").weekdays == frozenset({0, 6})
    assert parse_cron("*/15 * * * *").minutes == frozenset({0, 15, 30, 45})
