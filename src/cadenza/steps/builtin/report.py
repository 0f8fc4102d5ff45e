"""``report``: render query results (tables, charts) to an HTML, PDF or XLSX file.

Each section's query runs on its connection (bound like ``sql_query``: ``${...}`` tokens
become bind parameters; :mod:`cadenza.steps.builtin.lib.exporting`), at most :data:`MAX_ROWS`
rows are kept (the section says how many the query returned), and its chart, if any, is drawn.
A section whose query fails fails the step, with the section's title in the message.

- **html**: the Jinja2 ``template`` (a file of the home), or the built-in one, rendered in
  Jinja2's sandbox with autoescaping (every value from the database is escaped); charts
  are PNG images drawn by matplotlib (:mod:`cadenza.steps.builtin.lib.charts`) embedded as ``data:``
  URIs, so the file stands alone (e.g. as a mail attachment).
- **pdf**: the same HTML laid out by WeasyPrint; it may load nothing but ``data:`` URIs (a
  template cannot make it read local files or the network).
- **xlsx**: one sheet per section (title in A1, the table under it, values neutralised
  against formula injection as in ``file_export``), with a native Excel chart (openpyxl)
  beside the table.

The file is written through a temporary file renamed into place
(:mod:`cadenza.steps.builtin.lib.outfiles`), inside ``[files].roots``. Output: ``{"path", "file",
"format", "bytes", "sections", "rows"}`` and ``"pages"`` (pdf) or ``"sheets"`` (xlsx);
``path`` is absolute and inside the roots, so a later step can attach it
(``${steps.<name>.path}``).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, Literal

import jinja2
from jinja2.sandbox import SandboxedEnvironment
from pydantic import Field, model_validator

from cadenza.config.labels import ADVANCED
from cadenza.config.types import FilePath, NonEmptyStr, RelativePath, StrictModel, fail
from cadenza.domain.errors import Fatal, Retryable
from cadenza.domain.params import ParamError, render
from cadenza.home_templates import HomeTemplateLoader, TemplateRefused, template_problem
from cadenza.private_files import of_settings
from cadenza.steps.base import RUN_TUNABLE, ColumnList, SqlConnectionName, StepConfig
from cadenza.steps.builtin.lib import exporting, outfiles
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult, clock_of

MAX_ROWS = 10_000
"""Rows of a section kept for its table and chart (the rest are counted, not kept)."""
MAX_TEMPLATE = 1 << 20
_EXTENSIONS = {".html": "html", ".htm": "html", ".pdf": "pdf", ".xlsx": "xlsx"}
_SHEET_BAD = re.compile(r"[\[\]:*?/\\]")


class ReportSection(StrictModel):
    """One section: a ``title`` and a ``query``; a ``chart`` needs ``x`` and ``y``;
    ``max_rows`` rows are shown in its table."""

    title: NonEmptyStr
    connection: SqlConnectionName
    query: NonEmptyStr
    chart: Literal["bar", "line"] | None = None
    x: NonEmptyStr | None = None
    y: ColumnList | None = None
    max_rows: int = Field(1000, ge=0, le=MAX_ROWS)

    @model_validator(mode="after")
    def _chart_axes(self) -> ReportSection:
        if self.chart is not None and (self.x is None or not self.y):
            fail(f"chart = {self.chart!r} expects 'x' (a column) and 'y' (one or more columns)")
        if self.chart is None and (self.x is not None or self.y is not None):
            fail("'x' and 'y' are used only with 'chart'")
        return self


class ReportConfig(StepConfig):
    """``sections`` (at least one) and ``path`` (inside ``[files].roots``); the format comes
    from ``format``, else the extension (.html, .pdf, .xlsx), else html; later steps read
    the file's path as ``${steps.<name>.path}``."""

    sections: list[ReportSection] = Field(min_length=1, description=(
        "One or more sections, each a title, a connection and a query, with an optional "
        "chart, e.g. { title = \"Sales\", connection = \"warehouse\", "
        "query = \"SELECT day, total FROM sales\", chart = \"line\", x = \"day\", "
        "y = \"total\" }."))
    path: FilePath = Field(description=(
        "The report file, inside the file roots, e.g. reports/sales-${params.period}.pdf."))
    format: Literal["html", "pdf", "xlsx"] | None = Field(None, description=(
        "The file format (default: from the extension, else html)."), json_schema_extra=RUN_TUNABLE)
    title: str | None = Field(None, description="The report's heading.")
    template: RelativePath | None = Field(None, json_schema_extra=ADVANCED, description=(
        "An HTML template of your own, relative to the Cadenza home."))
    overwrite: bool = Field(True, description="Replace a file that is already there.")

    @model_validator(mode="after")
    def _template_format(self) -> ReportConfig:
        if self.template is not None and report_format(self) == "xlsx":
            fail("'template' shapes html and pdf reports; an xlsx report has none")
        return self


def report_format(config: ReportConfig) -> str:
    """The report's format: ``format``, else the path's extension, else html."""
    if config.format is not None:
        return config.format
    suffix = Path(config.path.replace("\\", "/")).suffix.lower()
    return _EXTENSIONS.get(suffix, "html")


@dataclass
class Section:
    """A section's results, as templates see them (``section.title`` ...)."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    total: int
    shown: int
    truncated: bool
    chart_kind: str | None = None
    chart_png: bytes | None = field(default=None, repr=False)
    x: str | None = None
    y: list[str] = field(default_factory=list)

    @property
    def chart(self) -> str | None:
        """The chart as a ``data:image/png;base64,...`` URI (None without a chart)."""
        if self.chart_png is None:
            return None
        return "data:image/png;base64," + base64.b64encode(self.chart_png).decode("ascii")

    @property
    def cells(self) -> list[list[str]]:
        """The shown rows as display text (escaped by the template)."""
        return [[display(v) for v in row] for row in self.rows[:self.shown]]


def display(value: Any) -> str:
    """A value as shown in an HTML or PDF table."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


class ReportStep(StepType):
    """Build a report file (docs/report.md)."""

    name = "report"
    Config = ReportConfig
    raw_fields = frozenset({"sections"})  # queries bind their tokens; titles render here

    def run(self, ctx: StepContext, config: ReportConfig) -> StepResult:
        """Query every section, draw the charts, write the file; see the module docstring."""
        fmt = report_format(config)
        place = outfiles.target(config.path, ctx.settings.file_roots(ctx.home),
                                of_settings(ctx.home, ctx.settings),
                                f"step {ctx.step.name!r}: path")
        if not config.overwrite:
            outfiles.refuse_existing(place)
        template = _template(ctx, config) if fmt != "xlsx" else None
        sections = [_section(ctx, s) for s in config.sections]
        title = config.title or (sections[0].title if len(sections) == 1 else ctx.run.job_id)
        clock = clock_of(ctx)
        output: dict[str, Any] = {"path": str(place.path), "file": place.display,
                                  "format": fmt, "sections": len(sections),
                                  "rows": sum(s.total for s in sections)}
        with outfiles.AtomicFile(place, config.overwrite, clock.now()) as out, \
                outfiles.file_errors(f"cannot write {place.display!r}"):
            if fmt == "xlsx":
                output["sheets"] = _xlsx(out.fh, title, sections)
            else:
                assert template is not None
                html = render_html(template, title=title, sections=sections, job=ctx.run.job_id,
                                       run=ctx.run.id,
                                       generated_at=clock.now().isoformat(timespec="seconds"))
                if fmt == "pdf":
                    output["pages"] = _pdf(out.fh, html)
                else:
                    out.fh.write(html.encode("utf-8"))
            output["bytes"] = out.commit()
        ctx.log.info("report %s written (%s, %d sections, %d bytes)", place.display, fmt,
                     len(sections), output["bytes"])
        return StepResult(int(output["rows"]), output)


def _section(ctx: StepContext, section: ReportSection) -> Section:
    # matplotlib at first use, not when the step types load (~30 MiB in every server)
    from cadenza.steps.builtin.lib import charts

    try:
        title = str(render(section.title, ctx.scope))
    except ParamError as exc:
        raise Fatal(f"report section {section.title!r}: title: {exc}") from None
    what = f"report section {title!r}"
    kept: list[list[Any]] = []
    total = 0
    try:
        with exporting.stream(ctx, section.connection, section.query, what) as result:
            columns = result.columns
            for chunk in result.chunks:
                room = MAX_ROWS - len(kept)
                if room > 0:
                    kept.extend(list(r) for r in chunk[:room])
                total += len(chunk)
    except (Fatal, Retryable) as exc:
        message = str(exc)
        if message.startswith(what):
            raise
        # the same class (a timeout stays retryable), the section's title in front
        raise type(exc)(f"{what}: {message}") from exc.__cause__
    result_section = Section(title, columns, kept, total, min(section.max_rows, len(kept)),
                             total > min(section.max_rows, len(kept)))
    if section.chart is not None:
        x, ys = section.x or "", section.y or []
        for name in (x, *ys):
            if name not in columns:
                raise Fatal(f"{what}: chart column {name!r} is not among the query's columns "
                            f"({', '.join(columns)})")
        at = {c: i for i, c in enumerate(columns)}
        result_section.chart_kind, result_section.x, result_section.y = section.chart, x, ys
        result_section.chart_png = charts.draw(
            section.chart, title, x, [r[at[x]] for r in kept],
            {y: [r[at[y]] for r in kept] for y in ys})
    return result_section


# -- html and pdf --------------------------------------------------------------------------

DEFAULT_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font-family: "DejaVu Sans", Arial, "Noto Sans CJK SC", "Source Han Sans SC",
  "WenQuanYi Zen Hei", "Microsoft YaHei", "PingFang SC", sans-serif; font-size: 10pt;
  margin: 1.5em; }
h1 { font-size: 16pt; } h2 { font-size: 13pt; margin-top: 1.5em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #bbb; padding: 2px 6px; text-align: left; }
th { background: #eee; } td.n { text-align: right; }
img.chart { max-width: 100%; }
.note { color: #666; font-size: 9pt; }
@page { size: A4; margin: 1.5cm; }
</style></head>
<body>
<h1>{{ title }}</h1>
<p class="note">Job {{ job }}, run {{ run }}, {{ generated_at }}</p>
{% for section in sections %}
<section>
<h2>{{ section.title }}</h2>
{% if section.chart %}<img class="chart" alt="{{ section.chart_kind }} chart of {{
  section.y | join(', ') }} by {{ section.x }}" src="{{ section.chart }}">{% endif %}
{% if section.columns %}
<table><thead><tr>{% for c in section.columns %}<th>{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in section.cells %}<tr>{% for v in row %}<td>{{ v }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% endif %}
{% if section.truncated %}<p class="note">{{ section.shown }} of {{ section.total }} rows
shown.</p>{% elif not section.total %}<p class="note">No rows.</p>{% endif %}
</section>
{% endfor %}
</body></html>
"""


def _template(ctx: StepContext, config: ReportConfig) -> jinja2.Template:
    """The report's template, in Jinja2's sandbox, autoescaped, undefined names an error."""
    if config.template is None:
        env = SandboxedEnvironment(autoescape=True, undefined=jinja2.StrictUndefined)
        return env.from_string(DEFAULT_TEMPLATE)
    home = ctx.home.resolve()
    private = of_settings(ctx.home, ctx.settings)
    what = f"step {ctx.step.name!r}: template"
    problem = template_problem(home, config.template, private)
    if problem is not None:
        raise Fatal(f"{what}: {problem}")
    path = (home / config.template.replace("\\", "/")).resolve()
    loader = HomeTemplateLoader(home, path.parent, private)
    env = SandboxedEnvironment(autoescape=True, undefined=jinja2.StrictUndefined,
                               loader=loader)
    try:
        return env.get_template(path.name)
    except TemplateRefused as exc:
        raise Fatal(f"{what}: {exc.message}") from None
    except jinja2.TemplateNotFound:
        raise Fatal(f"template {config.template!r}: no such file under the home (or larger "
                    f"than {MAX_TEMPLATE} bytes)") from None
    except jinja2.TemplateSyntaxError as exc:
        raise Fatal(f"template {config.template}:{exc.lineno}: {exc.message}") from None
    except UnicodeDecodeError as exc:
        raise Fatal(f"template {config.template!r} is not UTF-8 text ({exc.reason})") from None


def render_html(template: jinja2.Template, **values: Any) -> str:
    """The template rendered; a template error is :class:`Fatal` with its line."""
    try:
        return template.render(**values)
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise Fatal(f"template{f' line {line}' if line else ''}: {exc}") from None


def _data_urls_only() -> Any:
    """WeasyPrint's URL fetcher that loads ``data:`` URIs only (no files, no network):
    ``URLFetcher(allowed_protocols=...)`` from WeasyPrint 68 on, a function before."""
    from weasyprint import urls  # type: ignore[import-untyped]

    if hasattr(urls, "URLFetcher"):
        return urls.URLFetcher(allowed_protocols={"data"}, allow_redirects=False)

    def fetch(url: str, *args: Any, **kwargs: Any) -> Any:
        if not url.startswith("data:"):
            raise ValueError(f"the report may not load {url[:80]!r}: only data: URIs")
        return urls.default_url_fetcher(url, *args, **kwargs)

    return fetch


def _pdf(fh: BinaryIO, html: str) -> int:
    """Lay ``html`` out as a PDF into ``fh``; the number of pages."""
    import logging

    import weasyprint

    # WeasyPrint logs each refused URL at ERROR; a template's stray link is not an error
    logging.getLogger("weasyprint").setLevel(logging.CRITICAL)
    document = weasyprint.HTML(string=html, url_fetcher=_data_urls_only()).render()
    document.write_pdf(target=fh)
    return len(document.pages)


# -- xlsx ---------------------------------------------------------------------------------

def _xlsx(fh: BinaryIO, title: str, sections: list[Section]) -> int:
    """One sheet per section with a native chart; the number of sheets."""
    import openpyxl  # type: ignore[import-untyped]
    from openpyxl.chart import BarChart, LineChart, Reference  # type: ignore[import-untyped]
    from openpyxl.styles import Font  # type: ignore[import-untyped]

    from cadenza.steps.builtin.lib import writers

    book = openpyxl.Workbook()
    book.remove(book.active)
    book.properties.title = title
    taken: set[str] = set()
    for section in sections:
        sheet = book.create_sheet(_sheet_name(section.title, taken))
        sheet["A1"] = writers._xlsx_text(section.title, "the title", "A1")
        sheet["A1"].font = Font(bold=True, size=14)
        for j, name in enumerate(section.columns, 1):
            cell = sheet.cell(row=3, column=j, value=writers._xlsx_text(name, "the header",
                                                                           name))
            cell.font = Font(bold=True)
        for i, row in enumerate(section.rows[:section.shown], 4):
            for j, value in enumerate(row, 1):
                sheet.cell(row=i, column=j, value=writers._xlsx_cell(
                    value, i - 3, section.columns[j - 1]))
        if section.truncated:
            sheet.cell(row=section.shown + 5, column=1,
                       value=f"{section.shown} of {section.total} rows shown")
        if section.chart_kind and section.shown:
            chart = BarChart() if section.chart_kind == "bar" else LineChart()
            chart.title = section.title
            chart.x_axis.title = section.x
            last = section.shown + 3
            for name in section.y:
                col = section.columns.index(name) + 1
                chart.add_data(Reference(sheet, min_col=col, min_row=3, max_row=last),
                               titles_from_data=True)
            x_col = section.columns.index(section.x or "") + 1
            chart.set_categories(Reference(sheet, min_col=x_col, min_row=4, max_row=last))
            chart.width, chart.height = 20, 10
            anchor = sheet.cell(row=3, column=len(section.columns) + 2).coordinate
            sheet.add_chart(chart, anchor)
    writers.save_workbook(book, fh)
    return len(sections)


def _sheet_name(title: str, taken: set[str]) -> str:
    """A sheet name from a title: Excel's forbidden characters replaced, at most 31
    characters, unique (without case) in the workbook."""
    base = _SHEET_BAD.sub("_", title).strip("'") or "Section"
    name, n = base[:31], 1
    while name.lower() in taken:
        n += 1
        suffix = f" ({n})"
        name = base[:31 - len(suffix)] + suffix
    taken.add(name.lower())
    return name
