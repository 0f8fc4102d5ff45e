"""The admin page (web/ui/admin.py): admins only; users (add with a generated password
shown once, role, disable/enable, reset password), tokens (create shown once, revoke),
the backup download; escaping of user data."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env

from cadenza.security import verify_password

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'
HX = {"HX-Request": "true"}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


@pytest.mark.parametrize("role", ["viewer", "operator", "editor"])
def test_only_admins(env: ApiEnv, role: str) -> None:
    client = env.session(role)
    assert client.get("/admin").status_code == 403
    assert client.get("/admin/backup").status_code == 403
    assert client.post("/admin/users", data={"username": "x", "role": "viewer"}).status_code \
        == 403
    assert 'href="/admin"' not in client.get("/account").text  # not in the top bar


def test_add_user_shows_the_generated_password_once(env: ApiEnv) -> None:
    admin = env.session("admin2")
    page = admin.get("/admin")
    assert page.status_code == 200 and 'id="user-viewer"' in page.text
    added = admin.post("/admin/users", data={"username": "ana", "role": "operator",
                                             "display_name": XSS}, headers=HX)
    assert added.status_code == 200, added.text
    shown = re.search(r'<code id="once-value">([^<]+)</code>', added.text)
    assert shown is not None
    user = env.store.get_user("ana")
    assert user is not None and tuple(user.roles) == ("operator",)
    assert verify_password(user.password_hash, shown.group(1))
    again = admin.get("/admin").text
    assert shown.group(1) not in again and 'id="user-ana"' in again
    # the display name is text, never markup
    assert "<script>alert(1)" not in again and "<img src=x" not in again
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in again
    dup = admin.post("/admin/users", data={"username": "ana", "role": "viewer"}, headers=HX)
    assert dup.status_code == 409 and dup.headers["HX-Retarget"] == "#flash"
    bad = admin.post("/admin/users", data={"username": XSS, "role": "viewer"}, headers=HX)
    assert bad.status_code == 422 and "<script>alert(1)" not in bad.text


def test_role_disable_enable_and_reset_password(env: ApiEnv) -> None:
    admin = env.session("admin2")
    viewer = env.session("viewer")
    changed = admin.post("/admin/users/viewer/role", data={"role": "editor"}, headers=HX)
    assert changed.status_code == 200 and "viewer is now editor" in changed.text
    assert tuple(env.store.get_user("viewer").roles) == ("editor",)
    assert viewer.get("/account").status_code == 401  # the change ended their sessions
    off = admin.post("/admin/users/operator/disable", headers=HX)
    assert off.status_code == 200 and env.store.get_user("operator").disabled
    login = env.client.post("/api/login", json={"username": "operator",
                                                "password": "correct horse battery"})
    assert login.status_code == 401
    on = admin.post("/admin/users/operator/enable", headers=HX)
    assert on.status_code == 200 and not env.store.get_user("operator").disabled
    reset = admin.post("/admin/users/editor/password", headers=HX)
    new = re.search(r'<code id="once-value">([^<]+)</code>', reset.text)
    assert new is not None
    assert verify_password(env.store.get_user("editor").password_hash, new.group(1))
    own = admin.post("/admin/users/admin2/disable", headers=HX)
    assert own.status_code == 422 and not env.store.get_user("admin2").disabled
    assert admin.post("/admin/users/nobody/enable", headers=HX).status_code == 404


def test_tokens_created_once_listed_and_revoked(env: ApiEnv) -> None:
    admin = env.session("admin2")
    made = admin.post("/admin/tokens", data={"name": "prom", "role": "viewer",
                                             "owner": "none"}, headers=HX)
    assert made.status_code == 200, made.text
    token = re.search(r'<code id="once-value">(cdz_[^<]+)</code>', made.text)
    assert token is not None
    assert env.token_client(token.group(1)).get("/api/me").status_code == 200
    page = admin.get("/admin").text
    assert 'id="token-prom"' in page and token.group(1) not in page
    revoked = admin.post("/admin/tokens/prom/revoke", data={"user": ""}, headers=HX)
    assert revoked.status_code == 200 and "token prom revoked" in revoked.text
    assert env.token_client(token.group(1)).get("/api/me").status_code == 401
    assert admin.post("/admin/tokens/prom/revoke", data={"user": ""},
                      headers=HX).status_code == 404
    bad = admin.post("/admin/tokens", data={"name": "a b", "role": "viewer"}, headers=HX)
    assert bad.status_code == 422


def test_backup_downloads_a_sqlite_file(env: ApiEnv, tmp_path: Path) -> None:
    answer = env.session("admin2").get("/admin/backup")
    assert answer.status_code == 200, answer.text
    assert "attachment" in answer.headers["content-disposition"]
    assert answer.content.startswith(b"SQLite format 3")
    copy = tmp_path / "copy.db"
    copy.write_bytes(answer.content)
    with sqlite3.connect(copy) as db:
        assert db.execute("select username from users where username = 'admin2'").fetchone()
