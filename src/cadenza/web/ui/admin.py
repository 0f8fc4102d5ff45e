"""The admin page (docs/ui.md "Pages: operations"), for admins only: users and roles (add with
a generated password shown once, change the role, disable or enable, reset the password,
unlock the logins),
API tokens (list, create — the token shown once —, revoke) and a backup download.

The same services as ``/api/users``, ``/api/tokens`` and ``/api/backup``. A page goes
through the home's redactor before it leaves (``render.redact_html``), which would mask a
new token or password: the one answer that carries one renders it after the redaction
(:func:`render_once`), as the API's ``OwnSecretResponse`` does, and carries nothing else
secret.
"""

from __future__ import annotations

import html
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Request
from fastapi.responses import FileResponse, HTMLResponse
from starlette.background import BackgroundTask

from cadenza.services.auth import AuthService, Principal
from cadenza.services.errors import InvalidRequest
from cadenza.services.tokens import TokenService
from cadenza.services.users import BUILTIN_ROLES, NewUser
from cadenza.web.auth import context, services_for
from cadenza.web.ui.auth import PageAdmin
from cadenza.web.ui.render import render

router = APIRouter(include_in_schema=False)
Role = Literal["viewer", "operator", "editor", "admin"]


def _actor(me: Principal) -> str:
    return f"user:{me.name}"


def _users(request: Request, me: Principal) -> list[Any]:
    with services_for(request, me) as services:
        return list(services.users.list())


def _tokens(request: Request) -> list[Any]:
    return TokenService(context(request).store).list(every=True)


def render_once(request: Request, template: str, values: dict[str, Any], me: Principal,
                secret: str | None) -> HTMLResponse:
    """``template`` rendered and redacted, then ``secret`` (escaped) put in the place of
    its marker: a new token or password shown once to the admin who made it."""
    marker = f"once-{secrets.token_hex(16)}"
    answer = render(request, template, {**values, "once_marker": marker}, me=me)
    if secret is not None:
        body = bytes(answer.body).decode("utf-8").replace(marker, html.escape(secret))
        answer = HTMLResponse(body, status_code=answer.status_code)
    return answer


@router.get("/admin", response_class=HTMLResponse)
def admin_page(me: PageAdmin, request: Request) -> HTMLResponse:
    """Users, tokens and the backup download."""
    return render(request, "ui/admin_page.html",
                  {"users": _users(request, me), "tokens": _tokens(request),
                   "roles": BUILTIN_ROLES}, me=me, nav="admin")


def _users_part(request: Request, me: Principal, *, once: str | None = None,
                once_label: str | None = None, notice: str | None = None) -> HTMLResponse:
    return render_once(request, "ui/_admin_users.html",
                       {"users": _users(request, me), "roles": BUILTIN_ROLES,
                        "once_label": once_label, "has_once": once is not None,
                        "notice": notice}, me, once)


def _tokens_part(request: Request, me: Principal, *, once: str | None = None,
                 once_label: str | None = None, notice: str | None = None) -> HTMLResponse:
    return render_once(request, "ui/_admin_tokens.html",
                       {"tokens": _tokens(request), "roles": BUILTIN_ROLES,
                        "once_label": once_label, "has_once": once is not None,
                        "notice": notice}, me, once)


@router.post("/admin/users", response_class=HTMLResponse)
def add_user(me: PageAdmin, request: Request,
             username: Annotated[str, Form(max_length=64)],
             role: Annotated[Role, Form()],
             display_name: Annotated[str, Form(max_length=200)] = "",
             email: Annotated[str, Form(max_length=320)] = "") -> HTMLResponse:
    """Add a user with a generated password, shown once in the answer."""
    with services_for(request, me) as services:
        added = services.users.add(NewUser(username.strip(), [role], email.strip() or None,
                                           display_name.strip() or None))
    return _users_part(request, me, once=added.generated_password,
                       once_label=f"password of {added.name}")


@router.post("/admin/users/{username}/role", response_class=HTMLResponse)
def set_role(username: str, me: PageAdmin, request: Request,
             role: Annotated[Role, Form()]) -> HTMLResponse:
    """Replace a user's roles with ``role``; the user's sessions end."""
    _not_yourself(me, username, "change your own role")
    web = context(request)
    AuthService(web.store, web.clock).set_roles(username, [role], actor=_actor(me))
    return _users_part(request, me, notice=f"{username} is now {role}")


@router.post("/admin/users/{username}/disable", response_class=HTMLResponse)
def disable_user(username: str, me: PageAdmin, request: Request) -> HTMLResponse:
    """Disable a user: their sessions end, their logins are refused."""
    _not_yourself(me, username, "disable yourself")
    web = context(request)
    AuthService(web.store, web.clock).disable(username, actor=_actor(me))
    return _users_part(request, me, notice=f"{username} is disabled")


@router.post("/admin/users/{username}/enable", response_class=HTMLResponse)
def enable_user(username: str, me: PageAdmin, request: Request) -> HTMLResponse:
    """Enable a disabled user again."""
    web = context(request)
    AuthService(web.store, web.clock).disable(username, actor=_actor(me), disabled=False)
    return _users_part(request, me, notice=f"{username} is enabled")


@router.post("/admin/users/{username}/unlock", response_class=HTMLResponse)
def unlock_user(username: str, me: PageAdmin, request: Request) -> HTMLResponse:
    """Forget the user's failed logins: their login throttling ends now."""
    web = context(request)
    forgotten = AuthService(web.store, web.clock).unlock(username, actor=_actor(me))
    return _users_part(request, me, notice=f"{username} is unlocked ({forgotten} failed "
                                           "login(s) forgotten)")


@router.post("/admin/users/{username}/password", response_class=HTMLResponse)
def reset_password(username: str, me: PageAdmin, request: Request) -> HTMLResponse:
    """A new generated password for ``username`` (shown once); their sessions end."""
    from cadenza.security import generate_password

    _not_yourself(me, username, "reset your own password here (use your account page)")
    web = context(request)
    password = generate_password()
    AuthService(web.store, web.clock).passwd(username, password, actor=_actor(me))
    return _users_part(request, me, once=password, once_label=f"new password of {username}")


@router.post("/admin/tokens", response_class=HTMLResponse)
def create_token(me: PageAdmin, request: Request,
                 name: Annotated[str, Form(max_length=64)],
                 role: Annotated[Role, Form()],
                 owner: Annotated[Literal["me", "none"], Form()] = "me") -> HTMLResponse:
    """A new API token (yours, or of no user), shown once in the answer."""
    username = me.username if owner == "me" else None
    new = TokenService(context(request).store).create(name.strip(), role, username=username,
                                                      actor=_actor(me))
    return _tokens_part(request, me, once=new.token, once_label=f"token {new.name}")


@router.post("/admin/tokens/{name}/revoke", response_class=HTMLResponse)
def revoke_token(name: str, me: PageAdmin, request: Request,
                 user: Annotated[str, Form(max_length=64)] = "") -> HTMLResponse:
    """Revoke the live token ``name`` of ``user`` (empty: of no user)."""
    TokenService(context(request).store).revoke(name, username=user or None, actor=_actor(me))
    return _tokens_part(request, me, notice=f"token {name} revoked")


@router.get("/admin/backup")
def backup_download(me: PageAdmin, request: Request) -> FileResponse:
    """A consistent copy of the store (SQLite) as a file download; the copy holds no
    secret value and is deleted from the server once sent."""
    folder = Path(tempfile.mkdtemp(prefix="cadenza-backup-"))
    try:
        with services_for(request, me) as services:
            stamp = services.clock.now().strftime("%Y%m%dT%H%M%SZ")
            target = folder / f"cadenza-{stamp}.db"
            services.backup.backup(target)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return FileResponse(target, media_type="application/vnd.sqlite3", filename=target.name,
                        background=BackgroundTask(shutil.rmtree, folder, True),
                        headers={"Cache-Control": "no-store"})


def _not_yourself(me: Principal, username: str, what: str) -> None:
    if me.username == username:
        raise InvalidRequest(f"you cannot {what}: ask another admin")
