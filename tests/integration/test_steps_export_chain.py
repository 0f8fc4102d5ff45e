"""file_export and report inside a real run (executor, store, jobs.toml): their ``path``
outputs feed later steps through ``${steps.<name>.path}``, inside ``[files].roots``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pypdf
from executor_home import loaded

from cadenza.domain.states import RunState, StepState

CHAIN = """
[jobs.chain]
params = { min = 15 }
[[jobs.chain.steps]]
name = "seed"
type = "sql_query"
connection = "wh"
query = '''CREATE TABLE s AS SELECT 'North' AS region, 10 AS amount
  UNION ALL SELECT 'South', 20 UNION ALL SELECT 'East', 30'''
[[jobs.chain.steps]]
name = "export"
type = "file_export"
connection = "wh"
query = "SELECT region, amount FROM s WHERE amount > ${params.min} ORDER BY region"
path = "out/regions.csv"
[[jobs.chain.steps]]
name = "load-back"
type = "file_load"
path = "${steps.export.path}"
connection = "wh"
table = "back"
format = "csv"
[[jobs.chain.steps]]
name = "report"
type = "report"
path = "reports/daily.pdf"
title = "Daily regions"
[[jobs.chain.steps.sections]]
title = "Regions loaded back"
connection = "wh"
query = "SELECT region, amount FROM back ORDER BY region"
chart = "bar"
x = "region"
y = "amount"
[[jobs.chain.steps]]
name = "look"
type = "python"
callable = "cz_exec_tasks:echo"
isolation = "thread"
op_kwargs.report = "${steps.report.path}"
op_kwargs.pages = "${steps.report.pages}"
op_kwargs.rows = "${steps.export.rows}"
"""


def test_exported_and_report_paths_feed_later_steps(tmp_path: Path) -> None:
    with loaded(tmp_path / "home", CHAIN) as bench:
        run_id, outcome = bench.run("chain")
        steps: dict[str, Any] = bench.steps(run_id)
        assert outcome.state == RunState.SUCCEEDED, [
            (s.step, s.state, getattr(s, "error", None)) for s in steps.values()]
        assert all(s.state == StepState.SUCCEEDED for s in steps.values())
        root = bench.home / "data" / "files"
        csv_path = root / "out" / "regions.csv"
        assert csv_path.read_bytes().decode() == "region,amount\r\nEast,30\r\nSouth,20\r\n"
        assert steps["export"].output["path"] == str(csv_path)
        assert steps["load-back"].output["rows"] == 2
        pdf = root / "reports" / "daily.pdf"
        kwargs = steps["look"].output["kwargs"]
        assert kwargs == {"min": 15, "report": str(pdf), "pages": 1, "rows": 2}
        reader = pypdf.PdfReader(pdf)
        text = reader.pages[0].extract_text()
        assert "Daily regions" in text and "Regions loaded back" in text
        assert len(reader.pages[0].images) == 1
