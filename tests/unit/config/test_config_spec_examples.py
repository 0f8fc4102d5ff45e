"""SPEC §3 and §4, copied verbatim, load without any problem; the loaded values are right."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from config_helpers import DATA, SECRETS, MakeHome, resolve_secret

from cadenza.config import load_home, validate_home
from cadenza.config.schema_settings import EmailChannel, HttpConnection, SqlConnection
from cadenza.domain.errors import ConfigError
from cadenza.steps.builtin.file_load import FileLoadConfig
from cadenza.steps.builtin.http import HttpConfig


def test_spec_examples_have_no_problem_at_all(spec_home: Path) -> None:
    assert validate_home(spec_home, resolve_secret=resolve_secret) == []


def test_spec_examples_load_with_their_values(spec_home: Path) -> None:
    loaded = load_home(spec_home, resolve_secret=resolve_secret)
    assert loaded.warnings == []
    assert loaded.home == spec_home.resolve()
    job = loaded.jobs["sales-load"]
    assert (job.schedule, job.timezone, job.timeout) == ("0 2 * * *", "Europe/Paris",
                                                          timedelta(hours=2))
    assert [s.name for s in job.steps] == ["load-file", "refresh-aggregates", "tell-downstream"]
    load, _, tell = job.steps
    assert isinstance(load, FileLoadConfig) and load.mode == "overwrite"
    assert isinstance(tell, HttpConfig) and tell.json_ == {
        "period": "${params.period}", "rows": "${steps.load-file.rows}"}
    assert job.presets["month-end"].params == {"period": "${month.previous}"}
    assert job.retry_for(load).attempts == 3
    assert job.alerts.long_run == timedelta(minutes=90)


def test_secrets_are_resolved_and_returned_for_redaction(spec_home: Path) -> None:
    loaded = load_home(spec_home, resolve_secret=resolve_secret)
    api = loaded.settings.connections["billing-api"]
    assert isinstance(api, HttpConnection)
    assert api.headers == {"Authorization": f"Bearer {SECRETS['billing_token']}"}
    mail = loaded.settings.channels["mail"]
    assert isinstance(mail, EmailChannel) and mail.password == SECRETS["smtp"]
    member = loaded.settings.pools["egress"].members[0]
    assert member.proxy == f"http://user:{SECRETS['proxy_fr_1']}@10.1.2.3:3128"
    assert loaded.secret_values == set(SECRETS.values())


def test_missing_secrets_are_located_errors(spec_home: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_home(spec_home)
    text = (spec_home / "cadenza.toml").read_text(encoding="utf-8")
    missing = {str(p) for p in caught.value.problems}
    line = next(k + 1 for k, s in enumerate(text.splitlines()) if "${secret.smtp}" in s)
    assert f"cadenza.toml:{line}:12: error: channels.mail.password: secret 'smtp' is not " \
           "set: set it with `cadenza secrets set smtp`" in missing
    assert len(missing) == 4


def test_secret_values_never_appear_in_problems(make_home: MakeHome) -> None:
    settings = '[store]\nurl = "${secret.db}"\n[connections.w]\ntype = "sql"\nurl = "${env.W}"\n'
    home = make_home(settings=settings)
    secret = "ftp://not-a-database-zzz"
    problems = validate_home(home, resolve_secret=lambda n: secret, environ={"W": "sqlite:///w.db"})
    assert [(p.path, p.line) for p in problems] == [("store.url", 2)]
    assert secret not in str(problems) and "not shown" in problems[0].message


def test_env_tokens_use_the_given_environment(make_home: MakeHome) -> None:
    settings = '[connections.w]\ntype = "sql"\nurl = "sqlite:///${env.DB_NAME}.db"\n'
    home = make_home(settings=settings)
    loaded = load_home(home, environ={"DB_NAME": "warehouse"})
    connection = loaded.settings.connections["w"]
    assert isinstance(connection, SqlConnection)
    assert connection.url == "sqlite:///warehouse.db"
    assert loaded.secret_values == set()
    problems = validate_home(home, environ={})
    assert [p.message for p in problems] == [
        "environment variable 'DB_NAME' is not set (referenced as ${env.DB_NAME})"]


def test_data_files_are_the_spec_text() -> None:
    spec = Path("/work/shared/SPEC.md")
    if not spec.exists():
        pytest.skip("SPEC.md is not available on this machine")
    text = spec.read_text(encoding="utf-8")
    for name in ("spec_cadenza.toml", "spec_jobs.toml"):
        assert (DATA / name).read_text(encoding="utf-8") in text
