"""The step types: every entry point of the group ``cadenza.steps``.

Built-in types register exactly like third-party ones, through entry points in
``pyproject.toml``::

    [project.entry-points."cadenza.steps"]
    sql_query = "cadenza.steps.builtin.sql_query:SqlQueryStep"

A step type is a :class:`StepType` subclass whose ``name`` equals the entry point's name
and whose ``Config`` is a :class:`~cadenza.steps.base.StepConfig` subclass. An entry point
that cannot be imported, or is not such a class, is left out and described in
:func:`registry_errors` (the configuration check reports these as warnings), so that one
broken plugin never hides the other types.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import ClassVar

from cadenza.steps.base import StepConfig

GROUP = "cadenza.steps"


class StepType:
    """Base class of step types: a ``name`` (the ``type`` written in jobs.toml), a
    pydantic ``Config`` model holding the step's fields, the fields whose ``${...}``
    tokens the step renders itself (``raw_fields``), and ``run``.

    ``run(self, ctx: StepContext, config: Config) -> StepResult`` (see
    :mod:`cadenza.steps.runtime`) is defined by every type that can execute; the
    executor refuses, with a clear error, a step whose type has no ``run``.
    """

    name: ClassVar[str]
    Config: ClassVar[type[StepConfig]]
    raw_fields: ClassVar[frozenset[str]] = frozenset()


@dataclass(frozen=True)
class _Loaded:
    types: dict[str, type[StepType]]
    errors: tuple[str, ...]


@functools.cache
def _load() -> _Loaded:
    types: dict[str, type[StepType]] = {}
    sources: dict[str, str] = {}
    errors: list[str] = []
    seen: set[tuple[str, str]] = set()
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value)):
        if (ep.name, ep.value) in seen:
            continue  # the same distribution seen twice on sys.path
        seen.add((ep.name, ep.value))
        if ep.name in types:
            errors.append(f"step type {ep.name!r} is registered twice ({sources[ep.name]} and "
                          f"{ep.value}); using {sources[ep.name]}")
            continue
        try:
            obj = ep.load()
        except Exception as exc:  # a plugin's import can fail in any way; report, don't crash
            errors.append(f"step type {ep.name!r} ({ep.value}) failed to load: "
                          f"{type(exc).__name__}: {exc}")
            continue
        problem = _check(ep.name, obj)
        if problem:
            errors.append(f"step type {ep.name!r} ({ep.value}) {problem}")
            continue
        types[ep.name] = obj
        sources[ep.name] = ep.value
    return _Loaded(types, tuple(errors))


def _check(name: str, obj: object) -> str | None:
    if not (isinstance(obj, type) and issubclass(obj, StepType)):
        return "is not a StepType subclass"
    if getattr(obj, "name", None) != name:
        return f"has name {getattr(obj, 'name', None)!r}, expected {name!r}"
    config = getattr(obj, "Config", None)
    if not (isinstance(config, type) and issubclass(config, StepConfig)):
        return "has no Config subclassing cadenza.steps.base.StepConfig"
    return None


def registry() -> dict[str, type[StepType]]:
    """Every step type that loaded, by name (sorted). Loaded once per process."""
    return dict(_load().types)


def registry_errors() -> list[str]:
    """Why some registered step types were left out (empty when all loaded)."""
    return list(_load().errors)


def reload_registry() -> None:
    """Forget the loaded types, so that the next :func:`registry` reads entry points again."""
    _load.cache_clear()
