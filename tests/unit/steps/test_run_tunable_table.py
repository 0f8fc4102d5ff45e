"""docs/security.md's table of what a run may set is generated from the step types' config
models (the ``RUN_TUNABLE`` marks), so the page cannot drift from the code; and the marks
themselves follow the rule (no file, destination or code field is tunable)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from cadenza.executor.plan import settable_fields
from cadenza.steps.base import StepConfig, is_run_tunable
from cadenza.steps.registry import registry

DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"
BEGIN = "<!-- run-tunable table: generated from the step config models -->"
END = "<!-- end of the run-tunable table -->"
NEVER = {"path", "file", "template", "attach", "to", "channel", "url", "connection", "table",
         "target", "source", "callable", "query", "job", "via", "headers", "base", "sections"}


def _code(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names) or "—"


def _nested(config: type[BaseModel], name: str) -> str:
    field = next(f for n, f in config.model_fields.items() if name in (n, f.alias))
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        inner = [f.alias or n for n, f in annotation.model_fields.items()]
        return f"`{name}` ({', '.join(inner)})"
    return f"`{name}`"


def table() -> str:
    """The markdown table: one row per built-in step type."""
    rows = ["| Step type | A run may set | Only an editor may set (jobs.toml) |",
            "|---|---|---|"]
    types = registry()
    for name in sorted(types):
        config = types[name].Config
        if not config.__module__.startswith("cadenza.steps."):
            continue
        fields = settable_fields(config)
        if name == "python":
            rows.append(f"| `{name}` | its `op_kwargs` keys (the function's own arguments) "
                        f"| {_code(fields)} |")
            continue
        tunable = [_nested(config, f) for f in fields if is_run_tunable(config, f)]
        fixed = [f for f in fields if not is_run_tunable(config, f)]
        rows.append(f"| `{name}` | {', '.join(tunable) or '—'} | {_code(fixed)} |")
    return "\n".join(rows)


def test_the_table_in_the_doc_matches_the_models() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"docs/security.md lacks {BEGIN!r}"
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == table(), "regenerate the table in docs/security.md:\n" + table()


def test_no_file_destination_or_code_field_is_tunable() -> None:
    for name in registry():
        config = registry()[name].Config
        for field in settable_fields(config):
            if field in NEVER:
                assert not is_run_tunable(config, field), (name, field)


def test_the_fields_every_step_has_are_not_tunable() -> None:
    for field in StepConfig.model_fields:
        assert not is_run_tunable(StepConfig, field)
