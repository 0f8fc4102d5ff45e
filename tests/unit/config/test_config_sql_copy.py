"""sql_copy's own fields in jobs.toml: a bad value is one problem at its line and column."""

from __future__ import annotations

import pytest
from config_helpers import MINIMAL_SETTINGS, MakeHome, line_of

from cadenza.config import validate_home

JOB = """\
[jobs.nightly]
[[jobs.nightly.steps]]
name = "copy"
type = "sql_copy"
source = {{ connection = "warehouse", table = "f4211" }}
target = {{ connection = "warehouse", table = "sales" }}
{extra}
"""


@pytest.mark.parametrize(
    ("extra", "needle", "fragment"),
    [
        ('type_coercion = "oracle"', "type_coercion", "expected 'none' or 'jde'"),
        ('type_coercion = "jde"\ndecimal_mode = "round"', "decimal_mode",
         "expected 'truncate' or 'preserve'"),
        ('decimal_mode = "preserve"', "decimal_mode", "only with type_coercion = 'jde'"),
        ("trim_strings = 3", "trim_strings", "expected true or false, got integer 3"),
    ],
)
def test_a_bad_field_is_located(make_home: MakeHome, extra: str, needle: str,
                                fragment: str) -> None:
    jobs = JOB.format(extra=extra)
    problems = [p for p in validate_home(make_home(settings=MINIMAL_SETTINGS, jobs=jobs))
                if p.file == "jobs.toml" and p.is_error]
    assert len(problems) == 1, "\n".join(str(p) for p in problems)
    problem = problems[0]
    assert fragment in problem.message, problem.message
    assert str(problem).startswith(f"jobs.toml:{problem.line}:{problem.col}: error: "
                                   "jobs.nightly.steps[0]")
    if needle != "decimal_mode" or "only with" not in fragment:
        assert problem.line == line_of(jobs, needle)
    else:  # a rule across fields: located at the step
        assert problem.line is not None and problem.line <= line_of(jobs, needle)
