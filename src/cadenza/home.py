"""A Cadenza home directory: where its files are, and how to open its parts.

The service layer (:mod:`cadenza.services`) goes through :class:`Home` to read the
configuration, the secrets and the store, so that every entry point wires redaction the
same way: every secret value known to the home is registered with the redactor before the
store is opened.
"""

from __future__ import annotations

import csv
import os
import sqlite3
from dataclasses import dataclass, field
from datetime import date
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cadenza.audit import Redactor, SecretStore

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.config import LoadedConfig, LoadedSettings, Settings
    from cadenza.store import Store
    from cadenza.store.lease_clock import LeaseTime

CONFIG_FILE = "cadenza.toml"
JOBS_FILE = "jobs.toml"


def resolve_home(explicit: str | os.PathLike[str] | None) -> Path:
    """``--home`` if given, else ``$CADENZA_HOME``, else the current directory."""
    chosen = explicit or os.environ.get("CADENZA_HOME") or os.getcwd()
    return Path(chosen).expanduser().resolve()


class HasSettings(Protocol):
    """A loaded configuration, whole or settings only: what opening the store needs."""

    @property
    def settings(self) -> Settings: ...


@dataclass
class Home:
    """One home directory and the parts opened from it (lazily, once)."""

    path: Path
    _secrets: SecretStore | None = field(default=None, repr=False)
    _redactor: Redactor | None = field(default=None, repr=False)

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def jobs_file(self) -> Path:
        return self.path / JOBS_FILE

    @property
    def data_dir(self) -> Path:
        return self.path / "data"

    @property
    def secrets(self) -> SecretStore:
        if self._secrets is None:
            self._secrets = SecretStore(self.path)
        return self._secrets

    @property
    def redactor(self) -> Redactor:
        """A redactor that knows every secret value of this home."""
        if self._redactor is None:
            self._redactor = Redactor(self.secrets.values())
        return self._redactor

    def load_config(self) -> LoadedConfig:
        """Load and validate both files; raises ConfigError with every located problem."""
        from cadenza.config import load_home

        loaded = load_home(self.path, resolve_secret=self.secrets.get)
        for value in loaded.secret_values:
            self.redactor.add(value)
        return loaded

    def load_settings(self) -> LoadedSettings:
        """Load and validate ``cadenza.toml`` alone (``jobs.toml`` may be invalid: its
        problems come back in ``jobs_problems``); raises ConfigError for ``cadenza.toml``."""
        from cadenza.config import load_settings

        loaded = load_settings(self.path, resolve_secret=self.secrets.get)
        for value in loaded.secret_values:
            self.redactor.add(value)
        return loaded

    def open_store(
        self,
        config: HasSettings | None = None,
        *,
        clock: Clock | None = None,
        migrate: bool = True,
        lease_time: LeaseTime = "clock",
    ) -> Store:
        """Open (and by default migrate) the store named by ``[store].url``, with its hooks
        (:func:`cadenza.assembly.assemble`: every process that opens a home's store gets the
        same ones); ``lease_time``: whose time decides a lease
        (:mod:`cadenza.store.lease_clock`)."""
        from cadenza.assembly import assemble
        from cadenza.store import Store

        loaded = config or self.load_config()
        settings = loaded.settings
        store = Store.open(
            settings.store_url(self.path),
            clock=clock,
            redactor=self.redactor,
            sqlite_synchronous=settings.store.sqlite_synchronous,
            migrate=migrate,
            lease_time=lease_time,
        )
        assemble(store)
        return store


def create_home(path: Path, *, example: bool, today: date | None = None) -> Home:
    """Create a home at ``path``: the two files, ``plugins/`` and ``data/`` (mode 0700 on
    POSIX: it holds the store and the secrets).

    Refuses a directory that already holds a ``cadenza.toml`` (nothing is overwritten).
    With ``example``, writes the demo home (``cadenza init --example``): the ``sales-load``
    job, a SQLite warehouse with its aggregate table, and one sample sales file per month for the 13
    months up to ``today`` (default: the local date), so that ``${month.current}`` and
    ``${month.previous}`` both have a file.
    """
    path.mkdir(parents=True, exist_ok=True)
    if (path / CONFIG_FILE).exists():
        raise FileExistsError(f"{path / CONFIG_FILE} exists; refusing to overwrite a home")
    (path / "plugins").mkdir(exist_ok=True)
    data = path / "data"
    for sub in ("", "backups", "files", "reports"):
        (data / sub).mkdir(parents=True, exist_ok=True)
    _make_private(data, PRIVATE_DIR)
    example_dir = resources.files("cadenza") / "example"
    if example:
        (path / CONFIG_FILE).write_text(
            (example_dir / CONFIG_FILE).read_text(encoding="utf-8"), encoding="utf-8"
        )
        (path / JOBS_FILE).write_text(
            (example_dir / JOBS_FILE).read_text(encoding="utf-8"), encoding="utf-8"
        )
        for plugin in (example_dir / "plugins").iterdir():
            if plugin.is_file() and plugin.name.endswith(".py"):
                (path / "plugins" / plugin.name).write_text(
                    plugin.read_text(encoding="utf-8"), encoding="utf-8"
                )
        if today is None:
            from cadenza.clock import SystemClock

            today = SystemClock().now().astimezone().date()
        _write_sample_sales(data / "files" / "sales", today)
        _create_warehouse(data / "warehouse.db")
    else:
        (path / CONFIG_FILE).write_text(_MINIMAL_SETTINGS, encoding="utf-8")
        (path / JOBS_FILE).write_text(_MINIMAL_JOBS, encoding="utf-8")
    _make_home_private(path)
    return Home(path.resolve())


def world_writable_warnings(path: Path) -> list[str]:
    """One line per world-writable part of the home (the home, the two files, ``plugins/``,
    ``templates/``), naming the path and the fix. Empty on Windows, which has no such mode."""
    if not _POSIX:
        return []
    lines: list[str] = []
    for item in (path, path / CONFIG_FILE, path / JOBS_FILE, path / "plugins",
                 path / "templates"):
        try:
            mode = item.stat().st_mode
        except OSError:
            continue
        if mode & 0o002:
            lines.append(f"warning: {item} is writable by every user of this machine, who "
                         f"could change what Cadenza runs; fix: chmod o-w {item}")
    return lines


def _make_home_private(path: Path) -> None:
    """Whatever the umask: the home, ``plugins/`` and ``templates/`` 0700, the two files and
    every plugin or template file 0600 (POSIX; a no-op on Windows, see docs/windows.md)."""
    _make_private(path, PRIVATE_DIR)
    for name in (CONFIG_FILE, JOBS_FILE):
        _make_private(path / name, PRIVATE_FILE)
    for folder in ("plugins", "templates"):
        where = path / folder
        if not where.is_dir():
            continue
        _make_private(where, PRIVATE_DIR)
        for item in where.rglob("*"):
            _make_private(item, PRIVATE_DIR if item.is_dir() else PRIVATE_FILE)


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_POSIX = os.name == "posix"


def _make_private(path: Path, mode: int) -> None:
    """Give ``path`` ``mode`` on POSIX. Windows has no such modes: there a home under the
    user's profile keeps the profile's ACL (that user, SYSTEM and the administrators)."""
    if _POSIX:
        os.chmod(path, mode)


def create_private_sqlite(url: str) -> Path | None:
    """Create the SQLite file of ``url`` (an absolute ``sqlite:///`` URL) empty with mode
    0600, or give an existing one that mode, before the store opens it: the store holds
    the users' password hashes. SQLite gives its ``-wal`` and ``-shm`` files the mode of
    the database. Returns the file, or None for another database or an in-memory one."""
    import sqlalchemy as sa

    from cadenza.store.engine import sqlite_path

    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    path = sqlite_path(parsed)
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                     PRIVATE_FILE)
    except FileExistsError:
        _make_private(path, PRIVATE_FILE)
    else:
        os.close(fd)
        _make_private(path, PRIVATE_FILE)  # os.open's mode went through the umask
    return path


def _months_back(today: date, n: int) -> list[str]:
    year, month = today.year, today.month
    out = []
    for _ in range(n):
        out.append(f"{year:04d}-{month:02d}")
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
    return out


SAMPLE_ROWS_PER_MONTH = 24


def _write_sample_sales(folder: Path, today: date) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    regions = ("north", "south", "east", "west")
    for index, period in enumerate(_months_back(today, 13)):
        with (folder / f"{period}.csv").open("w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["order_id", "sold_on", "region", "amount"])
            for i in range(SAMPLE_ROWS_PER_MONTH):
                day = 1 + (i % 28)
                amount = f"{(17 * (i + 1) + 3 * index) % 500 + 10.5:.2f}"
                writer.writerow(
                    [f"{period}-{i + 1:04d}", f"{period}-{day:02d}", regions[i % 4], amount]
                )


def _create_warehouse(db: Path) -> None:
    con = sqlite3.connect(db)
    try:
        con.execute(
            "CREATE TABLE IF NOT EXISTS sales_monthly ("
            " period TEXT PRIMARY KEY, total REAL NOT NULL)"
        )
        con.commit()
    finally:
        con.close()


_MINIMAL_SETTINGS = """\
# Cadenza settings for this home. Reference: docs/configuration.md

[server]
host = "127.0.0.1"
port = 8765

[store]
url = "sqlite:///data/cadenza.db"
"""

_MINIMAL_JOBS = """\
# The job catalogue. Reference: docs/configuration.md
# [jobs.my-job]
# schedule = "0 2 * * *"
# [[jobs.my-job.steps]]
# name = "hello"
# type = "python"
# callable = "my_module:main"
"""
