"""Schedules in words (the jobs catalogue's "Schedule" column)."""

from __future__ import annotations

import pytest

from cadenza.domain.cron_words import describe


@pytest.mark.parametrize(("expression", "words"), [
    ("0 2 * * *", "every day at 02:00"),
    ("@daily", "every day at 00:00"),
    ("0 6 1 * *", "monthly on day 1 at 06:00"),
    ("@monthly", "monthly on day 1 at 00:00"),
    ("0 6 1,15 * *", "monthly on days 1 and 15 at 06:00"),
    ("0 0 1 1 *", "yearly on January 1 at 00:00"),
    ("30 7 1 jan,jul *", "on day 1 in January and July at 07:30"),
    ("0 * 1 * *", "every hour, monthly on day 1"),
    ("*/15 * * * *", "every 15 minutes"),
    ("* * * * *", "every minute"),
    ("0 * * * *", "every hour"),
    ("5 * * * *", "every hour at :05"),
    ("0 */2 * * *", "every 2 hours at :00"),
    ("30 9 * * mon-fri", "on weekdays at 09:30"),
    ("0 10 * * sat,sun", "on weekends at 10:00"),
    ("0 9,17 * * mon", "every Monday at 09:00 and 17:00"),
    ("0 8 1,15 * mon", "on the 1st and 15th of the month or Monday at 08:00"),
    ("5 4 * jan,jul *", "every day in January and July at 04:05"),
    ("0 0 22 * *", "monthly on day 22 at 00:00"),
    ("1,2 3-5 * * *", "cron '1,2 3-5 * * *'"),  # too long to say: the expression
])
def test_words(expression: str, words: str) -> None:
    assert describe(expression) == words


def test_the_zone_is_named_and_a_bad_expression_is_kept() -> None:
    assert describe("0 2 * * *", "Europe/Paris") == "every day at 02:00, Europe/Paris"
    assert describe("not cron", "UTC") == "cron 'not cron', UTC"
