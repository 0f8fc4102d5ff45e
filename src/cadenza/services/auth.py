"""Logins, sessions, roles and the users' security operations (docs/security.md).

Operations (on :class:`AuthService`, built on a store and a clock, no configuration)::

    login(username, password, address) -> NewSession    Throttled, Unauthorized
    unlock(username, actor)                               forgets the user's failed logins
    session(cookie) -> Principal | None                  a live session, its user enabled
    bearer(token) -> Principal | None                    a live API token
    logout(principal)                                     revokes the session at once
    sessions(principal) -> list[SessionView]              the caller's own, never another's
    passwd(username, password, actor, own)                revokes the user's sessions (and,
                                                          unless ``own``, their API tokens)
    disable(username, actor)                              revokes sessions and API tokens
    set_roles(username, roles, actor)                     revokes the user's sessions

Roles form a ladder, ``viewer < operator < editor < admin``; other role names are groups for
notifications and grant nothing. A token of a user acts with the lower of its role and the
user's current one; disabling the user or resetting their password revokes it for good.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cadenza.services.errors import InvalidRequest, NotFound, ServiceError

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.store.protocols import AccountStore
    from cadenza.store.sessions import LoginFailures

ROLE_LADDER = ("viewer", "operator", "editor", "admin")
SESSION_LIFETIME = timedelta(hours=12)
THROTTLE_WINDOW = timedelta(minutes=15)
"""Failed logins older than this are not counted."""
FREE_FAILURES_PER_PAIR = 3
"""Failures of one user name from one address before its logins from there are slowed."""
FREE_FAILURES_PER_ADDRESS = 20
"""Failures from one address (any user names) before its logins are slowed."""
FREE_FAILURES_PER_USER = 10
"""Failures of one user name from every address together before the logins of that name
are slowed, from the addresses that failed a login (an address without a failure in the
window is never slowed by others')."""
FIRST_DELAY = timedelta(seconds=5)
"""The wait after the first failure past the free ones; each further failure doubles it,
up to :data:`THROTTLE_WINDOW`."""
_BAD_LOGIN = "wrong user name or password"


class Unauthorized(ServiceError):
    """No valid session, token or password (HTTP 401)."""


class Throttled(ServiceError):
    """Too many recent failed logins for this user name from this address, from this
    address, or for this user name (HTTP 429); ``retry_after`` is the whole number of
    seconds until the next attempt is admitted."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def throttle_delay(failures: int, free: int) -> timedelta:
    """The wait after the latest of ``failures`` recent failures when ``free`` of them are
    allowed without one: none up to ``free``, then :data:`FIRST_DELAY`, doubling with each
    further failure, at most :data:`THROTTLE_WINDOW`."""
    if failures < free:
        return timedelta(0)
    doubled = FIRST_DELAY * (1 << min(failures - free, 16))
    return min(doubled, THROTTLE_WINDOW)


def retry_after(failures: LoginFailures, now: datetime) -> int:
    """Seconds before a login for these ``failures`` may be tried (0: now). The user name's
    count from every address slows only an address that has failed a login itself."""
    scopes = [(failures.pair, FREE_FAILURES_PER_PAIR),
              (failures.address, FREE_FAILURES_PER_ADDRESS)]
    if failures.address.count > 0:
        scopes.append((failures.user, FREE_FAILURES_PER_USER))
    wait = timedelta(0)
    for scope, free in scopes:
        if scope.last is not None:
            wait = max(wait, scope.last + throttle_delay(scope.count, free) - now)
    return math.ceil(wait.total_seconds()) if wait > timedelta(0) else 0


class Forbidden(ServiceError):
    """Authenticated, but the role does not allow it (HTTP 403)."""


def rank(roles: Sequence[str]) -> int:
    """The highest built-in role among ``roles`` as its index in :data:`ROLE_LADDER`
    (-1: none)."""
    return max((ROLE_LADDER.index(r) for r in roles if r in ROLE_LADDER), default=-1)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user through a session (``session_id`` and ``csrf_token`` set), or
    an API token (``token`` set; ``username`` None for a token of no user)."""

    username: str | None
    role: str | None
    session_id: str | None = None
    csrf_token: str | None = None
    token: str | None = None
    language: str | None = None
    """The user's chosen page language, read with the session (None: not chosen)."""

    @property
    def name(self) -> str:
        """The name actions are recorded under (``api:NAME`` for a token of no user: a name
        with the word "token" before a colon reads as a secret to the redactor, which
        masked it in every trigger, audit line and page)."""
        return self.username if self.username is not None else f"api:{self.token}"

    @property
    def key(self) -> str:
        """What owns idempotency keys: the user, or the token of no user."""
        return f"user:{self.username}" if self.username is not None else f"token:{self.token}"

    def allows(self, role: str) -> bool:
        """True when this principal's role is ``role`` or above."""
        return self.role is not None and ROLE_LADDER.index(self.role) >= ROLE_LADDER.index(role)


@dataclass(frozen=True)
class NewSession:
    """A session just opened: ``cookie`` (shown once, stored hashed) and its CSRF token."""

    cookie: str
    csrf_token: str
    username: str
    role: str | None
    expires_at: datetime


@dataclass(frozen=True)
class SessionView:
    """One of the caller's live sessions (no secret: its id is a prefix of the hash)."""

    id: str
    created_at: datetime | None
    expires_at: datetime | None
    current: bool

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "created_at": self.created_at, "expires_at": self.expires_at,
                "current": self.current}


class AuthService:
    """Authentication over one store (see the module docstring)."""

    def __init__(self, store: AccountStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def login(self, username: str, password: str, address: str,
              previous_cookie: str | None = None) -> NewSession:
        """Check the password and open a session (a new random cookie each time: a login
        never reuses a session). ``previous_cookie``, the session cookie the browser sent
        with the login, if any, is ended once the new session exists: a session id known
        before the login (planted, or left by an earlier user) is never worth anything
        after it. Throttled, before the password is even checked, while
        the progressive wait of a scope's recent failures runs (:func:`retry_after`):
        failures from one address never slow a login from another address that has not
        failed."""
        from cadenza.security import hash_token, verify_password

        now = self.clock.now()
        # No user name holds a NUL byte (they are checked when made), and PostgreSQL takes
        # none in a text: such a name is nobody, its failures counted under a visible form.
        named = username.replace("\x00", "\\x00")
        wait = retry_after(self.store.login_failures_of(named, address,
                                                        now - THROTTLE_WINDOW), now)
        if wait > 0:
            # Not counted: hammering a throttled login must not lengthen the wait (nor,
            # through the user name's count, another address's).
            self.store.record_login_failure(named, address, reason="throttled",
                                            counted=False)
            raise Throttled(f"too many failed logins; try again in {wait} seconds", wait)
        user = self.store.get_user(username) \
            if len(username) <= 64 and named == username else None
        # Verify against a dummy hash when there is no such user, so that the answer's
        # timing does not tell which user names exist.
        ok = verify_password(user.password_hash if user else _dummy_hash(), password)
        if user is None or not ok or user.disabled:
            reason = "disabled" if user is not None and ok else "bad credentials"
            self.store.record_login_failure(named, address, reason=reason)
            raise Unauthorized(_BAD_LOGIN)
        # Failures out of every window are of no use any more: forget them here, where a
        # login succeeded, rather than in a loop of their own.
        self.store.forget_login_failures(now - THROTTLE_WINDOW)
        cookie = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        expires = now + SESSION_LIFETIME
        self.store.create_session(hash_token(cookie), username, csrf, expires,
                                  address=address, actor=f"user:{username}")
        if previous_cookie:
            self.store.revoke_session(hash_token(previous_cookie))
        role = _role(user.roles)
        return NewSession(cookie, csrf, username, role, expires)

    def desktop_login(self, ticket: str, address: str) -> NewSession:
        """Open a session for the desktop window with a one-time ticket that ``cadenza
        desktop`` stored (:class:`cadenza.store.desktop.DesktopTickets`): from the loopback
        only, spent once, within its minute, for an enabled user."""
        import ipaddress

        from cadenza.security import hash_token
        from cadenza.store.desktop import DesktopTickets

        try:
            local = ipaddress.ip_address(address).is_loopback
        except ValueError:
            local = False
        if not local:
            raise Unauthorized("a desktop ticket is accepted from this computer only")
        spent = DesktopTickets(self.store).spend(ticket) if len(ticket) <= 200 else None
        if spent is None:
            raise Unauthorized("this desktop ticket is unknown, used or expired; "
                               "run `cadenza desktop` again")
        username, os_user = spent
        user = self.store.get_user(username)
        if user is None or user.disabled:
            raise Unauthorized(f"user {username} does not exist or is disabled")
        cookie = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        expires = self.clock.now() + SESSION_LIFETIME
        self.store.create_session(hash_token(cookie), username, csrf, expires,
                                  address=address, actor=f"desktop:{os_user}")
        return NewSession(cookie, csrf, username, _role(user.roles), expires)

    def session(self, cookie: str) -> Principal | None:
        """The principal of a live session cookie whose user is still enabled."""
        from cadenza.security import hash_token

        found = self.store.session_credential(hash_token(cookie))
        if found is None or found.user_roles is None or found.user_disabled:
            return None
        return Principal(found.username, _role(found.user_roles), session_id=found.name,
                         csrf_token=found.csrf_token, language=found.language)

    def bearer(self, token: str) -> Principal | None:
        """The principal of a live API token (its user enabled)."""
        from cadenza.security import hash_token

        found = self.store.token_credential(hash_token(token))
        if found is None:
            return None
        role = _role(found.roles)
        if found.username is not None:
            if found.user_roles is None or found.user_disabled:
                return None
            role = _lower(role, _role(found.user_roles))
        return Principal(found.username, role, token=found.name)

    def logout(self, principal: Principal) -> None:
        """End the caller's session now (a token is revoked with ``tokens revoke``)."""
        if principal.session_id is None:
            raise InvalidRequest("only a web session can log out; revoke a token instead")
        self.store.revoke_session(principal.session_id)

    def sessions(self, principal: Principal) -> list[SessionView]:
        """The caller's own live sessions."""
        if principal.username is None:
            return []
        return [SessionView(s.id[:12], s.created_at, s.expires_at,
                            s.id == principal.session_id)
                for s in self.store.list_sessions(principal.username)]

    def revoke_session(self, principal: Principal, short_id: str) -> None:
        """Revoke one of the caller's own sessions by the id :meth:`sessions` shows."""
        if principal.username is not None:
            for s in self.store.list_sessions(principal.username):
                if s.id[:12] == short_id:
                    self.store.revoke_session(s.id, username=principal.username)
                    return
        raise NotFound(f"no session {short_id!r} of yours")

    def unlock(self, username: str, *, actor: str) -> int:
        """Forget the failed logins of ``username`` from every address, which lifts its
        throttling at once (an audited USER_CHANGED "unlocked"); how many were forgotten.
        NotFound for an unknown user."""
        if self.store.get_user(username) is None:
            raise NotFound(f"no user {username!r}")
        return self.store.unlock_user_logins(username, actor=actor)

    # --- user changes that end sessions ------------------------------------------------

    def passwd(self, username: str, password: str, *, actor: str, own: bool = False) -> int:
        """Set a user's password; revokes the user's sessions (how many). A reset by
        someone else (``own`` false: an admin, the CLI) also revokes the user's API tokens
        for good: whoever knew the old password may have made them. A user changing their
        own password (with the current one) keeps their tokens."""
        from cadenza.security import hash_password
        from cadenza.services.users import MIN_PASSWORD_LENGTH

        if len(password) < MIN_PASSWORD_LENGTH:
            raise InvalidRequest(f"the password must have at least {MIN_PASSWORD_LENGTH} "
                                 "characters")
        return self._change(username, actor, None if own else "password reset",
                            password_hash=hash_password(password))

    def disable(self, username: str, *, actor: str, disabled: bool = True) -> int:
        """Disable (or enable) a user; revokes the user's sessions. Disabling also revokes
        the user's API tokens for good: enabling the user again does not revive them."""
        return self._change(username, actor, "user disabled" if disabled else None,
                            disabled=disabled)

    def set_roles(self, username: str, roles: Sequence[str], *, actor: str) -> int:
        """Replace a user's roles; revokes the user's sessions."""
        cleaned = sorted({r.strip() for r in roles if r.strip()})
        if not cleaned:
            raise InvalidRequest("give at least one role")
        return self._change(username, actor, None, roles=cleaned)

    def _change(self, username: str, actor: str, revoke_tokens: str | None,
                **fields: Any) -> int:
        """Change the user, end their sessions and, with ``revoke_tokens`` (the reason),
        revoke their API tokens: one transaction."""
        with self.store.write() as conn:
            if not self.store.update_user(username, actor=actor, conn=conn, **fields):
                raise NotFound(f"no user {username!r}")
            if revoke_tokens is not None:
                self.store.revoke_user_tokens(username, reason=revoke_tokens, actor=actor,
                                              conn=conn)
            return self.store.revoke_user_sessions(username, conn=conn)


def _role(roles: Sequence[str]) -> str | None:
    index = rank(roles)
    return ROLE_LADDER[index] if index >= 0 else None


def _lower(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return None
    return ROLE_LADDER[min(ROLE_LADDER.index(a), ROLE_LADDER.index(b))]


_DUMMY: list[str] = []


def _dummy_hash() -> str:
    from cadenza.security import hash_password

    if not _DUMMY:
        _DUMMY.append(hash_password(secrets.token_urlsafe(16)))
    return _DUMMY[0]


def new_password() -> str:
    """A random password to give a user (shown once by the shell)."""
    from cadenza.security import generate_password

    return generate_password()


def parse_role(role: str) -> str:
    """A built-in role name; InvalidRequest naming the allowed ones."""
    if role not in ROLE_LADDER:
        raise InvalidRequest(f"--role {role!r}: expected one of {', '.join(ROLE_LADDER)}")
    return role
