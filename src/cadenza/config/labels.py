"""Human labels of configuration keys, for the JSON schema of the config models (the job
editor's form, the API reference): the one place where a label is derived from a key.

A field that says more than its key (``Field(title="Keyword arguments")``) keeps its own
title; every other field gets :func:`human_title` of its key, through the
``field_title_generator`` of :class:`~cadenza.config.types.StrictModel`: ``op_kwargs`` →
"Keyword arguments", ``url`` → "URL", ``max_rows`` → "Max rows" (never "Op Kwargs").

``ADVANCED`` marks a rarely needed field (``Field(..., json_schema_extra=ADVANCED)``): the
editor folds it under "More options".
"""

from __future__ import annotations

from typing import Any

ADVANCED: dict[str, Any] = {"x-advanced": True}
"""``json_schema_extra`` of a field most jobs leave at its default."""

WORDS: dict[str, str] = {
    "op_kwargs": "Keyword arguments",
    "json": "JSON body",
    "csv": "CSV options",
    "requires": "Resources",
    "params": "Parameters",
    "log_level": "Log level",
    "max_concurrency": "Max concurrent runs",
    "catchup_max": "Catch-up limit",
    "budget_per_hour": "Runs per hour",
    "missed_grace": "Grace for a late fire",
    "on_overlap": "When the last run is still going",
    "on_missed": "Fires missed while down",
    "long_run": "Alert when a run lasts longer than",
    "on_failure": "Alert on failure",
    "base_seconds": "First delay (seconds)",
    "max_seconds": "Longest delay (seconds)",
    "step_args": "Step arguments",
    "skip_if_loaded": "Skip files already loaded",
    "on_missing": "When no file matches",
    "multi_valued": "Multi-valued attributes",
    "max_delete_ratio": "Max share of rows deleted",
    "type_coercion": "Type coercion",
    "calendar": "Business calendar",
    "days": "Days to run on",
    "shift": "A fire on a day off",
    "business_day": "Working day of the month",
    "start_by": "Late if not started by",
    "finish_by": "Late if not finished by",
}
"""Labels that are not the key's words."""

ACRONYMS: dict[str, str] = {
    "id": "ID", "url": "URL", "sql": "SQL", "json": "JSON", "csv": "CSV", "http": "HTTP",
    "ldap": "LDAP", "dn": "DN", "pdf": "PDF", "html": "HTML",
}


def human_title(name: str, info: object = None) -> str:
    """The label of the key ``name``: :data:`WORDS`, else its words, the first capitalized
    and acronyms in capitals (``page_size`` → "Page size", ``url`` → "URL"). ``info`` is
    pydantic's field info (unused: the signature of ``field_title_generator``)."""
    key = name.rstrip("_")
    if key in WORDS:
        return WORDS[key]
    words = [ACRONYMS.get(w, w) for w in key.split("_") if w]
    if not words:
        return name
    first = words[0]
    return " ".join([first if first.isupper() else first.capitalize(), *words[1:]])
