"""``file_export``: write a query's rows to a file (temp file, then rename).

The query is bound like ``sql_query``'s (``${...}`` tokens become bind parameters) and read in
chunks through a server-side cursor (:mod:`cadenza.steps.builtin.lib.exporting`); each chunk
goes to the format's writer (:mod:`cadenza.steps.builtin.lib.writers`: csv, xlsx, parquet,
jsonl), which writes a temporary file next to ``path``; at the end the file is fsynced and
renamed onto ``path`` (:mod:`cadenza.steps.builtin.lib.outfiles`). A failure, a cancel, a
timeout or a kill -9 leaves no partial file at ``path``. ``path`` must lie inside
``[files].roots``; without ``overwrite`` an existing file there fails the step, naming it.

Output: ``{"rows", "bytes", "path", "file", "format", "columns"}``: ``path`` is absolute
(a later step can attach it: it lies inside the roots), ``file`` is relative to its root.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, model_validator

from cadenza.config.labels import ADVANCED
from cadenza.config.types import FilePath, NonEmptyStr, fail, without_tokens
from cadenza.private_files import of_settings
from cadenza.steps.base import (
    RUN_TUNABLE,
    CsvOptions,
    SqlConnectionName,
    StepConfig,
    format_from_path,
)
from cadenza.steps.builtin.lib import exporting, outfiles
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult, clock_of

ExportFormat = Literal["csv", "xlsx", "parquet", "jsonl", "json"]


def export_format(path: str) -> ExportFormat | None:
    """The format a path's extension implies: ``.csv``, ``.xlsx``, ``.parquet``, ``.jsonl``
    or ``.json`` (JSON lines too, as ``file_load`` reads it)."""
    if without_tokens(path).lower().endswith(".jsonl"):
        return "jsonl"
    return format_from_path(path)


class FileExportConfig(StepConfig):
    """``connection``, ``query`` and ``path`` (inside ``[files].roots``); the format comes
    from the extension unless given; an existing file is kept unless ``overwrite``."""

    connection: SqlConnectionName = Field(description=(
        "The SQL connection the query runs on, e.g. warehouse."))
    query: NonEmptyStr = Field(title="SQL", description=(
        "The rows to export, e.g. SELECT * FROM sales WHERE month = :month."))
    path: FilePath = Field(description=(
        "The file written, inside the file roots, e.g. exports/sales-${params.period}.csv."))
    format: ExportFormat | None = Field(None, description=(
        "The file format (default: from the path's extension)."), json_schema_extra=RUN_TUNABLE)
    overwrite: bool = Field(False, description="Replace a file that is already there.")
    csv: CsvOptions = Field(default_factory=CsvOptions, json_schema_extra=ADVANCED | RUN_TUNABLE,
                            description="How a CSV file is written.")
    sheet: str = Field("Sheet1", min_length=1, max_length=31, pattern=r"^[^\[\]:*?/\\']+$",
                       json_schema_extra=ADVANCED | RUN_TUNABLE,
                       description="The sheet's name in an xlsx file.")

    @model_validator(mode="after")
    def _format(self) -> FileExportConfig:
        if self.format is None and export_format(self.path) is None:
            fail(f"cannot tell the format of {self.path!r} from its extension: expected "
                 "format = 'csv', 'xlsx', 'parquet' or 'jsonl'")
        return self


class FileExportStep(StepType):
    """Export a query to a file (docs/file_export.md)."""

    name = "file_export"
    Config = FileExportConfig
    raw_fields = frozenset({"query"})

    def run(self, ctx: StepContext, config: FileExportConfig) -> StepResult:
        """Check the path, stream the rows into a temporary file, rename it; see the
        module's docstring."""
        # pyarrow and openpyxl at first use, not when the step types load (~60 MiB)
        from cadenza.steps.builtin.lib import writers

        fmt = config.format or export_format(config.path) or "csv"
        place = outfiles.target(config.path, ctx.settings.file_roots(ctx.home),
                                of_settings(ctx.home, ctx.settings),
                                f"step {ctx.step.name!r}: path")
        done = _written_before(ctx, place)
        if done is not None:
            ctx.log.info("%s was written by an earlier attempt of this step (%s rows)",
                         place.display, done.get("rows"))
            return StepResult(int(done.get("rows") or 0), done)
        if not config.overwrite:
            outfiles.refuse_existing(place)
        what = f"file_export to {place.display}"
        clock = clock_of(ctx)
        started = clock.monotonic()
        with outfiles.AtomicFile(place, config.overwrite, clock.now()) as out:
            with exporting.stream(ctx, config.connection, config.query, what) as rows:
                writer = writers.writer_for(fmt, out.fh, config.csv, config.sheet)
                count = 0
                try:
                    writer.start(rows.columns)
                    for chunk in rows.chunks:
                        writer.write(chunk)
                        count += len(chunk)
                        ctx.log.debug("%d rows written", count)
                    writer.finish()
                except OSError as exc:  # the file system: a full disk passes, others do not
                    writer.abort()
                    raise outfiles.os_error(exc, f"cannot write {place.display!r}") from None
                except BaseException:
                    writer.abort()
                    raise
            # renamed only once every row is read and the reading ended cleanly
            sealed = out.seal()
            output = {"rows": count, "bytes": sealed.st_size, "path": str(place.path),
                      "file": place.display, "format": fmt, "columns": rows.columns}
            _remember(ctx, sealed, output)
            out.commit()
        elapsed = clock.monotonic() - started
        ctx.log.info("%d rows, %d bytes written to %s (%s) in %.1f s", count, sealed.st_size,
                     place.display, fmt, elapsed)
        return StepResult(count, output)


def _remember(ctx: StepContext, sealed: os.stat_result, output: dict[str, Any]) -> None:
    """Save, before the rename, which file this attempt is about to put at the path (its
    device, inode, size and time, which the rename keeps), with the output: an attempt after a crash
    between the rename and the step's end finds its file there and does not fail on
    ``overwrite = false`` (nor export again)."""
    if callable(getattr(ctx, "checkpoint", None)):
        ctx.checkpoint({"written": {"file": outfiles.identity(sealed), "output": output}})


def _written_before(ctx: StepContext, place: outfiles.Target) -> dict[str, Any] | None:
    """The output an earlier attempt recorded, when the file it wrote is still at the path."""
    saved = getattr(ctx, "last_checkpoint", None) if callable(
        getattr(ctx, "checkpoint", None)) else None
    written = saved.get("written") if isinstance(saved, dict) else None
    if not isinstance(written, dict) or not isinstance(written.get("output"), dict):
        return None
    output: dict[str, Any] = written["output"]
    if output.get("path") != str(place.path):
        return None
    return output if outfiles.same_file(place, written.get("file") or {}) else None
