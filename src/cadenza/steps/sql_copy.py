"""``sql_copy``: copy a query's rows or a table into a table, in batches."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cadenza.config.types import NonEmptyStr, StrictModel, fail
from cadenza.steps.base import ColumnList, SqlConnectionName, StepConfig, TableName
from cadenza.steps.registry import StepType


class CopySource(StrictModel):
    """Where rows come from: a ``query`` or a ``table`` on a SQL ``connection``."""

    connection: SqlConnectionName
    query: NonEmptyStr | None = None
    table: TableName | None = None

    @model_validator(mode="after")
    def _query_or_table(self) -> CopySource:
        if (self.query is None) == (self.table is None):
            fail("expected exactly one of 'query' or 'table'")
        return self


class CopyTarget(StrictModel):
    """Where rows go: a ``table`` on a SQL ``connection``."""

    connection: SqlConnectionName
    table: TableName


class SqlCopyConfig(StepConfig):
    """``overwrite`` fills ``<table>__new`` then swaps it in, so the live table is never
    empty; ``upsert`` needs ``key``; ``create`` makes a missing target table."""

    source: CopySource
    target: CopyTarget
    mode: Literal["overwrite", "append", "upsert"] = "overwrite"
    key: ColumnList | None = None
    batch_size: int = Field(10_000, ge=1, le=10_000_000)
    create: bool = True

    @model_validator(mode="after")
    def _key_with_upsert(self) -> SqlCopyConfig:
        if self.mode == "upsert" and not self.key:
            fail("mode = 'upsert' expects 'key' (the column or columns that identify a row)")
        if self.mode != "upsert" and self.key:
            fail("'key' is used only with mode = 'upsert'")
        return self


class SqlCopyStep(StepType):
    """Copy rows between SQL connections (SPEC §4)."""

    name = "sql_copy"
    Config = SqlCopyConfig
