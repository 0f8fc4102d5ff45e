"""`cadenza secrets set` refuses a value under 8 characters unless --allow-short (which
warns); a short secret stored before keeps working, and `cadenza validate` warns about it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.home import Home
from cadenza.services import InvalidRequest
from cadenza.services.secrets import SecretService

runner = CliRunner()


def cli(home: Path, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args], input=input)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    assert runner.invoke(app, ["init", str(path)]).exit_code == 0
    return path


def test_a_value_under_8_characters_is_refused_with_the_reason(home: Path) -> None:
    code, out, err = cli(home, "secrets", "set", "pin", "--value-stdin", input="1234567\n")
    assert code == 2
    assert ("secret pin is 7 characters; a secret should have at least 8" in err
            and "--allow-short" in err)
    assert "1234567" not in out + err and "Traceback" not in out + err
    assert json.loads(cli(home, "secrets", "list", "--json")[1]) == []
    code, _, err = cli(home, "secrets", "set", "pin", "--value-stdin", input="12345678\n")
    assert code == 0, err
    assert Home(home).secrets.get("pin") == "12345678"


def test_allow_short_stores_it_and_warns(home: Path) -> None:
    code, out, err = cli(home, "secrets", "set", "pin", "--allow-short", "--value-stdin",
                         input="no\n")
    assert code == 0, err
    assert "warning: secret pin is 2 characters" in err and "Stored secret pin" in out
    assert Home(home).secrets.get("pin") == "no"


def test_the_service_applies_the_same_rule(home: Path) -> None:
    secrets = SecretService(Home(home))
    with pytest.raises(InvalidRequest, match="secret pw is 4 characters"):
        secrets.set("pw", "file")
    assert secrets.names() == []
    assert secrets.set("pw", "file", allow_short=True) is not None
    assert secrets.set("pw2", "a-long-enough-value") is None
    assert secrets.names() == ["pw", "pw2"]


def test_a_short_secret_stored_before_keeps_working_and_validate_warns(home: Path) -> None:
    Home(home).secrets.set("old_pw", "file")  # as an older Cadenza stored it
    code, out, err = cli(home, "validate")
    assert code == 0, out + err
    assert "data/secrets.json:1:1: warning: secret.old_pw: secret old_pw is 4 characters" \
        in err
    assert "cadenza secrets set old_pw" in err and "(1 warning(s))" in err
    redactor = Home(home).redactor
    assert redactor.redact_text("No such file: profile.txt") == "No such ***: profile.txt"
