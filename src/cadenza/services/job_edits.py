"""What a job edit would change in the current jobs.toml, as a unified diff (the body of a
409 for a stale edit: the person sees what changed under them and what theirs would do)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any


def preview_diff(current_text: str, job_id: str, table: Mapping[str, Any] | None) -> str:
    """The diff from ``current_text`` to it with ``[jobs.job_id]`` set to ``table`` (or
    removed, ``None``); an edit that cannot apply gives the reason instead."""
    import tomlkit

    from cadenza.config.tomlbody import kept_spacing
    from cadenza.config.tomledit import delete_job, set_job

    doc = tomlkit.parse(current_text)
    try:
        if table is None:
            delete_job(doc, job_id)
        else:
            set_job(doc, job_id, table)
    except (ValueError, KeyError) as exc:
        return f"(the edit does not apply to the current file: {exc})"
    return "".join(difflib.unified_diff(
        current_text.splitlines(keepends=True),
        kept_spacing(current_text, doc.as_string()).splitlines(keepends=True),
        fromfile="jobs.toml (current)", tofile="jobs.toml (with your edit)"))
