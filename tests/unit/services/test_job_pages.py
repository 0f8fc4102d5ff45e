"""Pure helpers of the jobs pages: a job's part of jobs.toml, search, charts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cadenza.domain.states import RunState
from cadenza.services.history import RunView
from cadenza.services.job_pages import charts, job_toml, matches
from cadenza.services.jobs import JobSummary

TEXT = """# The catalogue

# introduces a
[jobs.a]
schedule = "0 2 * * *"  # nightly

[jobs.a.retry]
attempts = 2

[[jobs.a.steps]]
name = "one"
type = "python"

# introduces ab
[jobs.ab]
description = "not a"

[[jobs."ab".steps]]
name = "two"
"""


def test_job_toml_is_the_jobs_own_tables_with_the_comments_above() -> None:
    a = job_toml(TEXT, "a")
    assert a.startswith("# introduces a\n[jobs.a]\n")
    assert "# nightly" in a and "[jobs.a.retry]" in a and "[[jobs.a.steps]]" in a
    assert "introduces ab" not in a and "jobs.ab" not in a
    ab = job_toml(TEXT, "ab")
    assert ab.startswith("# introduces ab\n[jobs.ab]") and '[[jobs."ab".steps]]' in ab
    assert job_toml(TEXT, "nope") == ""


def test_search_matches_id_description_tags_steps_any_case() -> None:
    job = JobSummary("sales-load", True, None, None, ("sales",), ("load-file",), (),
                     "Monthly Sales")
    assert matches(job, "", ())
    assert matches(job, "monthly", ()) and matches(job, "LOAD-F", ())
    assert not matches(job, "hello", ())
    assert matches(job, "", ("sales",)) and not matches(job, "", ("sales", "demo"))


def _run(state: RunState, start: datetime, seconds: float) -> RunView:
    return RunView("r", "j", state, "manual:x", None, start, start + timedelta(seconds=seconds),
                   None, None, {}, None, None, None, 0)


def test_charts() -> None:
    day = datetime(2027, 3, 10, 12, tzinfo=UTC)
    runs = [_run(RunState.SUCCEEDED, day, 2), _run(RunState.FAILED, day - timedelta(days=2), 5)]
    duration, success = charts(runs)
    assert duration is not None and duration["series"][0]["values"] == [5.0, 2.0]
    assert success is not None and len(success["x"]) == 14
    assert success["series"][0]["values"][-1] == 1 and success["series"][1]["values"][-3] == 1
    assert charts(runs[:1])[0] is None  # one run draws no duration line
    assert charts([]) == (None, None)
