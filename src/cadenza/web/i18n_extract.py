"""A Babel extractor for the job editor's labels and help (``babel.cfg``, ``make i18n``).

The editor's form is generated from the config models' JSON schema
(:mod:`cadenza.web.ui.editor_form`), so its labels and help are not literal strings of a
template: this extractor builds the form of a job and of every step type and yields each
label and help text, which the page shows through ``|translated``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def editor_texts() -> list[str]:
    """Every label and help text the job editor's form can show, in a stable order."""
    from cadenza.services import job_drafts
    from cadenza.web.ui.editor_form import build, walk

    forms = [build(job_drafts.job_schema(), {}, name="job", path="", skip=("id", "steps")),
             build(job_drafts.step_base_schema(), {}, name="step", path="step")]
    forms += [build(schema, {}, name="step", path="step")
              for _, schema in sorted(job_drafts.step_schemas().items())]
    texts: dict[str, None] = {}
    for fields in forms:
        for field in walk(fields):
            for text in (field.label, field.help):
                if text and text.strip():
                    texts.setdefault(text, None)
    return list(texts)


def extract_editor(fileobj: Any, keywords: Any, comment_tags: Any,
                   options: Any) -> Iterator[tuple[int, str | None, str, list[str]]]:
    """Babel's extractor interface: ``(line, function, message, comments)`` per text."""
    for text in editor_texts():
        yield 1, None, text, ["the job editor's form"]
