"""Numbers, shares and durations as each page language writes them, through Babel.

``1 234,5`` in French, ``1,234.5`` in English and Chinese; a duration's units from the
locale's data (``1,5 s``, ``2 min 14 s`` in French; ``1.5秒``, ``2分钟14秒`` in Chinese).
English keeps the short units the CLI prints (``ms``, ``s``, ``min``, ``h``). Dates and
relative times are written in the browser (``Intl``, in the page's ``lang``): a page does
not know the reader's zone, the browser does (docs/ui.md "Languages and translations").
"""

from __future__ import annotations

from functools import cache

from babel import Locale
from babel.numbers import format_decimal, format_percent
from babel.units import format_unit

UNIT_NAMES = {"ms": "duration-millisecond", "s": "duration-second",
              "min": "duration-minute", "h": "duration-hour"}
_ENGLISH_UNITS = {"ms": "{} ms", "s": "{} s", "min": "{} min", "h": "{} h"}


@cache
def units(lang: str) -> dict[str, str]:
    """Each duration unit of ``lang`` as a pattern (``{}`` where the number goes)."""
    if lang == "en":
        return dict(_ENGLISH_UNITS)
    return {short: format_unit(7, name, length="short", locale=lang).replace("7", "{}")
            for short, name in UNIT_NAMES.items()}


def _joiner(lang: str) -> str:
    """What goes between the parts of ``2 min 14 s``: nothing in Chinese (``2分钟14秒``)."""
    return "" if lang.startswith("zh") else " "


def number(lang: str, value: float | int, decimals: int = 0) -> str:
    """``value`` with ``decimals`` digits after the separator, grouped as ``lang`` does."""
    pattern = "#,##0" + ("." + "0" * decimals if decimals > 0 else "")
    return format_decimal(value, format=pattern, locale=lang)


def share(lang: str, fraction: float, decimals: int = 1) -> str:
    """A fraction (0.125) as a percentage in ``lang``: ``12.5 %`` in English (what the CLI
    prints), ``12,5 %`` in French, ``12.5%`` in Chinese."""
    if lang == "en":
        return f"{fraction * 100:.{decimals}f} %"
    pattern = Locale.parse(lang).percent_formats[None].pattern
    digits = "." + "0" * decimals if decimals > 0 else ""
    return format_percent(fraction, format=pattern.replace("#,##0", "#,##0" + digits, 1),
                          locale=lang)


def duration(lang: str, seconds: float) -> str:
    """A duration as the pages show it: milliseconds under a second, seconds with one
    decimal under two minutes, minutes and seconds under two hours, else hours and minutes."""
    said = units(lang)
    glue = _joiner(lang)
    if seconds < 1:
        return said["ms"].format(round(seconds * 1000))  # 0 to 1000: the same everywhere
    if seconds < 120:
        return said["s"].format(number(lang, seconds, 1))
    if seconds < 7200:
        return glue.join((said["min"].format(int(seconds // 60)),
                          said["s"].format(int(seconds % 60))))
    return glue.join((said["h"].format(int(seconds // 3600)),
                      said["min"].format(int((seconds % 3600) // 60))))
