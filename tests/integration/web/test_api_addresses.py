"""A malformed e-mail address is refused where it is entered: the admin API and page (422),
`cadenza users add --email` and `cadenza notify test --to` (exit 2), "Send test" over the
API (422). Nothing is stored and nothing is sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.web.api_env import api_env
from typer.testing import CliRunner

from cadenza.cli.main import app

BAD = ['"@x.y', "a@b", "ops@example.org\r\nBcc: all@example.org",
       "ops@example.org, boss@example.org", "Ops <ops@example.org>", "ops@example.org."]


def test_the_admin_api_and_page_refuse_a_malformed_email(tmp_path: Path) -> None:
    with api_env(tmp_path) as env:
        admin = env.session("admin2")
        users = {u.username for u in env.store.list_users()}
        for n, address in enumerate(BAD):
            answer = admin.post("/api/users", json={"username": f"u{n}", "roles": ["viewer"],
                                                    "email": address})
            assert answer.status_code == 422, (address, answer.text)
            assert "is not an e-mail address" in answer.json()["error"]
            page = admin.post("/admin/users", data={"username": f"p{n}", "role": "viewer",
                                                    "email": address})
            assert page.status_code == 422, (address, page.text[:200])
            assert "is not an e-mail address" in page.text
        assert {u.username for u in env.store.list_users()} == users
        fine = admin.post("/api/users", json={"username": "ana", "roles": ["viewer"],
                                              "email": "ana@example.org"})
        assert fine.status_code == 201


def test_send_test_refuses_a_malformed_recipient(tmp_path: Path) -> None:
    with api_env(tmp_path) as env:
        admin = env.session("admin2")
        before = len(env.store.list_events())
        for address in BAD:
            answer = admin.post("/api/channels/mail/test", json={"to": [address]})
            assert answer.status_code == 422, (address, answer.text)
            assert "is not an e-mail address" in answer.json()["error"]
        # refused before anything was tried or recorded
        assert admin.get("/api/notifications").json() == {"notifications": []}
        assert len(env.store.list_events()) == before


@pytest.mark.parametrize("address", ["a@b", "ops@example.org\nBcc: all@example.org",
                                     "ops@example.org,boss@example.org"])
def test_the_cli_refuses_a_malformed_email(tmp_path: Path, address: str) -> None:
    home = tmp_path / "home"
    cli = CliRunner()
    assert cli.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    added = cli.invoke(app, ["--home", str(home), "users", "add", "ana", "--role", "viewer",
                             "--email", address, "--password-stdin"], input="a password\n")
    assert added.exit_code == 2, added.output
    assert "is not an e-mail address" in added.output
    listed = cli.invoke(app, ["--home", str(home), "users", "list", "--json"])
    assert "ana" not in listed.output
    sent = cli.invoke(app, ["--home", str(home), "notify", "test", "mail", "--to", address])
    assert sent.exit_code == 2, sent.output
    assert "is not an e-mail address" in sent.output
