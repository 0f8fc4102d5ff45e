"""The login page, logout, and the account page (change your password)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cadenza.services.auth import AuthService, NewSession, Throttled, Unauthorized
from cadenza.services.errors import InvalidRequest
from cadenza.web.auth import (
    CSRF_COOKIE,
    CSRF_HEADER,
    SESSION_COOKIE,
    check_origin,
    client_address,
    context,
)
from cadenza.web.ui.auth import PageViewer
from cadenza.web.ui.render import (
    LANG_COOKIE,
    LANGUAGES,
    N_,
    is_htmx,
    known_language,
    render,
)

LANG_COOKIE_DAYS = 400
"""How long the switch's cookie lasts (browsers cap cookies at 400 days)."""

router = APIRouter(include_in_schema=False)


def safe_next(target: str | None) -> str:
    """Where to go after login: a path of this server only (never ``//host`` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") \
            or "\\" in target or target.startswith(("/login", "/logout")):
        return "/jobs"
    return target


def login_page(request: Request, *, next_path: str, error: str | None = None,
               status: int = 200, username: str = "") -> HTMLResponse:
    """The login form, posting back to ``/login`` with where to go next."""
    return render(request, "ui/login.html", {"next": safe_next(next_path), "error": error,
                                             "username": username}, status=status)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/jobs") -> HTMLResponse:
    """The login form."""
    return login_page(request, next_path=next)


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, username: Annotated[str, Form(max_length=200)],
          password: Annotated[str, Form(max_length=4096)],
          next: Annotated[str, Form(max_length=2000)] = "/jobs") -> Response:
    """Check the password, open a session (the cookie HttpOnly, the CSRF token in a
    cookie the page script reads) and go to ``next``; the form again with the reason if
    not (429 when throttled)."""
    check_origin(request)
    web = context(request)
    try:
        new = AuthService(web.store, web.clock).login(username, password,
                                                      client_address(request),
                                                      request.cookies.get(SESSION_COOKIE))
    except Throttled as exc:
        page = login_page(request, next_path=next, error=str(exc), status=429,
                          username=username)
        page.headers["Retry-After"] = str(exc.retry_after)
        return page
    except Unauthorized:
        return login_page(request, next_path=next, status=401, username=username,
                          error=N_("Wrong user name or password."))
    return _signed_in(request, new, next)


def _signed_in(request: Request, new: NewSession, next_path: str) -> Response:
    """Go to ``next_path`` with the new session's cookies (the session's HttpOnly, the CSRF
    token's readable by the page script)."""
    web = context(request)
    response = RedirectResponse(safe_next(next_path), status_code=303)
    secure = request.url.scheme == "https"
    max_age = int((new.expires_at - web.clock.now()).total_seconds())
    response.set_cookie(SESSION_COOKIE, new.cookie, max_age=max_age, httponly=True,
                        samesite="lax", secure=secure, path="/")
    response.set_cookie(CSRF_COOKIE, new.csrf_token, max_age=max_age, httponly=False,
                        samesite="lax", secure=secure, path="/")
    return response


@router.get("/desktop/enter")
def desktop_enter(request: Request, ticket: Annotated[str, Query(max_length=200)] = "",
                  next: Annotated[str, Query(max_length=2000)] = "/jobs") -> Response:
    """The desktop window's way in: a one-time ticket made by ``cadenza desktop`` for the
    computer's own user, accepted from the loopback only; the login form otherwise."""
    web = context(request)
    try:
        new = AuthService(web.store, web.clock).desktop_login(ticket,
                                                              client_address(request))
    except Unauthorized as exc:  # 403: the ticket is refused; a password still works
        return login_page(request, next_path=next, status=403, error=str(exc))
    return _signed_in(request, new, next)


@router.post("/language")
def set_language(request: Request, lang: Annotated[str, Form(max_length=20)]) -> Response:
    """The header's language switch: the choice goes into a cookie (it holds before login)
    and, for a signed-in user, onto the user (it holds on every browser, after logout and
    login, and for the e-mails they receive); then the page reloads in it."""
    import hmac

    check_origin(request)
    chosen = known_language(lang)
    if chosen is None:
        raise InvalidRequest(f"unknown language {lang!r}; one of {', '.join(LANGUAGES)}")
    web = context(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    me = AuthService(web.store, web.clock).session(cookie) if cookie else None
    if me is not None and me.username is not None:
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent, me.csrf_token or ""):
            return Response(f"missing or wrong {CSRF_HEADER} header", status_code=403)
        web.store.update_user(me.username, language=chosen, actor=f"user:{me.username}")
    response: Response
    if is_htmx(request):
        response = Response(status_code=204, headers={"HX-Refresh": "true"})
    else:
        response = RedirectResponse("/jobs" if me is not None else "/login", 303)
    remember_language(request, response, chosen)
    return response


def remember_language(request: Request, response: Response, lang: str | None) -> None:
    """The switch's cookie on ``response``: ``lang`` for a year, or gone when None."""
    if lang is None:
        response.delete_cookie(LANG_COOKIE, path="/")
        return
    response.set_cookie(LANG_COOKIE, lang, max_age=LANG_COOKIE_DAYS * 86400, httponly=True,
                        samesite="lax", secure=request.url.scheme == "https", path="/")


@router.post("/logout")
def logout(me: PageViewer, request: Request) -> Response:
    """End this session; back to the login page."""
    web = context(request)
    AuthService(web.store, web.clock).logout(me)
    response: Response
    if is_htmx(request):
        response = Response(status_code=200, headers={"HX-Redirect": "/login"})
    else:
        response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")
    return response


@router.get("/account", response_class=HTMLResponse)
def account(me: PageViewer, request: Request) -> HTMLResponse:
    """Your account: role, your live sessions, change your password."""
    from cadenza.config.types import iana_zone_names

    web = context(request)
    sessions = AuthService(web.store, web.clock).sessions(me)
    user = web.store.get_user(me.username) if me.username else None
    return render(request, "ui/account.html", {"sessions": sessions, "user": user,
                                               "zones": sorted(iana_zone_names())}, me=me)


@router.post("/account/preferences")
def set_preferences(me: PageViewer, request: Request,
                    language: Annotated[str, Form(max_length=20)] = "",
                    timezone: Annotated[str, Form(max_length=64)] = "") -> Response:
    """Your language and the time zone of your e-mails; the page reloads in the language."""
    from cadenza.web.auth import services_for

    if me.username is None:
        raise InvalidRequest("only a user's session has preferences")
    with services_for(request, me) as services:
        services.users.set_preferences(me.username, language=language,
                                       timezone=timezone.strip())
    response = Response(status_code=204, headers={"HX-Refresh": "true"})
    remember_language(request, response, language or None)
    return response


@router.post("/account/password", response_class=HTMLResponse)
def change_password(me: PageViewer, request: Request,
                    current_password: Annotated[str, Form(max_length=4096)],
                    new_password: Annotated[str, Form(max_length=4096)],
                    repeat_password: Annotated[str, Form(max_length=4096)]) -> Response:
    """Change your own password; every session of yours ends, this one too."""
    from cadenza.security import verify_password

    web = context(request)
    user = web.store.get_user(me.username) if me.username else None
    if user is None or not verify_password(user.password_hash, current_password):
        raise InvalidRequest("the current password does not match")
    if new_password != repeat_password:
        raise InvalidRequest("the two new passwords differ")
    AuthService(web.store, web.clock).passwd(user.username, new_password,
                                             actor=f"user:{user.username}", own=True)
    return Response(status_code=200, headers={"HX-Redirect": "/login"})
