"""``report``: render query results (tables, charts) to an HTML, PDF or XLSX file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cadenza.config.types import FilePath, NonEmptyStr, StrictModel, fail
from cadenza.steps.base import ColumnList, SqlConnectionName, StepConfig
from cadenza.steps.registry import StepType


class ReportSection(StrictModel):
    """One section: a ``title`` and a ``query``; a ``chart`` needs ``x`` and ``y``."""

    title: NonEmptyStr
    connection: SqlConnectionName
    query: NonEmptyStr
    chart: Literal["bar", "line"] | None = None
    x: NonEmptyStr | None = None
    y: ColumnList | None = None

    @model_validator(mode="after")
    def _chart_axes(self) -> ReportSection:
        if self.chart is not None and (self.x is None or not self.y):
            fail(f"chart = {self.chart!r} expects 'x' (a column) and 'y' (one or more columns)")
        if self.chart is None and (self.x is not None or self.y is not None):
            fail("'x' and 'y' are used only with 'chart'")
        return self


class ReportConfig(StepConfig):
    """``sections`` (at least one) and ``path`` (inside ``[files].roots``); later steps
    read the file's path as ``${steps.<name>.path}``."""

    sections: list[ReportSection] = Field(min_length=1)
    path: FilePath
    format: Literal["html", "pdf", "xlsx"] = "html"
    title: str | None = None
    template: FilePath | None = None


class ReportStep(StepType):
    """Build a report file (SPEC §4)."""

    name = "report"
    Config = ReportConfig
