"""The exit codes of ``cadenza run`` as its help and the docs tell them: NEEDS_REVIEW is
one of the ends that exit 3, and both say so."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.cli.run import EXIT_OTHER, exit_code
from cadenza.domain.states import RunState
from cadenza.services.runs import RunResult

DOCS = Path(__file__).resolve().parents[3] / "docs" / "running.md"


def test_needs_review_exits_3() -> None:
    assert exit_code(RunResult("01RUN", RunState.NEEDS_REVIEW)) == EXIT_OTHER == 3


def test_the_help_lists_the_exit_codes_with_needs_review() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Exit codes: 0 SUCCEEDED" in text
    assert re.search(r"3 any other end: NEEDS_REVIEW\b", text), text


def test_the_docs_table_lists_needs_review_under_3() -> None:
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\| (\d) \| (.*) \|$", DOCS.read_text(encoding="utf-8"), re.M)}
    assert set(rows) >= {"0", "1", "2", "3"}
    assert "NEEDS_REVIEW" in rows["3"]
