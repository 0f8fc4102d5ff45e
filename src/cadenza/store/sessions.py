"""Web sessions, API tokens, failed logins and idempotency keys (docs/api.md).

Secrets are never stored: a session's id is the SHA-256 of its cookie value and a token's
``token_hash`` the SHA-256 of the token (both 256-bit random values, so a fast hash is
enough, :mod:`cadenza.security`). Checks read the row at each request, so a revoked session
or token is refused at once, on every node.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from cadenza.domain.errors import StoreError
from cadenza.domain.events import EventType, Level
from cadenza.store.codec import dumps, loads, utc_from_raw
from cadenza.store.core import StoreCore
from cadenza.store.tables import api_tokens, idempotency_keys, login_failures, sessions


@dataclass(frozen=True)
class SessionRecord:
    """One web session (never its cookie value)."""

    id: str
    username: str
    csrf_token: str = ""
    created_at: datetime | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_seen_at: datetime | None = None


@dataclass(frozen=True)
class TokenRecord:
    """One API token (never the token itself)."""

    name: str
    username: str | None
    roles: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True)
class IdempotentRun:
    """The row of an Idempotency-Key: its request's job and body hash, and its run once
    recorded (``None`` while the first request is creating it)."""

    job_id: str
    body_hash: str
    run_id: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Credential:
    """What a request's API token or session cookie stands for, read in one statement
    with its user (:meth:`SessionsRepository.token_credential`,
    :meth:`SessionsRepository.session_credential`)."""

    name: str
    """The token's name, or the session's id (a hash)."""
    username: str | None
    """The user (``None``: a token of no user)."""
    roles: tuple[str, ...]
    """A token's own roles; a session's are its user's."""
    user_roles: tuple[str, ...] | None
    """The user's roles; ``None`` when the user does not exist (any more)."""
    user_disabled: bool
    csrf_token: str | None = None
    language: str | None = None
    """The user's chosen page language (a session's only)."""


@dataclass(frozen=True, slots=True)
class FailureCount:
    """Failed logins of one scope in a window: how many, and the latest one's time."""

    count: int = 0
    last: datetime | None = None


@dataclass(frozen=True, slots=True)
class LoginFailures:
    """The failed logins that decide a login's throttling
    (:meth:`SessionsRepository.login_failures_of`), in three scopes."""

    pair: FailureCount
    """For this user name from this address."""
    address: FailureCount
    """From this address, for any user name."""
    user: FailureCount
    """For this user name, from any address."""


_TOKEN_SQL = (
    "SELECT t.name, t.username, t.roles_json, t.last_used_at, u.username, u.roles_json,"
    " u.disabled FROM api_tokens t LEFT JOIN users u ON u.username = t.username"
    " WHERE t.token_hash = ? AND t.revoked_at IS NULL")
_SESSION_SQL = (
    "SELECT s.id, s.username, s.csrf_token, u.username, u.roles_json, u.disabled,"
    " u.language FROM sessions s LEFT JOIN users u ON u.username = s.username"
    " WHERE s.id = ? AND s.revoked_at IS NULL AND s.expires_at > ?")


def _session(row: sa.Row[Any]) -> SessionRecord:
    m = row._mapping
    return SessionRecord(m["id"], m["username"], m["csrf_token"], m["created_at"],
                         m["expires_at"], m["revoked_at"], m["last_seen_at"])


def _token(row: sa.Row[Any]) -> TokenRecord:
    m = row._mapping
    return TokenRecord(m["name"], m["username"], tuple(loads(m["roles_json"]) or ()),
                       m["created_at"], m["revoked_at"], m["last_used_at"])


class SessionsRepository(StoreCore):
    """Tables ``sessions``, ``api_tokens``, ``login_failures`` and ``idempotency_keys``."""

    # --- sessions ----------------------------------------------------------------------

    def create_session(self, session_hash: str, username: str, csrf_token: str,
                       expires_at: datetime, *, address: str, actor: str) -> None:
        """Record a session and a USER_LOGIN event (outcome "ok", the address)."""
        now = self._now()
        with self.write() as c:
            c.execute(sa.insert(sessions).values(
                id=session_hash, username=username, csrf_token=csrf_token, created_at=now,
                expires_at=expires_at, last_seen_at=now))
            self._insert_event(c, EventType.USER_LOGIN, f"user {username} logged in",
                               payload={"username": username, "outcome": "ok",
                                        "address": address},
                               actor=actor, now=now)

    def list_sessions(self, username: str) -> list[SessionRecord]:
        """The live sessions of ``username``, newest first (ids are hashes)."""
        now = self._now()
        with self.read() as c:
            rows = c.execute(sa.select(sessions).where(
                sessions.c.username == username, sessions.c.revoked_at.is_(None),
                sessions.c.expires_at > now).order_by(sessions.c.created_at.desc())).all()
        return [_session(r) for r in rows]

    def revoke_session(self, session_hash: str, *, username: str | None = None) -> bool:
        """Revoke one live session (of ``username`` when given); ``True`` if it was live."""
        query = sa.update(sessions).where(sessions.c.id == session_hash,
                                          sessions.c.revoked_at.is_(None))
        if username is not None:
            query = query.where(sessions.c.username == username)
        with self.write() as c:
            return bool(c.execute(query.values(revoked_at=self._now())).rowcount)

    def revoke_user_sessions(self, username: str, *,
                             conn: sa.Connection | None = None) -> int:
        """Revoke every live session of ``username`` (a password, role or disabled
        change); how many."""
        with self._joined(conn) as c:
            return int(c.execute(sa.update(sessions).where(
                sessions.c.username == username, sessions.c.revoked_at.is_(None),
            ).values(revoked_at=self._now())).rowcount)

    # --- failed logins -----------------------------------------------------------------

    def record_login_failure(self, username: str, address: str, *, reason: str,
                             counted: bool = True) -> None:
        """Count a failed login (unless ``counted`` is false: an attempt refused by the
        throttle, which must not push its own delay further) and write USER_LOGIN
        (outcome "failed", never the password)."""
        now = self._now()
        with self.write() as c:
            if counted:
                c.execute(sa.insert(login_failures).values(
                    username=username[:64], address=address[:64], failed_at=now))
            self._insert_event(c, EventType.USER_LOGIN,
                               f"failed login for {username[:64]!r} from {address}: {reason}",
                               level=Level.WARNING,
                               payload={"username": username[:64], "outcome": "failed",
                                        "address": address, "reason": reason},
                               actor="system", now=now)

    def login_failures_of(self, username: str, address: str,
                          since: datetime) -> LoginFailures:
        """Failed logins since ``since`` for this user name from this address, from this
        address, and for this user name: each a count and its latest time (three indexed
        reads)."""
        col = login_failures.c
        scopes = {"pair": (col.username == username[:64], col.address == address[:64]),
                  "address": (col.address == address[:64],),
                  "user": (col.username == username[:64],)}
        found: dict[str, FailureCount] = {}
        with self.read() as c:
            for scope, where in scopes.items():
                count, last = c.execute(sa.select(
                    sa.func.count(), sa.func.max(col.failed_at, type_=col.failed_at.type))
                    .where(*where, col.failed_at >= since)).one()
                found[scope] = FailureCount(int(count), last)
        return LoginFailures(found["pair"], found["address"], found["user"])

    def unlock_user_logins(self, username: str, *, actor: str) -> int:
        """Forget every failed login of ``username`` (from any address), which ends its
        throttling; USER_CHANGED (action "unlocked", how many were forgotten)."""
        now = self._now()
        with self.write() as c:
            forgotten = int(c.execute(sa.delete(login_failures).where(
                login_failures.c.username == username[:64])).rowcount)
            self._insert_event(c, EventType.USER_CHANGED,
                               f"user {username} unlocked: {forgotten} failed login(s) "
                               "forgotten",
                               payload={"action": "unlocked", "username": username,
                                        "failures": forgotten},
                               actor=actor, now=now)
        return forgotten

    def forget_login_failures(self, before: datetime) -> int:
        """Delete the failures older than ``before`` (out of every throttling window)."""
        with self.write() as c:
            return int(c.execute(sa.delete(login_failures).where(
                login_failures.c.failed_at < before)).rowcount)

    # --- API tokens --------------------------------------------------------------------

    def add_token(self, name: str, token_hash: str, roles: list[str], *,
                  username: str | None, actor: str) -> None:
        """Record a token; a taken name raises :class:`StoreError`. USER_CHANGED names the
        token and its roles, never the token."""
        now = self._now()
        with self.write() as c:
            inserted = c.execute(self._insert_ignore(api_tokens, ["name"]).values(
                name=name, token_hash=token_hash, username=username,
                roles_json=dumps(sorted(roles)), created_at=now)).rowcount
            if inserted != 1:
                raise StoreError(f"a token named {name!r} already exists")
            self._insert_event(c, EventType.USER_CHANGED,
                               f"API token {name} created with roles {', '.join(roles)}",
                               payload={"action": "token_created", "token": name,
                                        "username": username, "roles": sorted(roles)},
                               actor=actor, now=now)

    def token_credential(self, token_hash: str) -> Credential | None:
        """The live token with that hash and its user, in one statement (every request
        with a bearer token); its ``last_used_at`` set to now at most once a minute."""
        rows = self._quick_rows(_TOKEN_SQL, (token_hash,))
        if not rows:
            return None
        name, username, roles, last, user, user_roles, disabled = rows[0]
        now = self._now()
        last_used = utc_from_raw(last)
        if last_used is None or now - last_used > timedelta(minutes=1):
            self._touch_token(name, now)
        return Credential(name, username, tuple(loads(roles) or ()),
                          None if user is None else tuple(loads(user_roles) or ()),
                          bool(disabled))

    def session_credential(self, session_hash: str) -> Credential | None:
        """The live (not revoked, not expired) session with that id and its user, in one
        statement (every request with a session cookie)."""
        rows = self._quick_rows(_SESSION_SQL, (session_hash, self._raw_time(self._now())))
        if not rows:
            return None
        session_id, username, csrf, user, user_roles, disabled, language = rows[0]
        roles = None if user is None else tuple(loads(user_roles) or ())
        return Credential(session_id, username, roles or (), roles, bool(disabled),
                          csrf_token=csrf, language=language)

    def _touch_token(self, name: str, now: datetime) -> None:
        # A write per request would serialize every API call on SQLite: a minute's
        # precision is what a person reading "last used" needs.
        with self.write() as c:
            c.execute(sa.update(api_tokens).where(api_tokens.c.name == name)
                      .values(last_used_at=now))

    def list_tokens(self, username: str | None = None, *,
                    every: bool = False) -> list[TokenRecord]:
        """Tokens (revoked ones too) of ``username`` (``None``: tokens of no user), or all
        with ``every``; by name."""
        query = sa.select(api_tokens).order_by(api_tokens.c.name)
        if not every:
            query = query.where(api_tokens.c.username.is_(None) if username is None
                                else api_tokens.c.username == username)
        with self.read() as c:
            return [_token(r) for r in c.execute(query).all()]

    def revoke_token(self, name: str, *, username: str | None = None, every: bool = False,
                     actor: str) -> bool:
        """Revoke the live token ``name`` (of ``username``, unless ``every``); ``True`` if
        it was live. USER_CHANGED names it."""
        query = sa.update(api_tokens).where(api_tokens.c.name == name,
                                            api_tokens.c.revoked_at.is_(None))
        if not every:
            query = query.where(api_tokens.c.username.is_(None) if username is None
                                else api_tokens.c.username == username)
        now = self._now()
        with self.write() as c:
            if not c.execute(query.values(revoked_at=now)).rowcount:
                return False
            self._insert_event(c, EventType.USER_CHANGED, f"API token {name} revoked",
                               payload={"action": "token_revoked", "token": name},
                               actor=actor, now=now)
        return True

    def revoke_user_tokens(self, username: str, *, reason: str, actor: str,
                           conn: sa.Connection | None = None) -> list[str]:
        """Revoke every live token of ``username`` (a password reset, the user disabled):
        the names revoked, one USER_CHANGED ``token_revoked`` event each with ``reason``.
        Revoked for good: enabling the user again does not bring them back."""
        now = self._now()
        with self._joined(conn) as c:
            names = [r[0] for r in c.execute(sa.select(api_tokens.c.name).where(
                api_tokens.c.username == username, api_tokens.c.revoked_at.is_(None))
                .order_by(api_tokens.c.name)).all()]
            if not names:
                return []
            c.execute(sa.update(api_tokens).where(
                api_tokens.c.username == username, api_tokens.c.name.in_(names),
                api_tokens.c.revoked_at.is_(None)).values(revoked_at=now))
            for name in names:
                self._insert_event(c, EventType.USER_CHANGED,
                                   f"API token {name} revoked: {reason}",
                                   payload={"action": "token_revoked", "token": name,
                                            "username": username, "reason": reason},
                                   actor=actor, now=now)
        return names

    # --- idempotency keys --------------------------------------------------------------

    def reserve_idempotency_key(self, principal: str, key: str, job_id: str,
                                body_hash: str) -> tuple[bool, IdempotentRun]:
        """Insert the key's row unless it exists: ``(True, row)`` for the first request,
        ``(False, existing row)`` for the others. The primary key decides, so this holds
        across threads, processes and nodes."""
        now = self._now()
        with self.write() as c:
            inserted = c.execute(self._insert_ignore(idempotency_keys, ["principal", "key"])
                                 .values(principal=principal, key=key, job_id=job_id,
                                         body_hash=body_hash, created_at=now)).rowcount
        found = self.get_idempotency_key(principal, key)
        if found is None:  # released by a failed first request between the two statements
            return self.reserve_idempotency_key(principal, key, job_id, body_hash)
        return inserted == 1, found

    def get_idempotency_key(self, principal: str, key: str) -> IdempotentRun | None:
        """The key's row, or ``None``."""
        with self.read() as c:
            row = c.execute(sa.select(idempotency_keys).where(
                idempotency_keys.c.principal == principal,
                idempotency_keys.c.key == key)).first()
        if row is None:
            return None
        m = row._mapping
        return IdempotentRun(m["job_id"], m["body_hash"], m["run_id"], m["created_at"])

    def complete_idempotency_key(self, principal: str, key: str, run_id: str) -> None:
        """Attach the created run to the key."""
        with self.write() as c:
            c.execute(sa.update(idempotency_keys).where(
                idempotency_keys.c.principal == principal, idempotency_keys.c.key == key,
            ).values(run_id=run_id))

    def release_idempotency_key(self, principal: str, key: str) -> None:
        """Forget a key whose run could not be created (the client may try again)."""
        with self.write() as c:
            c.execute(sa.delete(idempotency_keys).where(
                idempotency_keys.c.principal == principal, idempotency_keys.c.key == key,
                idempotency_keys.c.run_id.is_(None)))
