"""``file_load``: load files (a glob) into a table of a SQL connection."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cadenza.config.types import FilePath, JsonMap, NonEmptyStr, fail
from cadenza.steps.base import (
    ColumnList,
    CsvOptions,
    FileFormat,
    LoadMode,
    SqlConnectionName,
    StepConfig,
    TableName,
    format_from_path,
)
from cadenza.steps.registry import StepType


class FileLoadConfig(StepConfig):
    """``path`` (a glob, inside ``[files].roots``), ``connection`` and ``table``; the format
    comes from the extension unless given; ``upsert`` needs ``key``; ``constants`` add
    columns; ``columns`` renames; files already loaded (same checksum) are skipped."""

    path: FilePath
    connection: SqlConnectionName
    table: TableName
    format: FileFormat | None = None
    mode: LoadMode = "append"
    key: ColumnList | None = None
    constants: JsonMap = Field(default_factory=dict)
    columns: dict[str, NonEmptyStr] = Field(default_factory=dict)
    csv: CsvOptions = Field(default_factory=CsvOptions)
    on_missing: Literal["fail", "skip", "wait"] = "fail"
    skip_if_loaded: bool = True

    @model_validator(mode="after")
    def _format_and_key(self) -> FileLoadConfig:
        if self.format is None and format_from_path(self.path) is None:
            fail(f"cannot tell the format of {self.path!r} from its extension: expected "
                 "format = 'csv', 'xlsx', 'parquet' or 'json'")
        if self.mode == "upsert" and not self.key:
            fail("mode = 'upsert' expects 'key' (the column or columns that identify a row)")
        if self.mode != "upsert" and self.key:
            fail("'key' is used only with mode = 'upsert'")
        return self


class FileLoadStep(StepType):
    """Load files into a table (SPEC §4)."""

    name = "file_load"
    Config = FileLoadConfig
