"""The configuration as a whole: create a home, validate it, reload it into a running node.

Operations::

    init(directory, example=False) -> NewHome        the files, the store, an admin user
    validate() -> list[Problem]                      every located problem of both files
    reload(target) -> bool                           validated first (ConfigError), then
                                                     ``target.reload()``

``target`` is anything with ``reload() -> bool`` (a running node's config holder): the
service does not know the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cadenza.domain.errors import CadenzaError
from cadenza.services.errors import Refused

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.config import Problem
    from cadenza.services.context import Actor, Services


class Reloadable(Protocol):
    """What holds a running configuration: ``reload()`` loads both files again and
    applies them when valid; returns whether it did."""

    def reload(self) -> bool: ...


@dataclass(frozen=True)
class NewHome:
    """A home just created: where, with the demo or not, and the admin's password (shown
    once)."""

    path: Path
    example: bool
    admin: str
    password: str


def init_home(directory: Path, *, example: bool, actor: Actor, clock: Clock) -> NewHome:
    """Create a home in ``directory``: cadenza.toml, jobs.toml, plugins/, data/ (0700), the
    store (a SQLite file 0600: it holds password hashes) and an ``admin`` user with a
    generated password. Refused (nothing overwritten) when the directory already holds a
    cadenza.toml."""
    from cadenza.home import create_home, create_private_sqlite
    from cadenza.security import generate_password, hash_password

    try:
        home = create_home(directory, example=example,
                           today=clock.now().astimezone().date())
    except FileExistsError as exc:
        raise Refused(str(exc)) from None
    try:
        loaded = home.load_config()
        create_private_sqlite(loaded.settings.store_url(home.path))
        store = home.open_store(loaded, clock=clock)
    except CadenzaError as exc:
        raise CadenzaError(f"the new home does not load: {exc}") from None
    password = generate_password()
    try:
        store.add_user("admin", hash_password(password), ["admin"],
                       display_name="Administrator", actor=actor.id)
    finally:
        store.close()
    return NewHome(home.path, example, "admin", password)


class ConfigService:
    """Validation and reload of one home's configuration."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def validate(self) -> list[Problem]:
        """Every problem (errors and warnings) of cadenza.toml and jobs.toml."""
        from cadenza.config import validate_home

        home = self.services.home
        problems = validate_home(home.path, resolve_secret=home.secrets.get)
        return problems + self._short_secrets()

    def _short_secrets(self) -> list[Problem]:
        """A warning for each stored secret shorter than ``cadenza secrets set`` accepts
        without ``--allow-short`` (stored before the rule, or with it): it keeps working."""
        from cadenza.audit.secrets import short_secret_reason
        from cadenza.config import Problem
        from cadenza.domain.errors import SecretError

        secrets = self.services.home.secrets
        found: list[Problem] = []
        try:
            names = secrets.names()
            for name in names:
                value = secrets.get(name)
                reason = None if value is None else short_secret_reason(name, value)
                if reason is not None:
                    found.append(Problem("data/secrets.json", 1, 1, f"{reason}; replace it "
                                         f"with `cadenza secrets set {name}`", "warning",
                                         f"secret.{name}"))
        except SecretError:
            return []  # an unreadable store is reported where a secret is used
        return found

    def reload(self, target: Reloadable) -> bool:
        """Check both files (ConfigError with every located problem, nothing applied),
        then ask ``target`` to apply them; returns whether it did."""
        self.services.home.load_config()
        return target.reload()


def home_mode_warnings(home: Path) -> list[str]:
    """Lines warning of a world-writable home, config file, ``plugins/`` or ``templates/``
    (POSIX; none on Windows), each naming the path and the ``chmod o-w`` fix."""
    from cadenza.home import world_writable_warnings

    return world_writable_warnings(home)
