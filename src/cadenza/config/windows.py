"""Run windows for the config layer: re-exported from :mod:`cadenza.domain.windows`.

The window dialect is pure domain logic (admission evaluates it on every decision); this
module keeps the config layer's import path working.
"""

from __future__ import annotations

from cadenza.domain.windows import DAY_NAMES, EXPECTED, Window, parse_window

__all__ = ["DAY_NAMES", "EXPECTED", "Window", "parse_window"]
