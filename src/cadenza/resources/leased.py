"""What a step sees of a resource its run holds (SPEC §8).

This file is a stand-in of the pools branch's ``LeasedResource`` (same fields, same
module), so that the http step's route handling can be built and tested on its own; the
pools branch's version replaces it when merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LeasedResource:
    """A pool member held by the run: ``kind`` is "unit", "route" or "credential";
    ``proxy`` is a route's proxy URL (user-info with secrets resolved: never show it, see
    :func:`cadenza.resources.egress.shown_proxy`); ``route`` the bound route, if any."""

    resource_id: str
    pool: str
    kind: str
    proxy: str | None = None
    region: str | None = None
    fields: Mapping[str, str] = field(default_factory=dict)
    route: LeasedResource | None = None
