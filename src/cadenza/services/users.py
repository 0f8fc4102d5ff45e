"""Users of the web UI and the API.

Operations::

    add(NewUser) -> AddedUser        InvalidRequest for a bad name, role, e-mail or password
    list() -> list[UserView]         never a password hash
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cadenza.domain.addresses import InvalidAddress, check_email
from cadenza.domain.errors import StoreError
from cadenza.services.errors import InvalidRequest, NotFound, Refused

if TYPE_CHECKING:
    from cadenza.services.context import Services

BUILTIN_ROLES = ("viewer", "operator", "editor", "admin")
MIN_PASSWORD_LENGTH = 8


@dataclass(frozen=True)
class NewUser:
    """A user to add; ``password`` None: generate one (returned once)."""

    name: str
    roles: Sequence[str]
    email: str | None = None
    display_name: str | None = None
    password: str | None = None


@dataclass(frozen=True)
class UserView:
    """A user as the shells list it: name, roles, whether disabled, contact, creation;
    never the password hash."""

    username: str
    roles: tuple[str, ...]
    disabled: bool
    display_name: str | None
    email: str | None
    created_at: datetime
    language: str | None = None
    timezone: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"username": self.username, "display_name": self.display_name,
                "email": self.email, "roles": list(self.roles), "disabled": self.disabled,
                "created_at": self.created_at, "language": self.language,
                "timezone": self.timezone}


@dataclass(frozen=True)
class AddedUser:
    """A user added: ``generated_password`` is the generated password (shown once), None
    when the password was given."""

    name: str
    roles: tuple[str, ...]
    generated_password: str | None


class UserService:
    def __init__(self, services: Services) -> None:
        self.services = services

    @staticmethod
    def check(user: NewUser) -> tuple[str, ...]:
        """The user's roles, sorted; InvalidRequest for a bad name, no role, a bad e-mail
        or a short password."""
        from cadenza.security import validate_username

        try:
            validate_username(user.name)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        roles = tuple(sorted({r.strip() for r in user.roles if r.strip()}))
        if not roles:
            raise InvalidRequest("give at least one --role")
        if user.email is not None:
            try:
                check_email(user.email)
            except InvalidAddress as exc:
                raise InvalidRequest(f"--email {user.email!r} is not an e-mail address: "
                                     f"{exc}") from None
        if user.password is not None and len(user.password) < MIN_PASSWORD_LENGTH:
            raise InvalidRequest(f"the password must have at least {MIN_PASSWORD_LENGTH} "
                                 "characters")
        return roles

    def add(self, user: NewUser) -> AddedUser:
        """Add a user (argon2id hash); the event names the actor."""
        from cadenza.security import generate_password, hash_password

        roles = self.check(user)
        password = user.password if user.password is not None else generate_password()
        store = self.services.store()
        try:
            store.add_user(user.name, hash_password(password), list(roles), email=user.email,
                           display_name=user.display_name, actor=self.services.actor.id)
        except StoreError as exc:
            raise Refused(str(exc)) from None
        return AddedUser(user.name, roles, None if user.password is not None else password)

    def set_preferences(self, name: str, *, language: str | None = None,
                        timezone: str | None = None) -> None:
        """Set a user's language (``en``, ``fr``, ``zh_Hans``) and time zone (an IANA
        name) for the pages and the e-mails they receive; ``""`` clears one (then the
        browser's or the server's applies). Unchanged when None."""
        from cadenza.config.types import zone_problem
        from cadenza.web.ui.render import LANGUAGES

        if language and language not in LANGUAGES:
            raise InvalidRequest(f"unknown language {language!r}: one of "
                                 f"{', '.join(LANGUAGES)}")
        problem = zone_problem(timezone) if timezone else None
        if problem is not None:
            raise InvalidRequest(problem)
        if not self.services.store().update_user(name, language=language, timezone=timezone,
                                                 actor=self.services.actor.id):
            raise NotFound(f"no user {name!r}")

    def list(self) -> list[UserView]:
        return [UserView(u.username, tuple(u.roles), u.disabled, u.display_name, u.email,
                         u.created_at, u.language, u.timezone)
                for u in self.services.store().list_users()]
