"""``sql_query``: run one query on a SQL connection; record the rows returned or affected."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cadenza.config.types import JsonMap, NonEmptyStr, RelativePath, fail
from cadenza.steps.base import SqlConnectionName, StepConfig
from cadenza.steps.registry import StepType


class SqlQueryConfig(StepConfig):
    """``connection`` and ``query`` (or ``file``, a ``.sql`` file relative to the home);
    ``params`` are bind values; ``fetch`` says what is recorded as output."""

    connection: SqlConnectionName
    query: NonEmptyStr | None = None
    file: RelativePath | None = None
    params: JsonMap = Field(default_factory=dict)
    fetch: Literal["count", "first", "all"] = "count"
    max_rows: int = Field(1000, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _query_or_file(self) -> SqlQueryConfig:
        if (self.query is None) == (self.file is None):
            fail("expected exactly one of 'query' or 'file'")
        return self


class SqlQueryStep(StepType):
    """Run one SQL statement (SPEC §4)."""

    name = "sql_query"
    Config = SqlQueryConfig
