"""`cadenza tokens create | list | revoke`, `cadenza users passwd | disable | unlock`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.services import Actor, Services
from cadenza.services.auth import AuthService


def test_tokens_and_user_security_commands(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli = CliRunner()
    assert cli.invoke(app, ["init", str(home), "--example"]).exit_code == 0

    def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
        result = cli.invoke(app, ["--home", str(home), *args], input=stdin)
        return result.exit_code, result.output

    code, out = run("tokens", "create", "ci", "--role", "operator")
    assert code == 0 and "shown once" in out
    token = next(w for w in out.split() if w.startswith("cdz_"))
    assert run("tokens", "create", "ci")[0] == 1  # a taken name
    code, out = run("tokens", "create", "x", "--role", "root")
    assert code == 2 and "expected one of viewer, operator, editor, admin" in out
    code, out = run("tokens", "list", "--json")
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["ci"] and rows[0]["roles"] == ["operator"]
    assert token not in out

    assert run("users", "add", "olga", "--role", "operator", "--password-stdin",
               stdin="first password\n")[0] == 0
    with Services.at(home, actor=Actor.cli(), clock=FakeClock("2027-03-10T09:00:00+00:00")) \
            as services:
        auth = AuthService(services.store(), services.clock)
        assert auth.bearer(token) is not None
        session = auth.login("olga", "first password", "127.0.0.1")
        assert auth.session(session.cookie) is not None
        code, out = run("users", "passwd", "olga", "--password-stdin", stdin="second password\n")
        assert code == 0 and "1 session(s) ended" in out
        assert auth.session(session.cookie) is None
        again = auth.login("olga", "second password", "127.0.0.1")
        code, out = run("users", "disable", "olga")
        assert code == 0 and "disabled" in out
        assert auth.session(again.cookie) is None
        code, out = run("users", "passwd", "nobody")
        assert code == 1 and "no user 'nobody'" in out
        assert run("tokens", "revoke", "ci")[0] == 0
        assert auth.bearer(token) is None
        assert run("tokens", "revoke", "ci")[0] == 1


def test_users_unlock_ends_the_throttling(tmp_path: Path) -> None:
    import pytest

    from cadenza.services.auth import FREE_FAILURES_PER_PAIR, Throttled, Unauthorized

    home = tmp_path / "home"
    cli = CliRunner()
    assert cli.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    assert cli.invoke(app, ["--home", str(home), "users", "add", "olga", "--role", "viewer",
                            "--password-stdin"], input="first password\n").exit_code == 0
    with Services.at(home, actor=Actor.cli(), clock=FakeClock("2027-03-10T09:00:00+00:00")) \
            as services:
        auth = AuthService(services.store(), services.clock)
        for _ in range(FREE_FAILURES_PER_PAIR):
            with pytest.raises(Unauthorized):
                auth.login("olga", "guess", "203.0.113.7")
        with pytest.raises(Throttled):
            auth.login("olga", "first password", "203.0.113.7")
        result = cli.invoke(app, ["--home", str(home), "users", "unlock", "olga"])
        assert result.exit_code == 0, result.output
        assert "unlocked; 3 failed login(s) forgotten" in result.output
        assert auth.login("olga", "first password", "203.0.113.7").username == "olga"
        events = [e for e in services.store().list_events(event_type="USER_CHANGED")
                  if e.payload.get("action") == "unlocked"]
        assert [(e.payload["username"], e.actor.split(":")[0]) for e in events] \
            == [("olga", "cli")]
        nobody = cli.invoke(app, ["--home", str(home), "users", "unlock", "nobody"])
        assert nobody.exit_code == 1 and "no user 'nobody'" in nobody.output
