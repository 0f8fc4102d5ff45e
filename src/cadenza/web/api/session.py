"""Login, logout, the caller, their sessions and tokens; users (admin).

``POST /api/login`` is the one route besides ``/api/health`` that answers without
credentials; it still refuses a foreign Origin (login CSRF).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from cadenza.services.auth import AuthService, Forbidden, parse_role
from cadenza.services.errors import InvalidRequest
from cadenza.services.tokens import TokenService
from cadenza.web.api.errors import ERROR_RESPONSES
from cadenza.web.auth import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    AsAdmin,
    AsViewer,
    check_origin,
    client_address,
    context,
    services_for,
)
from cadenza.web.redacting import OwnSecretResponse

router = APIRouter(prefix="/api", tags=["auth"], responses=ERROR_RESPONSES)


class Login(BaseModel):
    username: str = Field(max_length=200)
    password: str = Field(max_length=4096)


class NewTokenBody(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    role: Literal["viewer", "operator", "editor", "admin"] = "viewer"


class PasswordBody(BaseModel):
    current_password: str = Field(max_length=4096)
    new_password: str = Field(max_length=4096)


class NewUserBody(BaseModel):
    username: str = Field(max_length=64)
    roles: list[str]
    email: str | None = None
    display_name: str | None = None
    password: str | None = Field(default=None, max_length=4096)


class UserChange(BaseModel):
    roles: list[str] | None = None
    disabled: bool | None = None
    password: str | None = Field(default=None, max_length=4096)


def _auth(request: Request) -> AuthService:
    web = context(request)
    return AuthService(web.store, web.clock)


@router.post("/login", response_class=OwnSecretResponse)
def login(body: Login, request: Request) -> OwnSecretResponse:
    """Open a session: sets the HttpOnly session cookie and returns the CSRF token to send
    as ``X-CSRF-Token`` with every state-changing request (also in the ``cadenza_csrf``
    cookie, readable by the page's script)."""
    check_origin(request)
    new = _auth(request).login(body.username, body.password, client_address(request),
                               request.cookies.get(SESSION_COOKIE))
    secure = request.url.scheme == "https"
    max_age = int((new.expires_at - context(request).clock.now()).total_seconds())
    response = OwnSecretResponse({"username": new.username, "role": new.role,
                                  "csrf_token": new.csrf_token,
                                  "expires_at": new.expires_at.isoformat()})
    response.set_cookie(SESSION_COOKIE, new.cookie, max_age=max_age, httponly=True,
                        samesite="lax", secure=secure, path="/")
    response.set_cookie(CSRF_COOKIE, new.csrf_token, max_age=max_age, httponly=False,
                        samesite="lax", secure=secure, path="/")
    return response


@router.post("/logout", status_code=204)
def logout(principal: AsViewer, request: Request, response: Response) -> None:
    """End this session now; its cookie is refused from then on."""
    _auth(request).logout(principal)
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")


@router.get("/me")
def me(principal: AsViewer) -> dict[str, Any]:
    """Who the credentials are: user, role, and how they came (session or token)."""
    return {"username": principal.username, "role": principal.role,
            "via": "session" if principal.session_id else "token",
            # not under a key named like "token" or "credential": redaction would mask it
            "using": principal.token}


@router.post("/me/password", status_code=204)
def change_password(body: PasswordBody, principal: AsViewer, request: Request) -> None:
    """Change your own password (the current one first); ends all your sessions."""
    from cadenza.security import verify_password

    web = context(request)
    user = web.store.get_user(principal.username) if principal.username else None
    if user is None or not verify_password(user.password_hash, body.current_password):
        raise InvalidRequest("the current password does not match")
    _auth(request).passwd(user.username, body.new_password, actor=f"user:{user.username}",
                          own=True)


@router.get("/sessions")
def sessions(principal: AsViewer, request: Request) -> list[dict[str, Any]]:
    """Your live sessions (never another user's)."""
    return [s.as_json() for s in _auth(request).sessions(principal)]


@router.delete("/sessions/{session_id}", status_code=204)
def revoke_session(session_id: str, principal: AsViewer, request: Request) -> None:
    """End one of your sessions."""
    _auth(request).revoke_session(principal, session_id)


@router.get("/tokens")
def tokens(principal: AsViewer, request: Request) -> list[dict[str, Any]]:
    """Your API tokens (never another user's, never a token's value)."""
    if principal.username is None:
        return []
    return [t.as_json() for t in TokenService(context(request).store).list(principal.username)]


@router.post("/tokens", status_code=201, response_class=OwnSecretResponse)
def create_token(body: NewTokenBody, principal: AsViewer,
                 request: Request) -> OwnSecretResponse:
    """A token of yours with a role up to your own; the token is in this answer only."""
    from cadenza.services.auth import ROLE_LADDER

    role = parse_role(body.role)
    if principal.username is None or principal.role is None:
        raise Forbidden("a token of no user cannot create tokens")
    if ROLE_LADDER.index(role) > ROLE_LADDER.index(principal.role):
        raise Forbidden(f"role {role!r} is above yours ({principal.role})")
    new = TokenService(context(request).store).create(
        body.name, role, username=principal.username, actor=f"user:{principal.username}")
    return OwnSecretResponse({"name": new.name, "role": new.role, "token": new.token},
                             status_code=201)


@router.delete("/tokens/{name}", status_code=204)
def revoke_token(name: str, principal: AsViewer, request: Request) -> None:
    """Revoke one of your tokens; it is refused from the next request on."""
    if principal.username is None:
        raise Forbidden("a token of no user cannot revoke tokens")
    TokenService(context(request).store).revoke(name, username=principal.username,
                                                actor=f"user:{principal.username}")


@router.get("/users")
def users(principal: AsAdmin, request: Request) -> list[dict[str, Any]]:
    """Every user (never a password hash)."""
    with services_for(request, principal) as services:
        return [u.as_json() for u in services.users.list()]


@router.post("/users", status_code=201, response_class=OwnSecretResponse)
def add_user(body: NewUserBody, principal: AsAdmin, request: Request) -> OwnSecretResponse:
    """Add a user; a generated password is in this answer only."""
    from cadenza.services.users import NewUser

    with services_for(request, principal) as services:
        added = services.users.add(NewUser(body.username, body.roles, body.email,
                                           body.display_name, body.password))
    return OwnSecretResponse({"username": added.name, "roles": list(added.roles),
                              "generated_password": added.generated_password},
                             status_code=201)


@router.put("/users/{username}")
def change_user(username: str, body: UserChange, principal: AsAdmin,
                request: Request) -> dict[str, Any]:
    """Change a user's roles, disabled flag or password; each ends the user's sessions."""
    auth, actor = _auth(request), f"user:{principal.name}"
    revoked = 0
    if body.roles is not None:
        revoked += auth.set_roles(username, body.roles, actor=actor)
    if body.disabled is not None:
        revoked += auth.disable(username, actor=actor, disabled=body.disabled)
    if body.password is not None:
        revoked += auth.passwd(username, body.password, actor=actor)
    return {"username": username, "logins_ended": revoked}


@router.post("/users/{username}/unlock")
def unlock_user(username: str, principal: AsAdmin, request: Request) -> dict[str, Any]:
    """Forget the user's failed logins from every address: their login throttling ends
    now (a USER_CHANGED "unlocked" event)."""
    forgotten = _auth(request).unlock(username, actor=f"user:{principal.name}")
    return {"username": username, "failures_forgotten": forgotten}
