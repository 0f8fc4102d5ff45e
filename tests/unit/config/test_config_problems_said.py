"""The configuration's problems in the pages' languages: every problem a bad jobs.toml
yields here is said in French and in Chinese (cadenza.web.ui.said), its values kept."""

from __future__ import annotations

import re

import pytest
from config_helpers import MakeHome
from test_config_all_problems import BAD_JOBS

from cadenza.config import validate_home
from cadenza.web.ui.said import say

MORE_BAD_JOBS = """\
[jobs.types]
schedule = "0 2 * *"
timezone = "Europe/Pariss"
timeout = "ten minutes"
enabled = "yes"
max_concurrency = 0
tags = "nightly"
[[jobs.types.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = 12

[jobs.no-steps]
schedule = "@weekly"

[jobs.bad-step]
schedule = "@sometimes"
[[jobs.bad-step.steps]]
name = "x"
type = "teleport"

[jobs.cron-words]
schedule = "0 25 * * mon-fry"
[[jobs.cron-words.steps]]
name = "x"
type = "sql_query"
connection = "warehouse"
query = "select 1"
"""

QUOTED = re.compile(r"'[^']*'")


@pytest.mark.parametrize("lang", ["fr", "zh_Hans"])
def test_every_problem_of_a_bad_jobs_file_is_said_in_the_language(
        make_home: MakeHome, lang: str) -> None:
    problems = [p for p in validate_home(make_home(jobs=BAD_JOBS + "\n" + MORE_BAD_JOBS))
                if p.file == "jobs.toml"]
    assert len(problems) >= 20
    left = []
    for problem in problems:
        said = say(lang, problem.message)
        if said == problem.message:
            left.append(problem.message)
            continue
        for value in QUOTED.findall(problem.message):  # the values typed are kept as typed
            assert value in said, (problem.message, said)
    assert not left, "said in English only:\n" + "\n".join(left)
