"""Demo python steps: `callable = "demo_tasks:count"` in jobs.toml."""

from __future__ import annotations

from typing import Any


def count(upto: int = 3, ctx: Any = None) -> int:
    """Log each number up to ``upto``; the return value is the step's rows."""
    for i in range(1, upto + 1):
        if ctx is not None:
            ctx.log.info("counting %s", i)
    return upto


def check_profile(ctx: Any = None) -> dict[str, Any]:
    """Say which unit of the pool ``units`` this run rents (``ctx.resources``)."""
    held = [] if ctx is None else list(ctx.resources.get("units", ()))
    for unit in held:
        ctx.log.info("using unit %s (profile %s)", unit.resource_id,
                     unit.fields.get("profile"))
    return {"units": [unit.resource_id for unit in held]}
