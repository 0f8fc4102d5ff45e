"""A step output too large to keep, and the summary stored in its place.

A step's output is kept as JSON (in its step run, in the run's checkpoint, and in memory for
``${steps.NAME.KEY}`` of later steps) up to ``[limits].step_output_bytes``. A larger one is
replaced, where the step's result is checked, by a summary::

    {"truncated": true, "size": 209715200, "limit": 1048576, "keys": ["a", "b"]}

``size`` is the length of the output's JSON text, ``limit`` the cap it passed, ``keys`` the
first top-level keys (at most :data:`SHOWN_KEYS`, none longer than :data:`SHOWN_KEY_LENGTH`).
No part of the values is kept: a value cut short could hold the beginning of a secret that
the redactor, which masks whole values, would no longer recognise.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any

SHOWN_KEYS = 50
SHOWN_KEY_LENGTH = 100


def summarize(output: Mapping[str, Any], size: int, limit: int) -> dict[str, Any]:
    """The summary stored instead of ``output`` (``size`` characters of JSON, over
    ``limit``)."""
    keys = [k for k in islice(output, SHOWN_KEYS * 2) if len(k) <= SHOWN_KEY_LENGTH]
    return {"truncated": True, "size": size, "limit": limit, "keys": keys[:SHOWN_KEYS]}


def truncation(value: Any) -> tuple[int, int] | None:
    """``(size, limit)`` when ``value`` is such a summary (possibly with the ``rows`` the
    executor adds), else None."""
    if not isinstance(value, Mapping) or value.get("truncated") is not True:
        return None
    size, limit = value.get("size"), value.get("limit")
    if type(size) is not int or type(limit) is not int:
        return None
    return size, limit


def not_kept(step: str, size: int, limit: int) -> str:
    """Why the fields of ``step``'s output cannot be read."""
    return (f"the output of step {step!r} was not kept: its JSON is {size:,} bytes, more "
            f"than [limits].step_output_bytes ({limit:,}); only its size and keys were "
            "stored")
