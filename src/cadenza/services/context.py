"""The service layer's context: one home, one actor, one clock, the store opened lazily.

A shell (the CLI, the web app) builds one :class:`Services` per command or request and
calls the operations of its nouns (``services.runs``, ``services.history``,
``services.jobs`` ...). Nothing here prints; failures are :mod:`cadenza.domain.errors`
and :mod:`cadenza.services.errors` with messages that name what is at fault.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from cadenza.home import Home, resolve_home
from cadenza.services.errors import NotAHome

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.config import LoadedConfig, LoadedSettings
    from cadenza.store import Store


def os_user() -> str:
    """The OS user's name (``getpass.getuser``, which also works on Windows)."""
    try:
        return getpass.getuser()
    except Exception:  # no USER/LOGNAME and no passwd entry (some containers)
        return "unknown"


@dataclass(frozen=True)
class Actor:
    """Who asks: ``kind`` is ``cli`` (an OS user at a terminal), ``user`` (a web login) or
    ``system``; ``name`` the person. ``id`` (``cli:alice``) is what audit events record;
    texts meant for people ("canceled by alice", the trigger ``manual:alice``) use
    ``name``."""

    kind: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def trigger(self) -> str:
        """The trigger of a run this actor starts by hand."""
        return f"manual:{self.name}"

    @classmethod
    def cli(cls) -> Actor:
        """The OS user running the command."""
        return cls("cli", os_user())

    @classmethod
    def user(cls, name: str) -> Actor:
        """A logged-in user of the web app or API."""
        return cls("user", name)

    def __str__(self) -> str:
        return self.id


class Services:
    """The operations on one home, for one actor, on one clock.

    The configuration is read when an operation needs it: the whole of it (``config``) for
    what runs or edits jobs, ``cadenza.toml`` alone (``settings``) for what reads history.
    The store is opened at the first use and closed by :meth:`close` (or ``with``).
    """

    def __init__(self, home: Home, *, actor: Actor, clock: Clock,
                 store: Store | None = None) -> None:
        self.home = home
        self.actor = actor
        self.clock = clock
        self._config: LoadedConfig | None = None
        self._settings: LoadedSettings | None = None
        # A store given here (the web app's, shared by its requests) is borrowed: close()
        # leaves it open for its owner.
        self._store: Store | None = store
        self._borrowed_store = store is not None
        self._closers: list[Callable[[], None]] = []
        self._nouns()

    def _nouns(self) -> None:
        """One service object per noun (cheap: they open nothing until used)."""
        from cadenza.services.alerts import AlertService
        from cadenza.services.backup import BackupService
        from cadenza.services.calendars import CalendarService
        from cadenza.services.config import ConfigService
        from cadenza.services.desktop import DesktopService
        from cadenza.services.history import HistoryService
        from cadenza.services.jobs import JobService
        from cadenza.services.notifications import NotificationService
        from cadenza.services.resources import ResourceService
        from cadenza.services.runs import RunService
        from cadenza.services.scheduling import SchedulingService
        from cadenza.services.secrets import SecretService
        from cadenza.services.simulate import SimulateService
        from cadenza.services.users import UserService

        self.runs = RunService(self)
        self.history = HistoryService(self.store, self.clock)
        self.jobs = JobService(self)
        self.configuration = ConfigService(self)
        self.users = UserService(self)
        self.secrets = SecretService(self.home)
        self.backup = BackupService(self)
        self.simulation = SimulateService(self)
        self.notifications = NotificationService(self)
        self.resources = ResourceService(self)
        self.calendars = CalendarService(self)
        self.alerts = AlertService(self)
        self.scheduling = SchedulingService(self)
        self.desktop = DesktopService(self)

    @classmethod
    def at(cls, path: Path | str | None, *, actor: Actor, clock: Clock) -> Services:
        """Services on the home at ``path`` (``None``: ``$CADENZA_HOME``, else the current
        directory)."""
        return cls(Home(resolve_home(path)), actor=actor, clock=clock)

    # --- configuration and store -------------------------------------------------------

    def require_home(self) -> None:
        """Raise :class:`NotAHome` unless the home has a ``cadenza.toml``."""
        if not self.home.config_file.exists():
            raise NotAHome(f"{self.home.path} is not a Cadenza home (no cadenza.toml); "
                           "run `cadenza init DIR` or pass --home DIR")

    def config(self) -> LoadedConfig:
        """Both files, validated (ConfigError with every located problem otherwise)."""
        if self._config is None:
            self.require_home()
            self._config = self.home.load_config()
        return self._config

    def settings(self) -> LoadedSettings:
        """``cadenza.toml`` alone, validated; the problems of ``jobs.toml`` come with it."""
        if self._settings is None:
            self.require_home()
            self._settings = self.home.load_settings()
        return self._settings

    def store(self) -> Store:
        """The home's store, opened (and migrated) at the first call. Leases are judged by
        the database's time, not the services' clock (docs/leases.md)."""
        if self._store is None:
            loaded = self._config if self._config is not None else self.settings()
            self._store = self.home.open_store(loaded, clock=self.clock,
                                               lease_time="database")
            # The store's hooks, wired as in every process (cadenza.assembly): a run that
            # `cadenza run --local` ends writes its notification intents too (a serve's
            # sender delivers them), a `runs cancel` of a parent cancels its children.
            from cadenza.assembly import assemble

            assemble(self._store, self.config)
        return self._store

    def on_close(self, closer: Callable[[], None]) -> None:
        """Call ``closer`` at :meth:`close`, before the store closes."""
        self._closers.append(closer)

    def close(self) -> None:
        """Release what the operations opened: executors, then the store."""
        while self._closers:
            self._closers.pop()()
        if self._store is not None:
            store, self._store = self._store, None
            if not self._borrowed_store:
                store.close()

    def __enter__(self) -> Services:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
