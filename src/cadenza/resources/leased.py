"""What a step sees of the resources its run holds: :class:`LeasedResource` (docs/pools.md).

``ctx.resources`` maps a pool's name to the members the run (and the current step) holds;
``ctx.route(pool)`` picks a held route. Values are resolved (a proxy URL's password, a
credential's fields): they came from secrets, which the home's redactor knows, so they are
masked wherever they would be logged, stored or shown.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class Fields(Mapping[str, str]):
    """A read-only mapping of a member's fields that crosses a process boundary (a step
    with ``isolation = "process"`` receives it pickled)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        self._data = dict(data or {})

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Fields({sorted(self._data)})"  # names only: values may be secrets

    def __reduce__(self) -> tuple[Any, ...]:
        return (Fields, (self._data,))


@dataclass(frozen=True, slots=True)
class LeasedResource:
    """One pool member held by the run: its identity and what a step uses of it."""

    resource_id: str
    pool: str
    kind: str
    """``"unit"``, ``"route"`` or ``"credential"``."""
    proxy: str | None = field(default=None, repr=False)
    """A route's proxy URL (user-info with its secrets resolved)."""
    region: str | None = None
    """A route's expected egress region."""
    fields: Mapping[str, str] = field(default_factory=Fields, repr=False)
    """A credential's (or unit's) fields, secrets resolved."""
    route: LeasedResource | None = None
    """The route bound to this member, leased with it."""


def find_route(resources: Mapping[str, Sequence[LeasedResource]],
               pool: str | None = None) -> LeasedResource | None:
    """A held route: of ``pool`` when given (a member of it that is a route, or the route
    bound to one of its members), else any held route, bound ones included; ``None`` when
    the run holds none."""
    pools = [pool] if pool is not None else sorted(resources)
    for name in pools:
        for member in resources.get(name, ()):
            if member.kind == "route":
                return member
            if member.route is not None and (pool is None or member.route.pool == pool
                                             or member.pool == pool):
                return member.route
    if pool is not None:
        for members in resources.values():
            for member in members:
                if member.route is not None and member.route.pool == pool:
                    return member.route
    return None
