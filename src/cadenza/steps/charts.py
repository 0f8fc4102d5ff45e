"""Charts of ``report`` sections, drawn by matplotlib without a display (the Agg canvas,
used directly: no ``pyplot`` and its global state, so that steps in threads do not share a
figure) into PNG bytes that the report embeds.

``bar``: one bar per row at each ``x`` value (a category, shown as text), grouped when
``y`` names several columns. ``line``: one line per ``y`` column over ``x``; numbers and
dates on ``x`` keep their scale, other values are categories in row order. ``y`` values
must be numbers (Decimal is drawn as a float); NULL leaves a gap.
"""

from __future__ import annotations

import io
import math
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cadenza.domain.errors import Fatal

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.0, 100
MAX_CATEGORIES_LABELLED = 40


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
    axes.set_xlabel(x_name)
    if len(series) > 1:
        axes.legend()
    else:
        axes.set_ylabel(next(iter(series)))
    axes.grid(axis="y", alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
