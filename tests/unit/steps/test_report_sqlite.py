"""report on SQLite: a PDF with a bar chart (pypdf), HTML (escaped, chart embedded, custom
template in the sandbox), XLSX with native charts, failing sections named, and the output
path usable by a later step (inside the roots)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pypdf
import pytest
from sql_ctx import SqlTestContext, execute, run_step

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.lib import files as step_files
from cadenza.steps.builtin.report import ReportConfig, ReportStep
from cadenza.steps.registry import registry

XSS = "<script>alert(1)</script>"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "files"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def url(tmp_path: Path, root: Path) -> str:
    url = f"sqlite:///{(tmp_path / 'data' / 'w.db').as_posix()}"
    execute(url, "CREATE TABLE sales (region TEXT, month TEXT, amount NUMERIC, units INTEGER)",
            "INSERT INTO sales VALUES ('North', '2026-01', 120.5, 3), ('South', '2026-01', 80, 2),"
            f" ('{XSS}', '2026-02', 42.25, 1), ('=HYPERLINK(1)', '2026-02', NULL, 4)")
    return url


@pytest.fixture
def ctx(tmp_path: Path, url: str, root: Path) -> Iterator[SqlTestContext]:
    c = SqlTestContext(tmp_path, {"w": url}, step_type="report", params={"min": 50})
    yield c
    c.close()


SECTIONS: list[dict[str, Any]] = [
    {"title": "Sales by region", "connection": "w", "chart": "bar", "x": "region",
     "y": ["amount", "units"],
     "query": "SELECT region, amount, units FROM sales ORDER BY region"},
    {"title": "Big months (over ${params.min})", "connection": "w",
     "query": "SELECT month, sum(amount) AS total FROM sales GROUP BY month "
              "HAVING sum(amount) > ${params.min} ORDER BY month",
     "chart": "line", "x": "month", "y": "total"},
]


def report(ctx: SqlTestContext, path: str, **fields: Any) -> Any:
    fields.setdefault("sections", SECTIONS)
    return run_step(ReportStep, ctx, path=path, title="Monthly sales", **fields)


def test_registered_and_sections_rendered_by_the_step() -> None:
    assert registry()["report"] is ReportStep
    assert ReportStep.raw_fields == {"sections"}


def test_format_from_the_extension_and_template_only_for_html() -> None:
    base = {"name": "r", "type": "report", "sections": SECTIONS[:1]}
    from cadenza.steps.builtin.report import report_format

    assert report_format(ReportConfig.model_validate({**base, "path": "r.PDF"})) == "pdf"
    assert report_format(ReportConfig.model_validate({**base, "path": "r.txt"})) == "html"
    assert report_format(ReportConfig.model_validate(
        {**base, "path": "r.pdf", "format": "xlsx"})) == "xlsx"
    with pytest.raises(ValueError, match="an xlsx report has none"):
        ReportConfig.model_validate({**base, "path": "r.xlsx", "template": "t.html"})
    with pytest.raises(ValueError, match="expects 'x'"):
        ReportConfig.model_validate({**base, "path": "r.pdf", "sections": [
            {**SECTIONS[0], "x": None}]})


def test_pdf_with_a_bar_chart_holds_the_titles_and_the_image(ctx: SqlTestContext,
                                                             root: Path) -> None:
    out = report(ctx, "reports/sales.pdf")
    path = root / "reports" / "sales.pdf"
    assert out.output == {"path": str(path), "file": "reports/sales.pdf", "format": "pdf",
                          "sections": 2, "rows": 5, "pages": 1,
                          "bytes": path.stat().st_size}
    reader = pypdf.PdfReader(path)
    text = "\n".join(page.extract_text() for page in reader.pages)
    for title in ("Monthly sales", "Sales by region", "Big months (over 50)"):
        assert title in text
    assert XSS in text  # shown as text, not run
    images = [image for page in reader.pages for image in page.images]
    assert len(images) == 2  # the bar chart and the line chart
    width, height = images[0].image.size
    assert width >= 400 and height >= 200


def test_html_escapes_values_and_embeds_the_charts(ctx: SqlTestContext, root: Path) -> None:
    out = report(ctx, "r.html")
    html = (root / "r.html").read_text(encoding="utf-8")
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html.count('src="data:image/png;base64,') == 2
    assert "<h2>Sales by region</h2>" in html and "<h2>Big months (over 50)</h2>" in html
    assert out.output["format"] == "html" and "pages" not in out.output


def test_xlsx_has_a_sheet_per_section_and_native_charts(ctx: SqlTestContext,
                                                        root: Path) -> None:
    out = report(ctx, "r.xlsx")
    path = root / "r.xlsx"
    assert out.output["sheets"] == 2
    book = openpyxl.load_workbook(path)
    assert book.sheetnames == ["Sales by region", "Big months (over 50)"]
    sheet = book["Sales by region"]
    assert sheet["A1"].value == "Sales by region"
    assert [c.value for c in sheet[3]] == ["region", "amount", "units"]
    values = [[c.value for c in row] for row in sheet.iter_rows(min_row=4)]
    assert values == [[XSS, 42.25, 1], ["'=HYPERLINK(1)", None, 4], ["North", 120.5, 3],
                      ["South", 80, 2]]
    assert all(c.data_type != "f" for row in sheet.iter_rows() for c in row)
    with zipfile.ZipFile(path) as archive:
        charts = sorted(n for n in archive.namelist() if n.startswith("xl/charts/chart"))
        kinds = [archive.read(n).decode() for n in charts]
    assert len(charts) == 2
    assert any("barChart>" in k for k in kinds) and any("lineChart>" in k for k in kinds)


def test_a_custom_template_in_the_sandbox(ctx: SqlTestContext, root: Path,
                                          tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "r.html").write_text(
        "<h1>{{ title }}</h1>{% for s in sections %}<h2>{{ s.title }}</h2>"
        "{{ s.total }} rows{% for row in s.cells %}|{{ row[0] }}{% endfor %}"
        "<img src='file:///etc/passwd'>{% endfor %}", encoding="utf-8")
    report(ctx, "t.html", template="templates/r.html")
    html = (root / "t.html").read_text()
    assert html.startswith("<h1>Monthly sales</h1><h2>Sales by region</h2>4 rows|")
    assert "&lt;script&gt;" in html
    # the PDF of the same template loads nothing but data: URIs (no local file)
    out = report(ctx, "t.pdf", template="templates/r.html")
    assert out.output["pages"] >= 1
    assert "root:" not in "".join(p.extract_text() for p in pypdf.PdfReader(root / "t.pdf").pages)
    (tmp_path / "templates" / "evil.html").write_text(
        "{{ sections.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(Fatal, match="template"):
        report(ctx, "e.html", template="templates/evil.html")
    (tmp_path / "templates" / "bad.html").write_text("line\n{% for %}")
    with pytest.raises(Fatal, match=r"template templates/bad\.html:2:"):
        report(ctx, "b.html", template="templates/bad.html")
    assert not (root / "e.html").exists() and not (root / "b.html").exists()


def test_a_failing_section_fails_the_step_with_its_title(ctx: SqlTestContext,
                                                         root: Path) -> None:
    broken = {"title": "Broken one", "connection": "w", "query": "SELECT * FROM missing"}
    with pytest.raises(Fatal, match=r"report section 'Broken one': .*no such table: missing"):
        report(ctx, "f.pdf", sections=[SECTIONS[0], broken])
    wrong = {**SECTIONS[0], "title": "Wrong axis", "x": "nope"}
    with pytest.raises(Fatal, match=r"section 'Wrong axis': chart column 'nope' is not among"):
        report(ctx, "f.pdf", sections=[wrong])
    text = {**SECTIONS[0], "title": "Text axis", "y": "region"}
    with pytest.raises(Fatal, match=r"section 'Text axis': chart column 'region' holds str"):
        report(ctx, "f.pdf", sections=[text])
    assert list(root.iterdir()) == []


def test_output_path_is_attachable_by_a_later_step(ctx: SqlTestContext, root: Path) -> None:
    out = report(ctx, "reports/${params.min}.pdf", rendered={"path": "reports/50.pdf"})
    found = step_files.find(out.output["path"], ctx.settings.file_roots(ctx.home))
    assert [f.display for f in found] == ["reports/50.pdf"]
    assert out.output["path"] == str(root / "reports" / "50.pdf")


def test_path_outside_the_roots_is_refused(ctx: SqlTestContext, root: Path) -> None:
    with pytest.raises(Fatal, match="refused"):
        report(ctx, "x.pdf", rendered={"path": "/tmp/cadenza-report-outside.pdf"})
    with pytest.raises(Fatal, match="refused"):
        report(ctx, "x.pdf", rendered={"path": "../x.pdf"})


def test_many_rows_are_counted_and_cut(ctx: SqlTestContext, root: Path, url: str) -> None:
    execute(url, "CREATE TABLE n (i INTEGER)",
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 12000) "
            "INSERT INTO n SELECT i FROM c")
    out = report(ctx, "n.html", sections=[{"title": "N", "connection": "w", "max_rows": 5,
                                           "query": "SELECT i, i * 2 AS d FROM n ORDER BY i",
                                           "chart": "line", "x": "i", "y": "d"}])
    html = (root / "n.html").read_text()
    assert out.rows == 12000 and html.count("<tr>") == 6  # header and 5 rows
    assert "5 of 12000 rows" in html
