"""Users (docs/security.md): identity, argon2id password hash (computed by the caller), roles.

Events about users (USER_CHANGED) carry who and what changed, never the password hash.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from cadenza.domain.errors import StoreError
from cadenza.domain.events import EventType
from cadenza.store.codec import dumps
from cadenza.store.core import StoreCore
from cadenza.store.records import UserRecord
from cadenza.store.tables import users


class UsersRepository(StoreCore):
    """Users (table ``users``)."""

    def add_user(
        self,
        username: str,
        password_hash: str,
        roles: Iterable[str],
        *,
        email: str | None = None,
        display_name: str | None = None,
        actor: str = "system",
        conn: sa.Connection | None = None,
    ) -> None:
        """Create a user. A taken username raises :class:`StoreError` and changes nothing.

        Writes USER_CHANGED (action "added", roles, email; never the hash).
        """
        if not username:
            raise ValueError("a username cannot be empty")
        role_list = sorted(set(roles))
        now = self._now()
        with self._joined(conn) as c:
            inserted = c.execute(
                self._insert_ignore(users, ["username"]).values(
                    username=username,
                    display_name=display_name,
                    email=email,
                    password_hash=password_hash,
                    roles_json=dumps(role_list),
                    disabled=False,
                    created_at=now,
                    updated_at=now,
                )
            ).rowcount
            if inserted != 1:
                raise StoreError(f"a user named {username!r} already exists")
            self._insert_event(
                c,
                EventType.USER_CHANGED,
                f"user {username} added with roles {', '.join(role_list) or '(none)'}",
                payload={
                    "action": "added",
                    "username": username,
                    "roles": role_list,
                    "email": email,
                    "display_name": display_name,
                },
                actor=actor,
                now=now,
            )

    def update_user(
        self,
        username: str,
        *,
        password_hash: str | None = None,
        roles: Iterable[str] | None = None,
        email: str | None = None,
        display_name: str | None = None,
        disabled: bool | None = None,
        language: str | None = None,
        timezone: str | None = None,
        actor: str = "system",
        conn: sa.Connection | None = None,
    ) -> bool:
        """Change the given fields of a user (``None`` = unchanged; ``""`` clears a
        ``language`` or ``timezone``); ``False`` if no such user.

        Sets updated_at. Writes USER_CHANGED naming the changed fields (for a password, only
        that it changed). Sessions to revoke after a password, role or disabled change are the
        caller's business, in the same transaction (``conn``).
        """
        values: dict[str, object] = {}
        if password_hash is not None:
            values["password_hash"] = password_hash
        if roles is not None:
            values["roles_json"] = dumps(sorted(set(roles)))
        if email is not None:
            values["email"] = email
        if display_name is not None:
            values["display_name"] = display_name
        if disabled is not None:
            values["disabled"] = disabled
        if language is not None:
            values["language"] = language or None
        if timezone is not None:
            values["timezone"] = timezone or None
        if not values:
            return self.get_user(username, conn=conn) is not None
        now = self._now()
        with self._joined(conn) as c:
            changed = c.execute(
                sa.update(users)
                .where(users.c.username == username)
                .values(**values, updated_at=now)
            ).rowcount
            if changed != 1:
                return False
            shown = {k: v for k, v in values.items() if k != "password_hash"}
            names = sorted(k.removesuffix("_json") for k in values)
            self._insert_event(
                c,
                EventType.USER_CHANGED,
                f"user {username} changed: {', '.join(names)}",
                payload={
                    "action": "changed",
                    "username": username,
                    "changed": names,
                    **{k.removesuffix("_json"): v for k, v in shown.items()},
                },
                actor=actor,
                now=now,
            )
        return True

    def get_user(self, username: str, *, conn: sa.Connection | None = None) -> UserRecord | None:
        """The user ``username`` (with its password hash, hidden from ``repr``), or ``None``."""
        with self._reading(conn) as c:
            row = c.execute(sa.select(users).where(users.c.username == username)).first()
        return None if row is None else UserRecord.from_row(row)

    def list_users(self) -> list[UserRecord]:
        """Every user, by username."""
        with self.read() as c:
            rows = c.execute(sa.select(users).order_by(users.c.username)).all()
        return [UserRecord.from_row(row) for row in rows]
