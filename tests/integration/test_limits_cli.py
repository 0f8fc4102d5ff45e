"""The CLI on a real home: `cadenza init` makes the data private, `cadenza secrets set`
refuses a value over 64 KiB, and a configuration using a larger stored secret says why."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.audit import secrets as secrets_module
from cadenza.audit.secrets import SecretStore
from cadenza.cli.main import app

runner = CliRunner()
MAX_SECRET_BYTES = 64 * 1024
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


def cli(home: Path, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args], input=input)
    return result.exit_code, result.stdout, result.stderr


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@posix_only
@pytest.mark.parametrize("example", [False, True])
def test_init_makes_data_0700_and_the_store_0600(tmp_path: Path, example: bool) -> None:
    old = os.umask(0o022)  # the usual umask: files 0644, directories 0755 otherwise
    try:
        home = tmp_path / "home"
        result = runner.invoke(app, ["init", str(home), *(["--example"] if example else [])])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert _mode(home / "data") == 0o700
    assert _mode(home / "data" / "cadenza.db") == 0o600
    for sidecar in ("cadenza.db-wal", "cadenza.db-shm"):  # SQLite copies the db's mode
        if (home / "data" / sidecar).exists():
            assert _mode(home / "data" / sidecar) == 0o600
    code, _, err = cli(home, "users", "list")  # the store still opens and holds the admin
    assert code == 0, err


def test_secrets_set_refuses_a_value_over_64_kib(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert runner.invoke(app, ["init", str(home)]).exit_code == 0
    code, out, err = cli(home, "secrets", "set", "blob", "--value-stdin",
                         input="v" * (MAX_SECRET_BYTES + 1) + "\n")
    assert code == 2
    assert "secret blob is 65,537 bytes; a secret holds at most 65,536 bytes (64 KiB)" in err
    assert "Traceback" not in out + err and "vvvv" not in out + err
    code, out, _ = cli(home, "secrets", "list", "--json")
    assert out.strip() == "[]"
    code, _, err = cli(home, "secrets", "set", "blob", "--value-stdin",
                       input="v" * MAX_SECRET_BYTES + "\n")
    assert code == 0, err


def test_a_config_using_a_stored_secret_over_the_limit_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    assert runner.invoke(app, ["init", str(home)]).exit_code == 0
    with monkeypatch.context() as m:  # written by a Cadenza without the limit
        m.setattr(secrets_module, "MAX_SECRET_BYTES", 10 << 20, raising=False)
        SecretStore(home).set("huge", "h" * (1 << 20))
    with (home / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write('\n[connections.api]\ntype = "http"\nbase_url = "https://example.org"\n'
                 'headers = { Authorization = "Bearer ${secret.huge}" }\n')
    code, out, err = cli(home, "validate")
    assert code != 0
    assert "secret huge cannot be read: secret huge is 1,048,576 bytes" in out + err
    assert "cadenza secrets set huge" in out + err
