"""``file_export``: write a query's rows to a file (temp file, then rename)."""

from __future__ import annotations

from pydantic import Field, model_validator

from cadenza.config.types import FilePath, NonEmptyStr, fail
from cadenza.steps.base import (
    CsvOptions,
    FileFormat,
    SqlConnectionName,
    StepConfig,
    format_from_path,
)
from cadenza.steps.registry import StepType


class FileExportConfig(StepConfig):
    """``connection``, ``query`` and ``path`` (inside ``[files].roots``); the format comes
    from the extension unless given; an existing file is kept unless ``overwrite``."""

    connection: SqlConnectionName
    query: NonEmptyStr
    path: FilePath
    format: FileFormat | None = None
    overwrite: bool = False
    csv: CsvOptions = Field(default_factory=CsvOptions)

    @model_validator(mode="after")
    def _format(self) -> FileExportConfig:
        if self.format is None and format_from_path(self.path) is None:
            fail(f"cannot tell the format of {self.path!r} from its extension: expected "
                 "format = 'csv', 'xlsx', 'parquet' or 'json'")
        return self


class FileExportStep(StepType):
    """Export a query to a file (SPEC §4)."""

    name = "file_export"
    Config = FileExportConfig
