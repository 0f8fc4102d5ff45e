"""Chinese in reports: a PDF with a Chinese title, columns, values and a bar chart holds
the characters (pdftotext) in an embedded CJK font (pdffonts), and its chart draws glyphs,
not boxes; HTML and xlsx keep them; no CJK font is a clear error naming the package."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import openpyxl  # type: ignore[import-untyped]
import pytest
from sql_ctx import SqlTestContext, execute, run_step
from tests.conftest import service_missing

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.lib import charts
from cadenza.steps.builtin.report import ReportStep

TITLE = "月度销售报告"
SECTIONS = [{"title": "各地区销售额", "connection": "w", "chart": "bar", "x": "地区",
             "y": ["金额"], "query": 'SELECT "地区", "金额" FROM sales ORDER BY "金额"'}]


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[SqlTestContext]:
    (tmp_path / "data" / "files").mkdir(parents=True)
    url = f"sqlite:///{(tmp_path / 'data' / 'w.db').as_posix()}"
    execute(url, 'CREATE TABLE sales ("地区" TEXT, "金额" NUMERIC)',
            "INSERT INTO sales VALUES ('华北', 120.5), ('华南', 80), ('西南', 42.25)")
    c = SqlTestContext(tmp_path, {"w": url}, step_type="report")
    yield c
    c.close()


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        service_missing(f"{name} (Debian package poppler-utils)", "not installed")
    assert found is not None
    return found


def _cjk_font() -> None:
    if not charts.cjk_families():
        service_missing("a CJK font (Debian package fonts-noto-cjk)", "none installed")


def test_a_chinese_pdf_report_holds_its_characters_in_a_cjk_font(
        ctx: SqlTestContext, tmp_path: Path) -> None:
    _cjk_font()
    out = run_step(ReportStep, ctx, path="销售.pdf", title=TITLE, sections=SECTIONS).output
    pdf = Path(out["path"])
    text = subprocess.run([_tool("pdftotext"), str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout
    for word in (TITLE, "各地区销售额", "地区", "金额", "华北", "华南", "西南"):
        assert word in text, (word, text)
    fonts = subprocess.run([_tool("pdffonts"), str(pdf)], capture_output=True, text=True,
                           check=True).stdout
    assert "CJK" in fonts, fonts  # an embedded CJK font draws them, not a fallback's boxes


def test_chinese_chart_labels_are_glyphs_not_boxes() -> None:
    """Two charts whose Chinese labels are swapped differ only if the glyphs are drawn: a
    missing glyph is the same empty box for every character."""
    _cjk_font()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font" would fail here
        one = charts.draw("bar", "s", "地区", ["华北", "西南"], {"金额": [1, 1]})
        two = charts.draw("bar", "s", "地区", ["西南", "华北"], {"金额": [1, 1]})
    assert one != two


def test_no_cjk_font_names_the_package_to_install() -> None:
    with pytest.raises(Fatal, match="apt install fonts-noto-cjk"):
        charts.families_for(["华北"], "s", candidates=("No Such Font",))
    assert charts.families_for(["North"], "s", candidates=("No Such Font",)) == ["DejaVu Sans"]


def test_html_and_xlsx_keep_chinese(ctx: SqlTestContext) -> None:
    html = Path(run_step(ReportStep, ctx, path="销售.html", title=TITLE,
                         sections=[{k: v for k, v in SECTIONS[0].items()
                                   if k not in ("chart", "x", "y")}]).output["path"])
    page = html.read_text(encoding="utf-8")
    assert '<meta charset="utf-8">' in page and TITLE in page and "华北" in page
    made = run_step(ReportStep, ctx, path="销售.xlsx", title=TITLE, sections=SECTIONS)
    xlsx = Path(made.output["path"])
    cells = [c.value for ws in openpyxl.load_workbook(xlsx) for row in ws.iter_rows()
             for c in row if c.value is not None]
    assert "地区" in cells and "华北" in cells
