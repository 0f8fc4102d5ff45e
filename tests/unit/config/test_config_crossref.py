"""Cross-references of jobs.toml: connections, pools, channels, jobs, steps, tokens, presets."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_helpers import MINIMAL_SETTINGS, MakeHome, line_of

from cadenza.config import Problem, load_home, validate_home

HEAD = """\
[jobs.main]
params = { period = "${month.current}", region = "FR" }
requires = { egress = 1 }
"""


def _job_problems(make_home: MakeHome, jobs: str, settings: str = MINIMAL_SETTINGS,
                  name: str = "home") -> list[Problem]:
    home = make_home(settings=settings, jobs=jobs, name=name)
    (home / "plugins").mkdir()  # the python steps below call cz_tasks:dumps from plugins/
    (home / "plugins" / "cz_tasks.py").write_text("def dumps() -> None:\n    pass\n")
    return [p for p in validate_home(home) if p.file == "jobs.toml"]


def _step(body: str) -> str:
    return HEAD + "[[jobs.main.steps]]\nname = \"s\"\n" + body


def _single_error(problems: list[Problem]) -> Problem:
    errors = [p for p in problems if p.is_error]
    assert len(errors) == 1, "\n".join(str(p) for p in problems)
    return errors[0]


@pytest.mark.parametrize(
    ("body", "needle", "fragment"),
    [
        ('type = "sql_query"\nconnection = "api"\nquery = "select 1"\n', 'connection = "api"',
         "connection 'api' is of type 'http'; expected a connection of type 'sql'"),
        ('type = "http"\nconnection = "warehouse"\npath = "/x"\n', 'connection = "warehouse"',
         "expected a connection of type 'http'"),
        ('type = "sql_copy"\nsource = { connection = "warehouse", table = "a" }\n'
         'target = { connection = "nope", table = "b" }\n', "target = ",
         "unknown connection 'nope'"),
        ('type = "ldap_sync"\nconnection = "warehouse"  # ldap\nbase = "dc=x"\n'
         'target = { connection = "warehouse", table = "people", key = "uid" }\n',
         "# ldap", "expected a connection of type 'ldap'"),
        ('type = "report"\npath = "r.html"\nsections = [{ title = "t", connection = "x", '
         'query = "select 1" }]\n', "sections = ", "unknown connection 'x'"),
        ('type = "http"\nurl = "https://x.org"\nvia = "nowhere"\n', 'via = "nowhere"',
         "unknown pool 'nowhere'"),
        ('type = "http"\nurl = "https://x.org"\nrequires = { egress = 2 }\n',
         "requires = { egress = 2 }", "has 1 member(s); 2 can never be leased"),
        ('type = "notify"\nto = ["role:ops"]\nsubject = "x"\nchannel = "sms"\n',
         'channel = "sms"', "unknown channel 'sms'"),
        ('type = "call_job"\njob = "main"\n', 'job = "main"', "a job cannot call itself"),
        ('type = "call_job"\njob = "ghost"\n', 'job = "ghost"', "unknown job 'ghost'"),
        ('type = "sql_query"\nconnection = "warehouse"\nquery = "select ${params.nope}"\n',
         "${params.nope}", "parameter 'nope' is not declared"),
        ('type = "sql_query"\nconnection = "warehouse"\nquery = "select ${secret.pw}"\n',
         "${secret.pw}", "belong in cadenza.toml"),
        ('type = "sql_query"\nconnection = "warehouse"\nquery = "select ${rnu.id}"\n',
         "${rnu.id}", "unknown token"),
        ('type = "sql_query"\nconnection = "warehouse"\nquery = "select ${run.idd}"\n',
         "${run.idd}", "run.id, run.scheduled_for, run.trigger"),
        ('type = "sql_query"\nconnection = "warehouse"\nquery = "select ${params.period"\n',
         "${params.period\"", "unterminated"),
        ('type = "sql_query"\nconnection = "warehouse"\nquery = "select ${steps.s.rows}"\n',
         "${steps.s.rows}", "cannot read its own output"),
        ('type = "file_export"\nconnection = "warehouse"\nquery = "select 1"\n'
         'path = "/etc/out.csv"\n', 'path = "/etc/out.csv"', "outside [files].roots"),
    ],
)
@pytest.mark.reliability_case(9)
def test_each_dangling_reference_is_a_located_error(make_home: MakeHome, body: str,
                                                    needle: str, fragment: str) -> None:
    jobs = _step(body)
    error = _single_error(_job_problems(make_home, jobs))
    assert fragment in error.message
    assert error.line == line_of(jobs, needle)


def test_job_requires_must_name_pools(make_home: MakeHome) -> None:
    jobs = HEAD.replace("egress = 1", "egres = 1") + \
        '[[jobs.main.steps]]\nname = "s"\ntype = "python"\ncallable = "cz_tasks:dumps"\n'
    error = _single_error(_job_problems(make_home, jobs))
    assert error.path == "jobs.main.requires.egres"
    assert "unknown pool 'egres': expected a pool of cadenza.toml (pools: egress)" in error.message
    assert (error.line, error.col) == (3, 14)


@pytest.mark.reliability_case(9)
def test_call_job_checks_the_target_preset_params_and_cycles(make_home: MakeHome) -> None:
    jobs = """\
[jobs.a]
[[jobs.a.steps]]
name = "call-b"
type = "call_job"
job = "b"
preset = "monthly"
params = { unknown = 1 }

[jobs.b]
params = { period = "x" }
[[jobs.b.steps]]
name = "call-a"
type = "call_job"
job = "a"
"""
    problems = [p for p in _job_problems(make_home, jobs) if p.is_error]
    messages = sorted(p.message for p in problems)
    assert any("job 'b' has no preset 'monthly'" in m for m in messages)
    assert any("parameter 'unknown' is not declared in job 'b'" in m for m in messages)
    cycles = [p for p in problems if "cycle" in p.message]
    assert len(cycles) == 1 and "a → b → a" in cycles[0].message


def test_presets_name_declared_params_and_existing_steps(make_home: MakeHome) -> None:
    jobs = HEAD + """\
[jobs.main.presets.month-end]
schedule = "0 6 1 * *"
params = { period = "${month.previous}", colour = "red" }
step_args = { ghost = { x = 1 }, s = { y = "${steps.s.rows}" } }
disabled_steps = ["s", "phantom"]

[[jobs.main.steps]]
name = "s"
type = "python"
callable = "cz_tasks:dumps"
"""
    problems = [p for p in _job_problems(make_home, jobs) if p.is_error]
    found = {(p.path, p.line) for p in problems}
    assert ("jobs.main.presets.month-end.params.colour", line_of(jobs, "colour")) in found
    assert ("jobs.main.presets.month-end.step_args.ghost", line_of(jobs, "ghost")) in found
    assert ("jobs.main.presets.month-end.step_args.s.y", line_of(jobs, "ghost")) in found
    assert ("jobs.main.presets.month-end.disabled_steps[1]", line_of(jobs, "phantom")) in found
    assert len(problems) == 4


def test_params_cannot_use_step_outputs_or_secrets(make_home: MakeHome) -> None:
    jobs = HEAD.replace('region = "FR"', 'rows = "${steps.s.rows}", pw = "${env.PW}"') + \
        '[[jobs.main.steps]]\nname = "s"\ntype = "python"\ncallable = "cz_tasks:dumps"\n'
    problems = [p for p in _job_problems(make_home, jobs) if p.is_error]
    assert sorted(p.path for p in problems) == ["jobs.main.params.pw", "jobs.main.params.rows"]


def test_escaped_tokens_are_literal(make_home: MakeHome) -> None:
    jobs = _step('type = "sql_query"\nconnection = "warehouse"\nquery = "select \'$${x}\'"\n')
    assert _job_problems(make_home, jobs) == []


@pytest.mark.reliability_case(2)
def test_job_ids_differing_only_in_case_are_refused(make_home: MakeHome) -> None:
    step = '[[jobs.{0}.steps]]\nname = "s"\ntype = "python"\ncallable = "cz_tasks:dumps"\n'
    jobs = "[jobs.Sales]\n" + step.format("Sales") + "[jobs.sales]\n" + step.format("sales")
    error = _single_error(_job_problems(make_home, jobs))
    assert error.line == line_of(jobs, "[jobs.sales]")
    assert "differs only in case from 'Sales' (line 1)" in error.message


def test_unknown_step_type_lists_the_known_ones(make_home: MakeHome) -> None:
    error = _single_error(_job_problems(make_home, _step('type = "shell"\n')))
    assert error.message.startswith("unknown step type 'shell': expected one of call_job, "
                                    "file_export, file_load, http, ldap_sync, notify, python, "
                                    "report, sql_copy, sql_query")
    assert error.line == line_of(_step('type = "shell"\n'), 'type = "shell"')


def test_a_job_needs_steps_and_no_id_key(make_home: MakeHome) -> None:
    jobs = '[jobs.empty]\nid = "empty"\nschedule = "@daily"\n'
    problems = _job_problems(make_home, jobs)
    assert {(p.path, p.line) for p in problems} == {("jobs.empty.id", 2), ("jobs.empty", 1)}


def test_notify_without_channel_needs_some_channel(make_home: MakeHome) -> None:
    settings = MINIMAL_SETTINGS.split("[channels.mail]")[0]
    jobs = _step('type = "notify"\nto = "role:ops"\nsubject = "done"\n')
    error = _single_error(_job_problems(make_home, jobs, settings=settings))
    assert "no channel to send through" in error.message
    assert _job_problems(make_home, jobs, name="with-channel") == []


@pytest.mark.reliability_case(9)
def test_python_module_not_found_is_a_warning(make_home: MakeHome, tmp_path: Path) -> None:
    jobs = _step('type = "python"\ncallable = "my_checks:verify"\n')
    problems = _job_problems(make_home, jobs)
    assert [p.severity for p in problems] == ["warning"]
    home = make_home(jobs=jobs, name="with-plugin")
    (home / "plugins").mkdir()
    (home / "plugins" / "my_checks.py").write_text("def verify():\n    return 1\n")
    assert load_home(home).warnings == []


@pytest.mark.reliability_case(9)
def test_plaintext_secrets_in_jobs_are_warnings(make_home: MakeHome) -> None:
    jobs = _step('type = "http"\nurl = "https://x.org"\nheaders = { Authorization = "Bearer '
                 'abc" }\n')
    problems = _job_problems(make_home, jobs)
    assert [(p.severity, p.path) for p in problems] == [
        ("warning", "jobs.main.steps[0].headers.Authorization")]
    assert "never live in jobs.toml" in problems[0].message


def test_loaded_jobs_keep_file_order_and_merge_step_retry(make_home: MakeHome) -> None:
    step = '[[jobs.{0}.steps]]\nname = "s"\ntype = "python"\ncallable = "cz_tasks:dumps"\n'
    jobs = "[jobs.zeta]\n[jobs.zeta.retry]\nattempts = 5\nmax_seconds = 60\n" + \
        step.format("zeta") + "retry = { base_seconds = 120 }\n" + \
        "[jobs.alpha]\n" + step.format("alpha")
    loaded = load_home(make_home(jobs=jobs))
    assert list(loaded.jobs) == ["zeta", "alpha"]
    zeta = loaded.jobs["zeta"]
    retry = zeta.retry_for(zeta.steps[0])
    assert (retry.attempts, retry.base_seconds, retry.max_seconds) == (5, 120, 120)
    alpha = loaded.jobs["alpha"]
    assert alpha.retry_for(alpha.steps[0]) == alpha.retry


def test_a_call_job_cycle_through_a_preset_is_refused_with_its_chain(
        make_home: MakeHome) -> None:
    jobs = """\
[jobs.nightly]
[[jobs.nightly.steps]]
name = "call"
type = "call_job"
job = "export"
preset = "back"

[jobs.export]
[[jobs.export.steps]]
name = "next"
type = "call_job"
job = "leaf"

[jobs.export.presets.back]
step_args = { next = { job = "nightly" } }

[jobs.export.presets.plain]
description = "no call back: no cycle"

[jobs.leaf]
[[jobs.leaf.steps]]
name = "x"
type = "python"
callable = "cz_tasks:dumps"
"""
    error = _single_error(_job_problems(make_home, jobs))
    assert error.message == ("call_job cycle: nightly → export (preset back) → nightly; "
                             "cycles are refused")
    assert error.path == "jobs.export.presets.back.step_args.next.job"
    assert error.line == line_of(jobs, 'step_args = { next = { job = "nightly" } }')


def test_a_preset_that_disables_the_call_back_makes_no_cycle(make_home: MakeHome) -> None:
    jobs = """\
[jobs.a]
[[jobs.a.steps]]
name = "call"
type = "call_job"
job = "b"
preset = "quiet"

[jobs.b]
[[jobs.b.steps]]
name = "back"
type = "call_job"
job = "c"

[jobs.b.presets.quiet]
step_args = { back = { job = "a" } }
disabled_steps = ["back"]

[jobs.c]
[[jobs.c.steps]]
name = "x"
type = "python"
callable = "cz_tasks:dumps"
"""
    assert [p for p in _job_problems(make_home, jobs) if p.is_error] == []
