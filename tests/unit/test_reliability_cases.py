"""docs/reliability.md's table of the 56 bad-input and fault cases agrees with the tests'
``@pytest.mark.reliability_case(N)`` marks: every case has a row, every test a row names
exists and carries the case's mark, and every mark is named in its case's row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"
ROW = re.compile(r"^\| \*\*(\d+)\.\*\* ")
TEST = re.compile(r"`(tests/[\w/]+\.py::test_\w+)`")


def table() -> dict[int, list[str]]:
    text = DOC.read_text(encoding="utf-8")
    body = text.split("<!-- reliability-cases: begin -->")[1].split(
        "<!-- reliability-cases: end -->")[0]
    rows: dict[int, list[str]] = {}
    for line in body.splitlines():
        found = ROW.match(line)
        if found:
            case = int(found.group(1))
            assert case not in rows, f"case {case} has two rows"
            rows[case] = TEST.findall(line)
    return rows


def marks() -> dict[str, set[int]]:
    """``file::test`` -> the cases its ``reliability_case`` marks name."""
    found: dict[str, set[int]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute) \
                        and decorator.func.attr == "reliability_case":
                    name = f"{path.relative_to(ROOT).as_posix()}::{node.name}"
                    found.setdefault(name, set()).update(
                        int(arg.value) for arg in decorator.args
                        if isinstance(arg, ast.Constant))
    return found


def test_every_case_has_a_row_and_every_row_names_marked_tests() -> None:
    rows, marked = table(), marks()
    assert sorted(rows) == list(range(1, 57))
    problems = [f"case {case}: {test} is not marked with it"
                for case, tests in rows.items() for test in tests
                if case not in marked.get(test, set())]
    problems += [f"{test} is marked with case {case} but its row does not name it"
                 for test, cases in marked.items() for case in cases
                 if test not in rows.get(case, [])]
    assert problems == []
    assert all(rows[case] for case in rows), "a case without any test"
