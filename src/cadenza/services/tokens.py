"""API tokens (docs/api.md): created with a role, shown once, stored as their SHA-256.

Operations (on :class:`TokenService`)::

    create(name, role, username=None, actor) -> NewToken   the token, once
    list(username=None, every=False) -> list[TokenView]    never a token
    revoke(name, username=None, every=False, actor)        refused at once afterwards
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadenza.domain.errors import StoreError
from cadenza.services.auth import parse_role
from cadenza.services.errors import InvalidRequest, NotFound, Refused

if TYPE_CHECKING:
    from cadenza.store.protocols import AccountStore

TOKEN_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


@dataclass(frozen=True)
class NewToken:
    """A token just created: ``token`` is shown once and never again."""

    name: str
    role: str
    token: str


@dataclass(frozen=True)
class TokenView:
    """A token as listed: never its value."""

    name: str
    username: str | None
    roles: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "user": self.username, "roles": list(self.roles),
                "created_at": self.created_at, "revoked_at": self.revoked_at,
                "last_used_at": self.last_used_at}


class TokenService:
    """Tokens over one store."""

    def __init__(self, store: AccountStore) -> None:
        self.store = store

    def create(self, name: str, role: str, *, username: str | None = None,
               actor: str) -> NewToken:
        """A new token named ``name`` with ``role`` (of ``username``, or of no user)."""
        from cadenza.security import generate_token, hash_token

        if TOKEN_NAME_RE.fullmatch(name) is None:
            raise InvalidRequest(f"invalid token name {name!r}: use 1 to 64 letters, digits, "
                                 "'_', '.' and '-'")
        parse_role(role)
        if username is not None and self.store.get_user(username) is None:
            raise NotFound(f"no user {username!r}")
        token = generate_token()
        try:
            self.store.add_token(name, hash_token(token), [role], username=username,
                                 actor=actor)
        except StoreError as exc:
            raise Refused(str(exc)) from None
        return NewToken(name, role, token)

    def list(self, username: str | None = None, *, every: bool = False) -> list[TokenView]:
        """Tokens of ``username`` (``None``: tokens of no user), or every token."""
        return [TokenView(t.name, t.username, t.roles, t.created_at, t.revoked_at,
                          t.last_used_at)
                for t in self.store.list_tokens(username, every=every)]

    def revoke(self, name: str, *, username: str | None = None, every: bool = False,
               actor: str) -> None:
        """Revoke a live token; NotFound when there is none of that name (for that user)."""
        if not self.store.revoke_token(name, username=username, every=every, actor=actor):
            raise NotFound(f"no live token {name!r}")
