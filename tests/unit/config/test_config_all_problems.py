"""One file holding many problems reports every one of them, each at its own line."""

from __future__ import annotations

import re

import pytest
from config_helpers import MINIMAL_SETTINGS, MakeHome, line_of

from cadenza.config import Problem, load_home, validate_home
from cadenza.domain.errors import ConfigError

BAD_JOBS = """\
# every kind of problem, one of each
[jobs.good]
schedule = "0 2 * * *"
params = { period = "${month.current}" }

[[jobs.good.steps]]
name = "first"
type = "sql_query"
connection = "warehouse"
query = "select 1"

[jobs.syntax]
schedule = "0 3 * *

[[jobs.syntax.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"

[jobs.good]
description = "the same table again"

[jobs.unknown-key]
schedul = "0 2 * * *"
[[jobs.unknown-key.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"

[jobs."sales load"]
[[jobs."sales load".steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"

[jobs.bad-cron]
schedule = "61 2 * * *"
timezone = "Europe/Pariss"
[[jobs.bad-cron.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"

[jobs.dow7]
schedule = "0 2 * * 7"
[jobs.dow7.retry]
attempts = 0
backoff = "linear"
[[jobs.dow7.steps]]
name = "no-table"
type = "file_load"
path = "in/sales.csv"
connection = "warehouse"
[[jobs.dow7.steps]]
name = "uses"
type = "http"
url = "https://example.org/x"
json = { later = "${steps.after.rows}", unknown = "${steps.nope.rows}" }
[[jobs.dow7.steps]]
name = "after"
type = "sql_query"
connection = "nowhere"
query = "select 1"
[[jobs.dow7.steps]]
name = "after"
type = "sql_query"
connection = "warehouse"
query = "select 2"
"""

def _at(problems: list[Problem], file: str, line: int, fragment: str) -> Problem:
    found = [p for p in problems if p.file == file and p.line == line and fragment in p.message
             and p.is_error]
    assert found, f"no error containing {fragment!r} at {file}:{line}; got:\n" + "\n".join(
        str(p) for p in problems)
    return found[0]


@pytest.mark.reliability_case(1, 2, 3, 4, 10)
def test_every_problem_of_jobs_toml_is_reported_at_its_line(make_home: MakeHome) -> None:
    home = make_home(jobs=BAD_JOBS)
    with pytest.raises(ConfigError) as caught:
        load_home(home)
    problems = caught.value.problems
    assert all(isinstance(p, Problem) for p in problems)
    errors: list[Problem] = [p for p in problems if isinstance(p, Problem)]
    text = BAD_JOBS

    _at(errors, "jobs.toml", line_of(text, 'schedule = "0 3 * *'), "unterminated string")
    first, dup = [k + 1 for k, line in enumerate(text.splitlines()) if line == "[jobs.good]"]
    duplicate = _at(errors, "jobs.toml", dup, "duplicate table [jobs.good]")
    assert f"line {first}" in duplicate.message
    unknown = _at(errors, "jobs.toml", line_of(text, "schedul = "), "unknown key 'schedul'")
    assert "schedule" in unknown.message and "allowed keys:" in unknown.message
    assert ", id," not in unknown.message  # the id comes from the table name, not a key
    _at(errors, "jobs.toml", line_of(text, '[jobs."sales load"]'), "invalid job id 'sales load'")
    _at(errors, "jobs.toml", line_of(text, 'schedule = "61 2'), "minute")
    _at(errors, "jobs.toml", line_of(text, "Europe/Pariss"), "unknown time zone")
    dow = _at(errors, "jobs.toml", line_of(text, 'schedule = "0 2 * * 7"'), "day-of-week")
    assert "7" in dow.message
    _at(errors, "jobs.toml", line_of(text, "attempts = 0"), ">= 1")
    _at(errors, "jobs.toml", line_of(text, 'backoff = "linear"'), "'fixed' or 'exponential'")
    step_header = line_of(text, 'name = "no-table"') - 1
    _at(errors, "jobs.toml", step_header, "missing required key 'table'")
    _at(errors, "jobs.toml", line_of(text, "${steps.after.rows}"), "${steps.after.rows}")
    _at(errors, "jobs.toml", line_of(text, "${steps.nope.rows}"), "${steps.nope.rows}")
    _at(errors, "jobs.toml", line_of(text, 'connection = "nowhere"'),
        "unknown connection 'nowhere'")
    second_after = [k + 1 for k, line in enumerate(text.splitlines())
                    if line == 'name = "after"'][1]
    _at(errors, "jobs.toml", second_after, "duplicate step name 'after'")
    assert len([p for p in errors if p.is_error]) == 14  # nothing reported twice


@pytest.mark.reliability_case(1)
def test_problems_print_as_file_line_col(make_home: MakeHome) -> None:
    home = make_home(jobs=BAD_JOBS)
    problems = validate_home(home)
    line = line_of(BAD_JOBS, "attempts = 0")
    assert f"jobs.toml:{line}:12: error: jobs.dow7.retry.attempts: expected a number >= 1, " \
           "got integer 0" in [str(p) for p in problems]
    with pytest.raises(ConfigError) as caught:
        load_home(home)
    assert f"jobs.toml:{line}:12: error:" in str(caught.value)


def test_the_unknown_step_steps_token_names_the_token(make_home: MakeHome) -> None:
    problems = validate_home(make_home(jobs=BAD_JOBS))
    messages = [p.message for p in problems]
    assert any("no step 'nope'" in m for m in messages)
    assert any("step 'after' runs after this one" in m for m in messages)


BAD_SETTINGS = MINIMAL_SETTINGS + """
[server]
host = "0.0.0.0"
colour = "blue"

[pools.empty]
kind = "unit"

[[rules]]
name = "missed-to-ops"
on = ["missed"]
jobs = ["*"]
notify = ["role:ops"]
channel = "pager"
"""


@pytest.mark.reliability_case(3)
def test_every_problem_of_cadenza_toml_is_reported_at_its_line(make_home: MakeHome) -> None:
    home = make_home(settings=BAD_SETTINGS)
    with pytest.raises(ConfigError) as caught:
        load_home(home)
    problems = [p for p in caught.value.problems if isinstance(p, Problem)]
    text = BAD_SETTINGS
    unknown = _at(problems, "cadenza.toml", line_of(text, "colour"), "unknown key 'colour'")
    assert "allowed keys: host, port, base_url" in unknown.message
    _at(problems, "cadenza.toml", line_of(text, "[pools.empty]"), "has no members")
    _at(problems, "cadenza.toml", line_of(text, 'channel = "pager"'), "unknown channel 'pager'")
    host = [p for p in problems if p.path == "server.host"]
    assert [p.severity for p in host] == ["warning"]
    assert host[0].line == line_of(text, 'host = "0.0.0.0"')
    assert len([p for p in problems if p.is_error]) == 3


def test_listening_on_every_interface_is_only_a_warning(make_home: MakeHome) -> None:
    home = make_home(settings=MINIMAL_SETTINGS + '\n[server]\nhost = "::"\n')
    loaded = load_home(home)
    assert loaded.settings.server.host == "::"
    assert [p.path for p in loaded.warnings] == ["server.host"]
    assert str(loaded.warnings[0]).startswith("cadenza.toml:")


def test_problems_of_both_files_are_reported_together(make_home: MakeHome) -> None:
    home = make_home(settings=BAD_SETTINGS, jobs=BAD_JOBS)
    problems = validate_home(home)
    files = [p.file for p in problems]
    assert "cadenza.toml" in files and "jobs.toml" in files
    assert files == sorted(files)  # cadenza.toml first, then jobs.toml
    jobs_lines = [p.line for p in problems if p.file == "jobs.toml"]
    assert jobs_lines == sorted(jobs_lines)


KEYS_TWICE = """\
[jobs.twice]
schedule = "0 2 * * *"
description = "a second schedule line below"
schedule = "0 3 * * *"
retry = { attempts = 2, attempts = 3 }

[[jobs.twice.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"
query = "select 2"

[jobs.other]
schedule = "0 4 * * *"
[[jobs.other.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"
"""


@pytest.mark.reliability_case(2)
def test_a_key_set_twice_in_one_table_is_refused_naming_the_first(
        make_home: MakeHome) -> None:
    """A key written twice in one table (a job's second ``schedule`` line, a step's second
    ``query``, an inline table's repeated key) is an error at the second one, naming the
    line of the first; the other jobs are still validated, and nothing is loaded."""
    home = make_home(jobs=KEYS_TWICE)
    with pytest.raises(ConfigError) as caught:
        load_home(home)
    errors = [p for p in caught.value.problems if isinstance(p, Problem) and p.is_error]
    text = KEYS_TWICE
    schedule = _at(errors, "jobs.toml", line_of(text, 'schedule = "0 3 * * *"'),
                   "duplicate key 'schedule'")
    first_schedule = line_of(text, 'schedule = "0 2 * * *"')
    assert f"first set at line {first_schedule}" in schedule.message
    assert str(schedule).startswith(f"jobs.toml:{schedule.line}:1: error:")
    query = _at(errors, "jobs.toml", line_of(text, 'query = "select 2"'), "duplicate key 'query'")
    first_query = next(k + 1 for k, line in enumerate(text.splitlines())
                       if line == 'query = "select 1"')
    assert f"first set at line {first_query}" in query.message
    inline = _at(errors, "jobs.toml", line_of(text, "attempts = 2, attempts = 3"),
                 "duplicate key 'attempts' in an inline table")
    assert inline.col == text.splitlines()[inline.line - 1].index("attempts = 3") + 1
    assert len(errors) == 3  # each reported once; jobs.other has nothing wrong


ONE_JOB = """\
[jobs.j]
{job}
[[jobs.j.steps]]
name = "s"
{step}
"""
SQL_STEP = 'type = "sql_query"\nconnection = "warehouse"\nquery = "select 1"'


@pytest.mark.parametrize(("job", "step", "fragment"), [
    # negative numbers and durations
    ("max_concurrency = -1", SQL_STEP, "expected a number >= 1, got integer -1"),
    ("catchup_max = -1", SQL_STEP, "expected a number >= 0, got integer -1"),
    ("budget_per_hour = -1", SQL_STEP, ">= 0"),
    ("retry = { attempts = -1 }", SQL_STEP, ">= 1"),
    ("retry = { base_seconds = -1.5 }", SQL_STEP, "expected a number >= 0.0, got number -1.5"),
    ("requires = { egress = -1 }", SQL_STEP, ">= 1"),
    ('timeout = "-5m"', SQL_STEP, "expected a duration like"),
    ('missed_grace = "-1m"', SQL_STEP, "expected a duration like"),
    ('jitter = "-5m"', SQL_STEP, "expected a duration like"),
    ('alerts = { long_run = "-1h" }', SQL_STEP, "expected a duration like"),
    ("", SQL_STEP + '\ntimeout = "-1s"', "expected a duration like"),
    # empty strings
    ('schedule = ""', SQL_STEP, "empty schedule"),
    ('timezone = ""', SQL_STEP, "unknown time zone ''"),
    ('tags = [""]', SQL_STEP, "expected 1 to 64 characters"),
    ('start_by = ""', SQL_STEP, "expected a time of day"),
    ('windows = [""]', SQL_STEP, "expected a window like"),
    ('presets = { p = { schedule = "" } }', SQL_STEP, "empty schedule"),
    ("", SQL_STEP.replace('query = "select 1"', 'query = ""'), "expected a non-empty string"),
    ("", SQL_STEP.replace('query = "select 1"', 'query = "   "'),
     "expected a non-empty string"),
    ("", SQL_STEP.replace('connection = "warehouse"', 'connection = ""'),
     "unknown connection ''"),
    ("", 'type = ""', "unknown step type ''"),
    ("", 'type = "python"\ncallable = ""', "expected 'module:function'"),
    ("", 'type = "http"\nurl = ""', "expected a URL like"),
    ("", 'type = "file_load"\npath = ""\nconnection = "warehouse"\ntable = "t"',
     "expected a non-empty file path"),
    ("", 'type = "file_load"\npath = "a.csv"\nconnection = "warehouse"\ntable = ""',
     "expected a table name"),
    ("", 'type = "call_job"\njob = ""', "expected 1 to 64 characters"),
    ("", 'type = "notify"\nto = ["ops@example.org"]\nsubject = ""', "expected a non-empty"),
    ("", 'type = "notify"\nto = [""]\nsubject = "s"', "expected an e-mail address"),
])
@pytest.mark.reliability_case(4)
def test_negative_numbers_and_empty_strings_in_jobs_are_refused_at_their_line(
        make_home: MakeHome, job: str, step: str, fragment: str) -> None:
    """In jobs.toml too, a negative count, a negative duration or an empty string where a
    schedule, zone, name, query, path, URL or address is wanted is an error at the value's
    line saying what was expected (``priority`` may be negative: lower runs later)."""
    text = ONE_JOB.format(job=job, step=step)
    home = make_home(jobs=text)
    problems = [p for p in validate_home(home) if p.is_error]
    hits = [p for p in problems if fragment in p.message]
    assert hits, problems
    bad_line = next(k + 1 for k, line in enumerate(text.splitlines())
                    if re.search(r'= "?-|= ""|= "   "|\[""\]', line))
    assert (hits[0].file, hits[0].line) == ("jobs.toml", bad_line), problems


@pytest.mark.reliability_case(4)
def test_a_negative_priority_and_an_empty_description_are_accepted(
        make_home: MakeHome) -> None:
    """Not every negative number or empty string is a mistake: ``priority = -5`` runs the
    job after the others, and ``description = ""`` is no description."""
    text = ONE_JOB.format(job='priority = -5\ndescription = ""', step=SQL_STEP)
    job = load_home(make_home(jobs=text)).jobs["j"]
    assert (job.priority, job.description) == (-5, "")


@pytest.mark.reliability_case(13)
def test_an_nth_weekday_schedule_is_refused_at_its_line_and_column(
        make_home: MakeHome) -> None:
    """``schedule = "0 9 * * 5#5"`` in jobs.toml is an error at the schedule's value,
    naming the field and the form; so is a preset's ``L``."""
    text = ONE_JOB.format(job='schedule = "0 9 * * 5#5"\npresets.p = { schedule = "0 9 L * *" }',
                          step=SQL_STEP)
    problems = [str(p) for p in validate_home(make_home(jobs=text)) if p.is_error]
    assert problems == [
        "jobs.toml:2:12: error: jobs.j.schedule: invalid schedule '0 9 * * 5#5': day-of-week: "
        "'5#5': the n-th weekday form (#, like fri#5) is not supported",
        "jobs.toml:3:26: error: jobs.j.presets.p.schedule: invalid schedule '0 9 L * *': "
        "day-of-month: 'L': the last-day form (L) is not supported; for the last working day "
        "of the month use business_day = -1 with a calendar",
    ]
