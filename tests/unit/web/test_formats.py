"""Numbers, shares and durations in each page language (Babel's locale data)."""

from __future__ import annotations

import pytest

from cadenza.web.ui import formats

NNBSP, NBSP = "\u202f", "\xa0"


@pytest.mark.parametrize(("lang", "value", "decimals", "said"), [
    ("en", 1234.5, 1, "1,234.5"),
    ("fr", 1234.5, 1, f"1{NNBSP}234,5"),
    ("zh_Hans", 1234.5, 1, "1,234.5"),
    ("fr", 7, 0, "7"),
])
def test_numbers_are_grouped_and_pointed_as_the_language_writes_them(
        lang: str, value: float, decimals: int, said: str) -> None:
    assert formats.number(lang, value, decimals) == said


def test_shares_are_percentages_of_the_language() -> None:
    assert formats.share("en", 0.125) == "12.5 %"       # what the CLI prints
    assert formats.share("fr", 0.125) == f"12,5{NBSP}%"
    assert formats.share("zh_Hans", 0.125) == "12.5%"
    assert formats.share("fr", 0.5, 0) == f"50{NBSP}%"


@pytest.mark.parametrize(("seconds", "en", "fr", "zh"), [
    (0.25, "250 ms", f"250{NNBSP}ms", "250毫秒"),
    (75.0, "75.0 s", f"75,0{NNBSP}s", "75.0秒"),
    (134, "2 min 14 s", f"2{NBSP}min 14{NNBSP}s", "2分钟14秒"),
    (7500, "2 h 5 min", f"2{NNBSP}h 5{NBSP}min", "2小时5分钟"),
])
def test_durations_in_each_language(seconds: float, en: str, fr: str, zh: str) -> None:
    assert formats.duration("en", seconds) == en
    assert formats.duration("fr", seconds) == fr
    assert formats.duration("zh_Hans", seconds) == zh


def test_each_language_has_every_unit_with_a_place_for_the_number() -> None:
    for lang in ("en", "fr", "zh_Hans"):
        said = formats.units(lang)
        assert set(said) == {"ms", "s", "min", "h"}
        assert all(pattern.count("{}") == 1 for pattern in said.values()), said
