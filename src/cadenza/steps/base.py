"""What every step's config has, and option groups that several step types share.

A step type's ``Config`` subclasses :class:`StepConfig` and adds exactly the fields of its
row in the step table of docs/configuration.md. Fields that name a connection, pool, job or
channel carry a :class:`~cadenza.config.types.Ref` mark so that the cross-reference check
finds them.
"""

from __future__ import annotations

import codecs
import re
from datetime import timedelta
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, field_validator

from cadenza.config.types import (
    Duration,
    Identifier,
    JsonMap,
    NonEmptyStr,
    PoolNeeds,
    Ref,
    RetryPolicy,
    StrictModel,
    fail,
    without_tokens,
)

RUN_TUNABLE: dict[str, Any] = {"run_tunable": True}
"""``Field(json_schema_extra=RUN_TUNABLE)`` marks a config field that a run's values (``cadenza
run --arg``, the API's ``step_args``, the "Run with parameters" form, a preset saved by an
operator) may set. A field without the mark is not tunable: only an editor changes it, in
jobs.toml. Mark only fields that choose how much, how or in what shape (batch sizes, modes,
delimiters, limits, formats), never what file is read or written, where data goes or what
code runs."""


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def is_run_tunable(config_type: type[BaseModel], key: str) -> bool:
    """Whether a run may set the (possibly dotted, e.g. ``csv.delimiter``) field ``key`` of
    ``config_type``: every field on the way is marked :data:`RUN_TUNABLE`, and a whole nested
    table only when each of its fields is."""
    model: type[BaseModel] | None = config_type
    for part in key.split("."):
        if model is None:
            return False
        found = next((f for name, f in model.model_fields.items()
                      if part in (name, f.alias)), None)
        extra = found.json_schema_extra if found is not None else None
        if found is None or not isinstance(extra, dict) or extra.get("run_tunable") is not True:
            return False
        model = _nested_model(found.annotation)
    if model is not None:
        return all(is_run_tunable(model, f.alias or name)
                   for name, f in model.model_fields.items())
    return True


FileFormat = Literal["csv", "xlsx", "parquet", "json"]
SqlConnectionName = Annotated[str, Ref("connection", "sql")]
LoadMode = Literal["append", "overwrite", "upsert"]
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?")
_EXTENSIONS: dict[str, FileFormat] = {
    ".csv": "csv", ".xlsx": "xlsx", ".parquet": "parquet", ".json": "json",
}


def format_from_path(path: str) -> FileFormat | None:
    """The file format a path's extension implies (``None`` when it implies none)."""
    name = without_tokens(path).rsplit("/", 1)[-1].lower()
    dot = name.rfind(".")
    return _EXTENSIONS.get(name[dot:]) if dot >= 0 else None


def _table(value: str) -> str:
    if not _TABLE.fullmatch(value):
        fail(f"expected a table name like 'staging_sales' or 'schema.table' (letters, digits, "
             f"_; no ${{...}} tokens), got {value!r}")
    return value


TableName = Annotated[str, AfterValidator(_table)]


def to_list(value: object) -> object:
    """``key = "id"`` is read as ``key = ["id"]``."""
    return [value] if isinstance(value, str) else value


def _non_empty_names(value: list[str]) -> list[str]:
    if not value or any(not v.strip() for v in value):
        fail("expected one or more column names")
    return value


ColumnList = Annotated[list[str], BeforeValidator(to_list), AfterValidator(_non_empty_names)]


class StepConfig(StrictModel):
    """The fields every step has (docs/configuration.md): its name (unique in the job), its
    type, whether it runs, its timeout, a retry policy overriding the job's, its own
    arguments, and the resources it leases beyond the run's."""

    name: Identifier = Field(description=(
        "Unique in the job; later steps read its output as ${steps.NAME...}, e.g. load."))
    type: NonEmptyStr = Field(description="What the step does, e.g. sql_query.")
    enabled: bool = Field(True, description="A disabled step is skipped by every run.")
    timeout: Duration = Field(timedelta(hours=1), description=(
        "The step is stopped after this, e.g. 30m."))
    retry: RetryPolicy | None = Field(None, title="Retry", description=(
        "Overrides the job's retry policy for this step; keys left empty follow the job."))
    op_kwargs: JsonMap = Field(default_factory=dict, title="Keyword arguments", description=(
        "Extra arguments given to the step, one per line, e.g. limit = 100."))
    requires: PoolNeeds = Field(default_factory=dict, description=(
        "Resource pools this step leases beyond the run's, one per line: pool = count."))


class CsvOptions(StrictModel):
    """CSV dialect for ``file_load`` and ``file_export``."""

    delimiter: str = Field(",", min_length=1, max_length=1, description=(
        "The one character between values, e.g. ; or a tab."), json_schema_extra=RUN_TUNABLE)
    quote: str = Field('"', min_length=1, max_length=1, description=(
        "The character around values holding the delimiter."), json_schema_extra=RUN_TUNABLE)
    encoding: str = Field("utf-8", description="The text encoding, e.g. utf-8 or latin-1.",
        json_schema_extra=RUN_TUNABLE)
    header: bool = Field(True, description="The first line names the columns.",
        json_schema_extra=RUN_TUNABLE)
    null: str = Field("", description=(
        "The text that stands for a missing value, e.g. NULL (default: empty)."),
            json_schema_extra=RUN_TUNABLE)

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            fail(f"expected a text encoding like 'utf-8' or 'latin-1', got {value!r}")
        return value
