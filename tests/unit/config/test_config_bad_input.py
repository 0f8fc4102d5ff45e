"""Bad bytes never raise a traceback: each gives one clear, located problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_helpers import MakeHome

from cadenza.config import Problem, load_home, validate_home
from cadenza.config.reader import MAX_BYTES
from cadenza.domain.errors import ConfigError

GOOD_JOB = """\
[jobs.nightly]
schedule = "0 2 * * *"
[[jobs.nightly.steps]]
name = "q"
type = "sql_query"
connection = "warehouse"
query = "select 1"
"""


def _jobs_problems(home: Path) -> list[Problem]:
    return [p for p in validate_home(home) if p.file == "jobs.toml"]


def _write_jobs(make_home: MakeHome, data: bytes) -> Path:
    home = make_home(jobs=None)
    (home / "jobs.toml").write_bytes(data)
    return home


@pytest.mark.parametrize(
    ("data", "line", "col", "fragment"),
    [
        (b"", 1, 1, "file is empty (0 bytes)"),
        (b'[jobs.a]\nschedule = "caf\xe9"\n', 2, 16, "not valid UTF-8 (byte 0xe9)"),
        (b"[jobs.a]\nx = 1\x00\n", 2, 6, "NUL byte"),
        ("[jobs.a]\n".encode("utf-16"), 1, 1, "UTF-16"),
        (b"# padding\n" * (10 * 1024 * 1024 // 10), 1, 1, "the limit is 2 MiB"),
    ],
    ids=["empty", "latin-1", "nul", "utf-16", "10MB"],
)
@pytest.mark.reliability_case(5)
def test_unreadable_jobs_file_is_one_located_problem(make_home: MakeHome, data: bytes,
                                                     line: int, col: int,
                                                     fragment: str) -> None:
    home = _write_jobs(make_home, data)
    problems = _jobs_problems(home)
    assert len(problems) == 1, problems
    problem = problems[0]
    assert (problem.line, problem.col) == (line, col)
    assert fragment in problem.message
    assert problem.is_error
    with pytest.raises(ConfigError):
        load_home(home)


@pytest.mark.reliability_case(5)
def test_the_size_limit_is_checked_before_reading(make_home: MakeHome) -> None:
    home = _write_jobs(make_home, b"#" * (MAX_BYTES + 1))
    assert "2 MiB" in _jobs_problems(home)[0].message
    (home / "jobs.toml").write_bytes(b"#" * MAX_BYTES)
    assert _jobs_problems(home) == []


def test_a_file_of_comments_only_means_no_jobs(make_home: MakeHome) -> None:
    loaded = load_home(make_home(jobs="# nothing scheduled yet\n"))
    assert loaded.jobs == {}


@pytest.mark.reliability_case(5)
def test_utf8_byte_order_mark_is_accepted(make_home: MakeHome) -> None:
    home = _write_jobs(make_home, b"\xef\xbb\xbf" + GOOD_JOB.encode())
    assert list(load_home(home).jobs) == ["nightly"]


def test_crlf_line_endings_work_and_lines_are_counted(make_home: MakeHome) -> None:
    home = _write_jobs(make_home, GOOD_JOB.replace("\n", "\r\n").encode())
    assert load_home(home).jobs["nightly"].schedule == "0 2 * * *"


@pytest.mark.reliability_case(5)
def test_crlf_errors_keep_their_line_numbers(make_home: MakeHome) -> None:
    bad = GOOD_JOB.replace('schedule = "0 2 * * *"', 'schedule = "0 2 * * 7"')
    home = _write_jobs(make_home, bad.replace("\n", "\r\n").encode())
    problems = _jobs_problems(home)
    assert [(p.line, p.col) for p in problems] == [(2, 12)]


def test_missing_files_are_clear_problems(make_home: MakeHome) -> None:
    home = make_home(settings=None, jobs=None)
    problems = validate_home(home)
    assert [(p.file, p.line) for p in problems] == [("cadenza.toml", 1), ("jobs.toml", 1)]
    assert all("file not found" in p.message for p in problems)
    with pytest.raises(ConfigError):
        load_home(home)


def test_missing_settings_file_does_not_flood_jobs_with_reference_errors(
        make_home: MakeHome) -> None:
    home = make_home(settings=None, jobs=GOOD_JOB)
    problems = validate_home(home)
    assert [p.file for p in problems] == ["cadenza.toml"]


def test_an_empty_settings_file_is_refused_but_comments_mean_defaults(
        make_home: MakeHome) -> None:
    home = make_home(settings="", jobs="# none\n")
    assert "file is empty" in validate_home(home)[0].message
    home = make_home(settings="# all defaults\n", jobs="# none\n", name="defaults")
    settings = load_home(home).settings
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8765)


def test_too_many_syntax_errors_stop_with_a_problem(make_home: MakeHome) -> None:
    home = make_home(jobs="= 1\n" * 150)
    problems = _jobs_problems(home)
    assert len(problems) == 101
    stop = [p for p in problems if "more than 100 syntax errors" in p.message]
    assert stop, problems
    assert [(p.line, p.col) for p in stop] == [(1, 1)]


def test_syntax_recovery_is_bounded_on_big_files(make_home: MakeHome) -> None:
    home = make_home(jobs="x = \n" * 350_000)  # 1.75 MB, every line broken
    problems = _jobs_problems(home)
    assert len(problems) == 11
    assert any("more than 10 syntax errors" in p.message for p in problems)


TABLE_TOKENS = """\
[jobs.copy]
params = { t = "orders" }

[[jobs.copy.steps]]
name = "copy"
type = "sql_copy"
source = { connection = "warehouse", table = "orders" }
target = { connection = "warehouse", table = "${params.t}" }

[jobs.load]

[[jobs.load.steps]]
name = "load"
type = "file_load"
path = "in/x.csv"
connection = "warehouse"
table = "stage_${month.current}"

[jobs.drop]

[[jobs.drop.steps]]
name = "drop"
type = "file_load"
path = "in/x.csv"
connection = "warehouse"
table = "t; drop table x"
"""


@pytest.mark.reliability_case(17)
def test_a_token_or_a_statement_in_a_table_name_is_refused_at_its_line(
        make_home: MakeHome) -> None:
    """Parameters never become SQL names: a ``${...}`` token in a table field (sql_copy's
    source and target, file_load's, ldap_sync's) is refused when the file is checked, at
    its file:line:col, as is a name carrying a statement; a run cannot set a table either
    (see the run-tunable table of docs/security.md), so the only names a query is built
    with are the plain names written in jobs.toml, each quoted by the dialect."""
    from cadenza.steps.base import is_run_tunable
    from cadenza.steps.registry import registry

    home = make_home(jobs=TABLE_TOKENS)
    problems = [str(p) for p in _jobs_problems(home)]
    expected = {
        "jobs.toml:8:46: error: jobs.copy.steps[0].target.table": "'${params.t}'",
        "jobs.toml:17:9: error: jobs.load.steps[0].table": "'stage_${month.current}'",
        "jobs.toml:26:9: error: jobs.drop.steps[0].table": "'t; drop table x'",
    }
    for where, value in expected.items():
        assert any(p.startswith(where) and "no ${...} tokens" in p and p.endswith(value)
                   for p in problems), (where, problems)
    for type_name, field in (("sql_copy", "target"), ("sql_copy", "source"),
                             ("file_load", "table"), ("ldap_sync", "table")):
        assert not is_run_tunable(registry()[type_name].Config, field)
