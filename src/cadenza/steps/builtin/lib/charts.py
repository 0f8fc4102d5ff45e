"""Charts of ``report`` sections, drawn by matplotlib without a display (the Agg canvas,
used directly: no ``pyplot`` and its global state, so that steps in threads do not share a
figure) into PNG bytes that the report embeds.

``bar``: one bar per row at each ``x`` value (a category, shown as text), grouped when
``y`` names several columns. ``line``: one line per ``y`` column over ``x``; numbers and
dates on ``x`` keep their scale, other values are categories in row order. ``y`` values
must be numbers (Decimal is drawn as a float); NULL leaves a gap.

Chinese, Japanese and Korean labels need a font that has their glyphs (DejaVu Sans, the
default, has none: matplotlib would draw empty boxes). :func:`cjk_families` finds the
installed ones among :data:`CJK_FAMILIES`; each text of a chart is given DejaVu Sans then
those (matplotlib falls back glyph by glyph). A chart with CJK text and no such font fails
with the package to install.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from functools import cache
from typing import Any

from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cadenza.domain.errors import Fatal

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.0, 100
MAX_CATEGORIES_LABELLED = 40

CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",
                "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Microsoft YaHei", "SimHei",
                "PingFang SC", "Hiragino Sans GB", "Noto Sans CJK JP", "Noto Sans CJK TC",
                "Noto Serif CJK SC", "Droid Sans Fallback", "Arial Unicode MS")
"""Fonts with Chinese (and Japanese, Korean) glyphs, in order of preference: Debian's
fonts-noto-cjk, fonts-wqy-*, Windows' Microsoft YaHei and SimHei, macOS' PingFang."""
BASE_FAMILY = "DejaVu Sans"
NO_CJK_FONT = ("no font with Chinese, Japanese or Korean characters is installed, so the "
               "chart would draw them as empty boxes: install one (Debian, Ubuntu: "
               "`apt install fonts-noto-cjk`; Fedora: `dnf install google-noto-sans-cjk-fonts`;"
               " Windows has Microsoft YaHei; macOS has PingFang SC) and restart Cadenza")
_CJK = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


def has_cjk(texts: Iterable[object]) -> bool:
    """True when one of ``texts`` holds a Chinese, Japanese or Korean character."""
    return any(_CJK.search(str(text)) for text in texts if text is not None)


_CJK_FILES = re.compile(r"(?i)(notosans|notoserif|sourcehan).*(cjk|sc|cn)|wqy|msyh|simhei|"
                        r"pingfang|hiragino.*gb|droidsansfallback|arialuni")


@cache
def cjk_families(candidates: tuple[str, ...] = CJK_FAMILIES) -> tuple[str, ...]:
    """The installed fonts among ``candidates``, from matplotlib's font list (read once).
    That list is cached on disk by matplotlib: a CJK font installed after it was built is
    looked for among the system's font files and added."""
    manager = font_manager.fontManager
    found = tuple(name for name in candidates if name in {f.name for f in manager.ttflist})
    if found:
        return found
    for path in font_manager.findSystemFonts():
        if _CJK_FILES.search(path.replace("\\", "/").rsplit("/", 1)[-1]):
            try:
                manager.addfont(path)
            except (OSError, RuntimeError, ValueError):
                continue
    return tuple(name for name in candidates if name in {f.name for f in manager.ttflist})


def families_for(texts: Iterable[object], section: str,
                 candidates: tuple[str, ...] = CJK_FAMILIES) -> list[str]:
    """The font family list for a chart showing ``texts``: DejaVu Sans, then the installed
    CJK fonts; :class:`Fatal` naming the package to install when the texts need one and
    none is found."""
    texts = list(texts)
    found = cjk_families(candidates)
    if not found and has_cjk(texts):
        raise Fatal(f"report section {section!r}: {NO_CJK_FONT}")
    return [BASE_FAMILY, *found]


def numbers(section: str, column: str, values: list[Any]) -> list[float]:
    """The ``y`` values as floats (NULL → NaN: a gap); :class:`Fatal` naming the section
    and column at the first value that is not a number."""
    out: list[float] = []
    for row, value in enumerate(values, 1):
        if value is None:
            out.append(math.nan)
        elif isinstance(value, int | float | Decimal) and not isinstance(value, bool):
            out.append(float(value))
        else:
            raise Fatal(f"report section {section!r}: chart column {column!r} holds "
                        f"{type(value).__name__} {str(value)[:40]!r} in row {row}; "
                        "expected numbers")
    return out


def draw(kind: str, section: str, x_name: str, x: list[Any], ys: dict[str, list[Any]],
         ) -> bytes:
    """A PNG of the chart (see the module docstring)."""
    series = {name: numbers(section, name, values) for name, values in ys.items()}
    family = families_for([section, x_name, *ys, *x], section)
    figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    scaled = kind == "line" and x and all(
        isinstance(v, int | float | Decimal | date) and not isinstance(v, bool) for v in x)
    if scaled:
        xs: list[Any] = [float(v) if isinstance(v, Decimal) else v for v in x]
        for name, values in series.items():
            axes.plot(xs, values, marker="o" if len(xs) <= 50 else None, label=name)
        if any(isinstance(v, date | datetime) for v in xs):
            figure.autofmt_xdate()
    else:
        labels = ["" if v is None else str(v) for v in x]
        positions = list(range(len(labels)))
        if kind == "bar":
            width = 0.8 / max(len(series), 1)
            for i, (name, values) in enumerate(series.items()):
                shift = (i - (len(series) - 1) / 2) * width
                axes.bar([p + shift for p in positions], values, width=width, label=name)
        else:
            for name, values in series.items():
                axes.plot(positions, values, marker="o" if len(labels) <= 50 else None,
                          label=name)
        if len(labels) <= MAX_CATEGORIES_LABELLED:
            axes.set_xticks(positions, labels, rotation=45 if len(labels) > 8 else 0,
                            ha="right" if len(labels) > 8 else "center")
    axes.set_xlabel(x_name, fontfamily=family)
    if len(series) > 1:
        axes.legend(prop={"family": family})
    else:
        axes.set_ylabel(next(iter(series)), fontfamily=family)
    for label in [*axes.get_xticklabels(), *axes.get_yticklabels()]:
        label.set_fontfamily(family)
    axes.grid(axis="y", alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
