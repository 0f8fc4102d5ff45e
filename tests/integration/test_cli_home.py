"""The CLI on a real home directory: init, validate, jobs, users, secrets, events."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from tests.support.store_helpers import append_log
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.home import Home

runner = CliRunner()


def cli(home: Path, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args], input=input)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    home = tmp_path / "demo"
    result = runner.invoke(app, ["init", str(home), "--example"])
    assert result.exit_code == 0, result.output
    assert "Password (shown once" in result.stdout
    return home


def test_init_example_then_validate_exits_zero(demo: Path) -> None:
    code, _, err = cli(demo, "validate")
    assert code == 0, err
    assert "valid" in err
    assert (demo / "data" / "cadenza.db").exists()
    assert list((demo / "data" / "files" / "sales").glob("*.csv"))


def test_init_refuses_an_existing_home(demo: Path) -> None:
    before = (demo / "jobs.toml").read_bytes()
    result = runner.invoke(app, ["init", str(demo), "--example"])
    assert result.exit_code == 1
    assert "refusing" in result.stderr
    assert (demo / "jobs.toml").read_bytes() == before


@pytest.mark.reliability_case(31)
def test_init_creates_an_admin_user_with_argon2id(demo: Path) -> None:
    code, out, _ = cli(demo, "users", "list", "--json")
    assert code == 0
    users = json.loads(out)
    assert [u["username"] for u in users] == ["admin"]
    assert users[0]["roles"] == ["admin"]
    assert "argon2" not in out and "hash" not in out


@pytest.mark.reliability_case(31)
def test_two_installs_share_no_secret(tmp_path: Path) -> None:
    """Nothing secret is built in: two homes made by ``cadenza init`` get different admin
    passwords (stored as argon2id hashes with their own salts), and the same secret set in
    each is sealed under each home's own random key, which cannot open the other's."""
    import re

    import sqlalchemy as sa

    from cadenza.audit.secrets import SecretStore
    from cadenza.domain.errors import SecretError

    made = {}
    for name in ("one", "two"):
        result = runner.invoke(app, ["init", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        found = re.search(r"Password \(shown once, store it now\): (\S+)", result.stdout)
        assert found is not None
        code, _, _ = cli(tmp_path / name, "secrets", "set", "db", "--value-stdin",
                         input="the same value 123\n")
        assert code == 0
        engine = sa.create_engine(f"sqlite:///{tmp_path / name / 'data' / 'cadenza.db'}")
        with engine.connect() as conn:
            stored = conn.execute(sa.text("select password_hash from users")).scalar_one()
        engine.dispose()
        data = tmp_path / name / "data"
        made[name] = (found.group(1), stored, (data / "secret.key").read_bytes(),
                      (data / "secrets.json").read_bytes())
    (pw1, hash1, key1, sealed1), (pw2, hash2, key2, sealed2) = made["one"], made["two"]
    assert pw1 != pw2 and len(pw1) >= 20
    assert hash1.startswith("$argon2id$") and hash2.startswith("$argon2id$")
    assert hash1.split("$")[4] != hash2.split("$")[4]  # the salts
    assert pw1 not in hash1 and pw1 not in (tmp_path / "one" / "cadenza.toml").read_text()
    assert key1 != key2 and sealed1 != sealed2
    swapped = tmp_path / "swapped"
    (swapped / "data").mkdir(parents=True)
    (swapped / "data" / "secret.key").write_bytes(key2)
    (swapped / "data" / "secret.key").chmod(0o600)
    (swapped / "data" / "secrets.json").write_bytes(sealed1)
    assert SecretStore(tmp_path / "one").get("db") == "the same value 123"
    with pytest.raises(SecretError, match="cannot be decrypted"):
        SecretStore(swapped).get("db")


def test_jobs_list_and_show(demo: Path) -> None:
    code, out, _ = cli(demo, "jobs", "list", "--json")
    assert code == 0
    jobs = {j["id"]: j for j in json.loads(out)}
    assert jobs["sales-load"]["schedule"] == "0 2 * * *"
    assert jobs["sales-load"]["steps"] == ["load-file", "refresh-aggregates", "tell-downstream"]
    assert jobs["sales-load"]["presets"] == ["month-end"]
    code, out, _ = cli(demo, "jobs", "list")
    assert code == 0 and "every day at 02:00, Europe/Paris" in " ".join(out.split())
    code, out, _ = cli(demo, "jobs", "show", "sales-load", "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["timezone"] == "Europe/Paris"
    assert shown["steps"][0]["type"] == "file_load"
    code, _, err = cli(demo, "jobs", "show", "nope")
    assert code == 1 and "no job 'nope'" in err


def test_validate_reports_located_errors_and_exit_one(demo: Path) -> None:
    jobs = demo / "jobs.toml"
    jobs.write_text(jobs.read_text() + '\n[jobs.broken]\nschedule = "0 9 * * 7"\nbogus = 1\n')
    code, _, err = cli(demo, "validate")
    assert code == 1
    assert "jobs.toml:" in err and "day-of-week" in err and "bogus" in err
    code, out, _ = cli(demo, "validate", "--json")
    assert code == 1
    problems = json.loads(out)
    assert all(p["file"] == "jobs.toml" and p["line"] > 0 for p in problems)


def test_users_add_with_password_stdin_and_duplicates(demo: Path) -> None:
    code, out, _ = cli(
        demo,
        "users",
        "add",
        "ana",
        "--role",
        "operator",
        "--role",
        "ops",
        "--email",
        "ana@example.org",
        "--password-stdin",
        input="correct horse\n",
    )
    assert code == 0, out
    assert "Password" not in out
    code, _, err = cli(demo, "users", "add", "ana", "--role", "viewer")
    assert code == 1 and "ana" in err
    code, _, err = cli(demo, "users", "add", "bad name", "--role", "viewer")
    assert code == 2
    code, out, _ = cli(demo, "users", "list", "--json")
    ana = next(u for u in json.loads(out) if u["username"] == "ana")
    assert ana["roles"] == ["operator", "ops"] and ana["email"] == "ana@example.org"


def test_secrets_set_list_never_echo(demo: Path) -> None:
    value = "s3cr3t-Value-Never-Shown"
    code, out, err = cli(demo, "secrets", "set", "api_pw", "--value-stdin", input=value + "\n")
    assert code == 0 and value not in out + err
    code, out, err = cli(demo, "secrets", "list", "--json")
    assert code == 0 and json.loads(out) == [{"name": "api_pw"}] and value not in out
    key = demo / "data" / "secret.key"
    if os.name == "posix":
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_secret_in_a_connection_never_reaches_db_logs_events_or_output(demo: Path) -> None:
    secret = "Zq9-very-secret-pw/+=x"
    assert cli(demo, "secrets", "set", "api_pw", "--value-stdin", input=secret + "\n")[0] == 0
    settings = demo / "cadenza.toml"
    settings.write_text(
        settings.read_text()
        + (
            '\n[connections.billing]\ntype = "http"\n'
            'base_url = "https://cadenza:${secret.api_pw}@billing.example.org"\n'
            'headers = { Authorization = "Bearer ${secret.api_pw}" }\n'
        )
    )
    assert cli(demo, "validate")[0] == 0
    home = Home(demo.resolve())
    config = home.load_config()
    billing = config.settings.connections["billing"]
    resolved_url = str(billing.base_url)
    assert secret in resolved_url  # the resolved value is what a step would use
    store = home.open_store(config)
    try:
        run_id = store.create_run("sales-load", "manual:test")
        assert run_id is not None
        import base64
        from urllib.parse import quote

        store.append_event(
            "HTTP_REQUEST",
            f"POST {resolved_url}/refresh",
            run_id=run_id,
            payload={
                "url": resolved_url,
                "note": quote(secret, safe=""),
                "b64": base64.b64encode(secret.encode()).decode(),
            },
        )
        append_log(store, run_id, "INFO", f"calling {resolved_url} with {secret}")
    finally:
        store.close()
    for db_file in (demo / "data").glob("cadenza.db*"):
        raw = db_file.read_bytes()
        assert secret.encode() not in raw, db_file
        assert quote(secret, safe="").encode() not in raw
    code, out, err = cli(demo, "events", "--json")
    assert code == 0
    assert secret not in out + err
    assert any("***" in e["message"] for e in json.loads(out))
    code, out, err = cli(demo, "jobs", "show", "sales-load")
    assert secret not in out + err
    assert secret.encode() not in (demo / "data" / "secrets.json").read_bytes()


def test_events_filters(demo: Path) -> None:
    code, out, _ = cli(demo, "events", "--type", "USER_CHANGED", "--json")
    assert code == 0
    events = json.loads(out)
    assert events and all(e["type"] == "USER_CHANGED" for e in events)
    code, out, _ = cli(demo, "events", "--since", "1h", "--json")
    assert code == 0 and json.loads(out)
    assert cli(demo, "events", "--type", "NOPE")[0] == 2
    assert cli(demo, "events", "--since", "yesterday-ish")[0] == 2


def test_python_dash_m_runs_the_cli(tmp_path: Path) -> None:
    import subprocess

    home = tmp_path / "h"
    done = subprocess.run(
        [sys.executable, "-m", "cadenza", "init", str(home), "--example"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "cadenza", "--home", str(home), "validate"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_commands_outside_a_home_say_so(tmp_path: Path) -> None:
    code, _, err = cli(tmp_path, "jobs", "list")
    assert code == 1 and "not a Cadenza home" in err
