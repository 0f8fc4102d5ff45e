"""Reserved and dangerous parameter names are refused at their line."""

from __future__ import annotations

import pytest
from config_helpers import MakeHome, line_of

from cadenza.config import Problem, load_home
from cadenza.domain.errors import ConfigError

JOB = """\
[jobs.nightly]
schedule = "0 2 * * *"
params = {{ "{name}" = "x" }}

[[jobs.nightly.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"
"""

PRESET = """\
[jobs.nightly]
params = {{ period = "x" }}
presets.p = {{ params = {{ "{name}" = "x" }} }}

[[jobs.nightly.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"
"""


@pytest.mark.parametrize(("name", "rule"), [
    ("PATH", "reserved"), ("LD_PRELOAD", "reserved"), ("LD_LIBRARY_PATH", "reserved"),
    ("PYTHONPATH", "reserved"), ("PYTHONHOME", "reserved"), ("DYLD_INSERT_LIBRARIES", "reserved"),
    ("path", "reserved"), ("ctx", "step context"), ("__class__", "dunder"),
    ("a-b", "identifier"), ("1x", "identifier"), ("a b", "identifier"),
])
@pytest.mark.parametrize("text", [JOB, PRESET], ids=["job", "preset"])
@pytest.mark.reliability_case(18)
def test_a_reserved_param_name_is_refused(make_home: MakeHome, name: str, rule: str,
                                          text: str) -> None:
    jobs = text.format(name=name)
    with pytest.raises(ConfigError) as caught:
        load_home(make_home(jobs=jobs))
    problems = [p for p in caught.value.problems if isinstance(p, Problem)]
    hits = [p for p in problems if "parameter name" in p.message]
    assert hits, problems
    assert rule in hits[0].message and repr(name) in hits[0].message
    assert hits[0].line == line_of(jobs, f'"{name}" = "x"')


def test_an_ordinary_name_is_accepted(make_home: MakeHome) -> None:
    load_home(make_home(jobs=JOB.format(name="period")))
