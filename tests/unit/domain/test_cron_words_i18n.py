"""Schedules in words in French and Simplified Chinese, every shape the English words say."""

from __future__ import annotations

import pytest

from cadenza.domain.cron_words_i18n import describe_in

CASES = [
    ("0 2 * * *", "tous les jours à 02:00", "每天 02:00"),
    ("* * * * *", "chaque minute", "每分钟"),
    ("*/15 * * * *", "toutes les 15 minutes", "每 15 分钟"),
    ("0 * * * *", "toutes les heures", "每小时"),
    ("5 * * * *", "toutes les heures à :05", "每小时的第 5 分钟"),
    ("0,30 * * * *", "toutes les 30 minutes", "每 30 分钟"),
    ("5,35 * * * *", "toutes les heures à :05 et :35", "每小时的第 5、35 分钟"),
    ("10 */6 * * *", "toutes les 6 heures à :10", "每 6 小时的第 10 分钟"),
    ("0 2,14 * * *", "tous les jours à 02:00 et 14:00", "每天 02:00、14:00"),
    ("30 8 * * mon-fri", "en semaine à 08:30", "工作日 08:30"),
    ("0 10 * * sat,sun", "le week-end à 10:00", "周末 10:00"),
    ("0 9 * * mon,fri", "le lundi et vendredi à 09:00", "每周一、周五 09:00"),
    ("*/5 * * * mon-fri", "toutes les 5 minutes, en semaine", "工作日每 5 分钟"),
    ("0 6 1 * *", "chaque mois le 1er à 06:00", "每月1日 06:00"),
    ("0 6 1,15 * *", "chaque mois les 1er et 15 à 06:00", "每月1日、15日 06:00"),
    ("0 0 1 1 *", "chaque année le 1er janvier à 00:00", "每年1月1日 00:00"),
    ("0 6 1 1,7 *", "le 1er en janvier et juillet à 06:00", "1月、7月的1日 06:00"),
    ("0 3 * 12 *", "tous les jours en décembre à 03:00", "12月的每天 03:00"),
    ("0 6 1 * mon", "le 1er du mois ou le lundi à 06:00", "每月1日或每周一 06:00"),
    ("1,2 3-5 * * *", "cron '1,2 3-5 * * *'", "cron '1,2 3-5 * * *'"),
]


@pytest.mark.parametrize(("expression", "fr", "zh"), CASES)
def test_words(expression: str, fr: str, zh: str) -> None:
    assert describe_in("fr", expression) == fr
    assert describe_in("zh_Hans", expression) == zh


def test_zone_and_bad_expression() -> None:
    assert describe_in("fr", "0 2 * * *", "Europe/Paris") == "tous les jours à 02:00, Europe/Paris"
    assert describe_in("zh_Hans", "0 2 * * *", "Europe/Paris") == "每天 02:00（Europe/Paris）"
    assert describe_in("fr", "nope").startswith("cron 'nope'")
