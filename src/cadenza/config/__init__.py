"""Reading, validating and writing ``cadenza.toml`` and ``jobs.toml``.

Public names (imported lazily, so that step modules can import the shared field types of
:mod:`cadenza.config.types` without loading the whole loader, which itself loads the
step registry)::

    load_home(home, *, resolve_secret=..., environ=os.environ) -> LoadedConfig
    load_settings(home, ...) -> LoadedSettings   (cadenza.toml alone; jobs.toml may be bad)
    validate_home(home, *, resolve_secret=..., environ=os.environ) -> list[Problem]
    validate_jobs_text(home, text, ...) / validate_settings_text(home, text, ...)
    Problem, LoadedConfig, Settings, JobConfig, parse_duration, format_duration
    writer: read_document, write_document, set_job, delete_job, set_preset
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cadenza.config.durations import format_duration, parse_duration
    from cadenza.config.loader import (
        LoadedConfig,
        LoadedSettings,
        load_home,
        load_settings,
        validate_home,
        validate_jobs_text,
        validate_settings_text,
    )
    from cadenza.config.problems import Problem
    from cadenza.config.schema_jobs import JobConfig, Preset
    from cadenza.config.schema_settings import Settings
    from cadenza.config.windows import Window, parse_window

_EXPORTS = {
    "format_duration": "cadenza.config.durations",
    "parse_duration": "cadenza.config.durations",
    "LoadedConfig": "cadenza.config.loader",
    "load_home": "cadenza.config.loader",
    "LoadedSettings": "cadenza.config.loader",
    "load_settings": "cadenza.config.loader",
    "validate_home": "cadenza.config.loader",
    "validate_jobs_text": "cadenza.config.loader",
    "validate_settings_text": "cadenza.config.loader",
    "Problem": "cadenza.config.problems",
    "JobConfig": "cadenza.config.schema_jobs",
    "Preset": "cadenza.config.schema_jobs",
    "Settings": "cadenza.config.schema_settings",
    "Window": "cadenza.config.windows",
    "parse_window": "cadenza.config.windows",
}

__all__ = [
    "JobConfig",
    "LoadedConfig",
    "LoadedSettings",
    "Preset",
    "Problem",
    "Settings",
    "Window",
    "format_duration",
    "load_home",
    "load_settings",
    "parse_duration",
    "parse_window",
    "validate_home",
    "validate_jobs_text",
    "validate_settings_text",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cadenza.config' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
