"""cadenza.toml: defaults, the store URL helper, pools, channels, numbers."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from config_helpers import MINIMAL_SETTINGS, MakeHome

from cadenza.config import load_home, validate_home
from cadenza.config.schema_settings import Settings, absolute_sqlite_url


@pytest.mark.reliability_case(31)
def test_defaults_are_the_spec_ones() -> None:
    settings = Settings()
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8765)
    assert settings.store.url == "sqlite:///data/cadenza.db"
    assert settings.store.sqlite_synchronous == "NORMAL"
    assert (settings.workers.count, settings.workers.max_concurrent_runs) == (4, 16)
    assert settings.files.roots == ["data/files"]
    assert (settings.retention.days, settings.retention.keep_last_per_job) == (90, 100)


def test_store_url_resolves_relative_sqlite_paths_against_the_home(tmp_path: Path) -> None:
    settings = Settings()
    expected = (tmp_path / "data" / "cadenza.db").resolve().as_posix()
    assert settings.store_url(tmp_path) == f"sqlite:///{expected}"
    absolute = f"sqlite:///{expected}"
    assert absolute_sqlite_url(absolute, Path("/elsewhere")) == absolute
    pg = "postgresql+psycopg://cz@db/cz"
    assert absolute_sqlite_url(pg, tmp_path) == pg
    assert absolute_sqlite_url("sqlite:///:memory:", tmp_path) == "sqlite:///:memory:"
    assert settings.file_roots(tmp_path) == [(tmp_path / "data" / "files").resolve()]


def test_store_must_be_sqlite_or_postgresql(make_home: MakeHome) -> None:
    home = make_home(settings='[store]\nurl = "mysql+pymysql://u@h/db"\n')
    problems = validate_home(home)
    assert [(p.line, p.col) for p in problems] == [(2, 7)]
    assert "sqlite:/// or postgresql+psycopg://" in problems[0].message


@pytest.mark.parametrize(
    ("snippet", "fragment"),
    [
        ("[server]\nport = true\n", "expected an integer, got boolean true"),
        ("[server]\nport = 70000\n", "<= 65535"),
        ("[workers]\ncount = 0\n", ">= 1"),
        ("[workers]\ncount = 99999999999999999999999\n", "<= 1024"),
        ("[workers]\ncount = 2.5\n", "expected an integer"),
        ('[workers]\ncount = "4"\n', "expected an integer, got string '4'"),
        ("[pools.p]\nkind = \"route\"\nhealth = { threshold = nan }\n"
         "[[pools.p.members]]\nid = \"a\"\nproxy = \"http://h:1\"\n", "finite number"),
        ("[pools.p]\nkind = \"route\"\ncooldown = 30\n[[pools.p.members]]\nid = \"a\"\n"
         "proxy = \"http://h:1\"\n", 'expected a duration string like "30s"'),
        ("[pools.p]\nkind = \"route\"\ncooldown = \"30 seconds\"\n[[pools.p.members]]\n"
         "id = \"a\"\nproxy = \"http://h:1\"\n", 'expected a duration like "30s"'),
        ("[pools.p]\nkind = \"route\"\n[[pools.p.members]]\nid = \"a\"\n"
         "proxy = \"socks4://h:1080\"\n", "(http or https or socks5 or socks5h)"),
        ("[retention]\ndays = inf\n", "expected an integer"),
        ("[files]\nroots = []\n", "at least 1 item"),
        ('[connections.x]\nurl = "sqlite://"\n', "missing required key 'type': expected one "
                                                 "of sql, http, ldap"),
        ('[connections.x]\ntype = "ftp"\n', "unknown type 'ftp': expected one of sql, http, "
                                           "ldap"),
        ('[connections."a b"]\ntype = "sql"\nurl = "sqlite://"\n', "expected 1 to 64"),
        ('[connections.x]\ntype = "http"\nbase_url = "ftp://h"\n', "expected a URL like"),
        ('[connections.x]\ntype = "http"\nbase_url = "https://h"\nheaders = { X = "a\\r\\nb" }\n',
         "without line breaks"),
        ('[channels.m]\ntype = "email"\nhost = "h"\nsender = "nobody"\n', "e-mail address"),
        ('[channels.m]\ntype = "email"\nhost = "h"\nsender = "a@b.org"\nssl = true\n',
         "not both"),
    ],
)
@pytest.mark.reliability_case(4)
def test_wrong_values_say_what_was_expected(make_home: MakeHome, snippet: str,
                                            fragment: str) -> None:
    home = make_home(settings="# settings under test\n" + snippet)
    problems = [p for p in validate_home(home) if p.is_error]
    assert any(fragment in p.message for p in problems), problems
    assert all(p.file == "cadenza.toml" and p.line > 1 for p in problems), problems


def test_pool_member_rules(make_home: MakeHome) -> None:
    settings = MINIMAL_SETTINGS + """
[pools.accounts]
kind = "credential"
[[pools.accounts.members]]
id = "acct-1"
route = "fr-1"
fields = { username = "bot", password = "${secret.acct_1}" }
[[pools.accounts.members]]
id = "fr-1"
route = "de-9"
proxy = "http://h:1"

[pools.units]
kind = "unit"
health = { interval = "30s" }
[[pools.units.members]]
id = "u1"
"""
    problems = validate_home(make_home(settings=settings), resolve_secret=lambda n: "pw")
    messages = {(p.path, p.message.split(":")[0]) for p in problems}
    assert ("pools.accounts.members[1].id", "member id 'fr-1' is already used in pool "
            "'egress'; ids are unique across pools") in {
        (p.path, p.message) for p in problems}
    assert ("pools.accounts.members[1].route", "no route member 'de-9'") in messages
    assert any(p.path == "pools.accounts.members[1].proxy" for p in problems)
    assert any(p.path == "pools.units.health" for p in problems)
    assert not any(p.path == "pools.accounts.members[0].route" for p in problems)


def test_only_one_default_channel(make_home: MakeHome) -> None:
    settings = MINIMAL_SETTINGS + 'default = true\n[channels.hook]\ntype = "webhook"\n' \
        'url = "https://hooks.example.org/x"\ndefault = true\n'
    problems = validate_home(make_home(settings=settings))
    assert [p.path for p in problems] == ["channels.hook.default"]
    fixed = settings.replace('x"\ndefault = true', 'x"')
    loaded = load_home(make_home(settings=fixed, name="fixed"))
    assert loaded.settings.default_channel() == "mail"


def test_plaintext_secrets_are_warnings(make_home: MakeHome) -> None:
    settings = MINIMAL_SETTINGS + 'password = "hunter2"\n[connections.db]\ntype = "sql"\n' \
        'url = "postgresql+psycopg://cz:hunter2@db/cz"\n'
    loaded = load_home(make_home(settings=settings))
    assert sorted(p.path for p in loaded.warnings) == ["channels.mail.password",
                                                      "connections.db.url"]
    assert all("hunter2" not in str(p) for p in loaded.warnings)


def test_rules_naming_unknown_jobs_or_tags_are_warnings(make_home: MakeHome) -> None:
    settings = MINIMAL_SETTINGS + '[[rules]]\nname = "r"\non = ["failed"]\n' \
        'jobs = ["nightly", "sales-*"]\ntags = ["finance"]\nnotify = ["role:ops"]\n'
    loaded = load_home(make_home(settings=settings))
    assert sorted(p.path for p in loaded.warnings) == ["rules[0].jobs[0]", "rules[0].tags[0]"]
    assert loaded.settings.rules[0].channel is None


@pytest.mark.reliability_case(4)
def test_nan_is_not_a_number_we_accept() -> None:
    with pytest.raises(ValueError, match="finite"):
        Settings.model_validate({"pools": {"p": {"kind": "route", "health": {
            "threshold": math.nan}}}})


def test_rules_naming_unknown_channels_are_located_errors(make_home: MakeHome) -> None:
    settings = MINIMAL_SETTINGS + '[[rules]]\nname = "r"\non = ["missed", "stalled"]\n' \
        'jobs = ["*"]\nnotify = ["role:ops", "channel:sms"]\nchannel = "pager"\n'
    problems = validate_home(make_home(settings=settings))
    got = {p.path: p.message for p in problems if p.severity == "error"}
    assert got["rules[0].notify[1]"].startswith("unknown channel 'sms': expected one of the "
                                                "[channels] of cadenza.toml (mail")
    assert got["rules[0].channel"].startswith("unknown channel 'pager'")
    assert all(p.line > 0 for p in problems)


NON_EMPTY = "expected a non-empty string"
DURATION = 'expected a duration like "30s"'
ROUTE_POOL = '[pools.q]\nkind = "route"\n[[pools.q.members]]\nid = "a"\nproxy = "http://h:1"\n'
MAIL = '[channels.c]\ntype = "email"\nhost = "h"\nsender = "a@b.org"\n'
LDAP = '[connections.l]\ntype = "ldap"\nurl = "ldap://h"\n'
RULE = '[[rules]]\nname = "r"\non = ["failed"]\njobs = ["*"]\nnotify = ["role:ops"]\n'


@pytest.mark.parametrize(("snippet", "fragment"), [
    # negative numbers and durations
    ("[server]\nport = -1\n", "expected a number >= 1, got integer -1"),
    ("[workers]\ncount = -4\n", "expected a number >= 1, got integer -4"),
    ("[workers]\nlease = \"-1m\"\n", DURATION),
    ("[workers]\nmax_clock_skew = \"-5s\"\n", DURATION),
    ("[server]\nheader_timeout = \"-1s\"\n", DURATION),
    ("[retention]\ndays = -1\n", ">= 1"),
    ("[retention]\nkeep_last_per_job = -1\n", ">= 0"),
    ("[limits]\nstep_output_bytes = -1\n", ">= 1024"),
    ("[alerts]\nlog_lines = -1\n", ">= 0"),
    ("[alerts]\nreminder_after = \"-1h\"\n", DURATION),
    (MAIL + "port = -25\n", ">= 1"),
    (ROUTE_POOL.replace('kind = "route"\n', 'kind = "route"\ncooldown = "-30s"\n'), DURATION),
    (ROUTE_POOL.replace('kind = "route"\n', 'kind = "route"\nhealth = { threshold = -1 }\n'),
     ">= 0"),
    # empty strings
    ("[server]\nhost = \"\"\n", NON_EMPTY),
    ("[server]\nbase_url = \"\"\n", "expected a URL like"),
    ("[store]\nurl = \"\"\n", "expected a SQLAlchemy URL"),
    ("[files]\nroots = [\"\"]\n", NON_EMPTY),
    ("[alerts]\nmorning = \"\"\n", "expected a time of day"),
    ('[connections.y]\ntype = "sql"\nurl = ""\n', "expected a SQLAlchemy URL"),
    ('[connections.z]\ntype = "http"\nbase_url = ""\n', "expected a URL like"),
    ('[connections.z]\ntype = "http"\nbase_url = "https://x"\nheaders = { "" = "a" }\n',
     "expected HTTP header names"),
    (LDAP + 'bind_dn = ""\n', NON_EMPTY),
    (LDAP + 'bind_dn = "cn=reader"\npassword = ""\n', NON_EMPTY),
    (MAIL.replace('host = "h"', 'host = ""'), NON_EMPTY),
    (MAIL.replace('sender = "a@b.org"', 'sender = ""'), "expected an e-mail address"),
    (MAIL + 'username = ""\n', NON_EMPTY),
    (MAIL + 'username = "me"\npassword = ""\n', NON_EMPTY),
    (RULE.replace('name = "r"', 'name = ""'), NON_EMPTY),
    (RULE.replace('jobs = ["*"]', 'jobs = [""]'), NON_EMPTY),
    (RULE.replace('notify = ["role:ops"]', 'notify = [""]'), "expected an e-mail address"),
    (ROUTE_POOL.replace('id = "a"', 'id = ""'), "expected 1 to 64 characters"),
    (ROUTE_POOL.replace('kind = "route"\n', 'kind = "route"\nhealth = { ip_key = "" }\n'),
     NON_EMPTY),
    ('[calendars.c]\ncountry = ""\n', "two-letter country code"),
    ('[calendars.c]\ndays_off = { "2027-01-02" = "" }\n', NON_EMPTY),
    ('[security]\nallowed_callables = [""]\n', "expected 'module:function'"),
])
@pytest.mark.reliability_case(4)
def test_negative_numbers_and_empty_strings_are_refused_at_their_line(
        make_home: MakeHome, snippet: str, fragment: str) -> None:
    """Every negative number, negative duration and empty string where cadenza.toml wants a
    count, a length of time, a name, an address or a URL is an error at the value's line,
    saying what was expected. An empty LDAP ``bind_dn`` (which would bind anonymously
    without saying so), an empty LDAP password (an unauthenticated bind) and an empty SMTP
    user name or password (a login silently skipped) included."""
    settings = "# settings under test\n" + snippet
    home = make_home(settings=settings)
    problems = [p for p in validate_home(home) if p.is_error]
    hits = [p for p in problems if fragment in p.message]
    assert hits, problems
    bad_line = next(k + 1 for k, line in enumerate(settings.splitlines())
                    if re.search(r'= "?-|= ""|\[""\]|"" =|= \{ [a-z_]+ = (-|"")', line))
    assert (hits[0].file, hits[0].line) == ("cadenza.toml", bad_line), problems
