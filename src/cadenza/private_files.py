"""The files of a home that no step may read or write (docs/security.md, "Files no step
reads"): the secret key, the encrypted secrets and their lock, the store's SQLite files
(with their ``-wal``, ``-shm`` and ``-journal``) and everything under ``data/backups/``.

:func:`PrivateFiles.reason` says whether a path names one of them, whatever its spelling:
``..`` and ``.`` segments, doubled separators, an absolute path, a symbolic link (the path is
resolved), a case variant (``os.path.normcase``, and on a case-insensitive file system the
same file found by :func:`os.path.samefile`), or a hard link (same device and inode).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

RULE = "reads a file Cadenza keeps private"
"""The rule's words in every refusal."""
SECRET_FILES = ("secret.key", "secrets.json", "secrets.lock")
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")
_MAX_BACKUP_FILES = 10_000


def _norm(path: Path) -> str:
    return os.path.normcase(os.path.normpath(str(path)))


@dataclass(frozen=True)
class PrivateFiles:
    """The private files of one home (``store_file``: the store's SQLite file, if any)."""

    home: Path
    store_file: Path | None = None

    @classmethod
    def of(cls, home: Path, store_url: str | None = None) -> PrivateFiles:
        """The private files of ``home`` whose store is at ``store_url`` (absolute)."""
        store_file: Path | None = None
        if store_url:
            prefix, sep, rest = store_url.partition(":///")
            if sep and prefix.split("+", 1)[0].lower() == "sqlite":
                database = rest.partition("?")[0].removeprefix("file:")
                if database and database != ":memory:":
                    store_file = Path(database)
        return cls(home, store_file)

    def files(self) -> Iterator[Path]:
        """Every private file (existing or not), resolved."""
        data = (self.home / "data").resolve()
        for name in SECRET_FILES:
            yield data / name
        stores = [data / "cadenza.db"]
        if self.store_file is not None:
            stores.append(self.store_file.resolve())
        for store in stores:
            for suffix in SQLITE_SUFFIXES:
                yield store.with_name(store.name + suffix)

    def backups(self) -> Path:
        """The backups' folder, resolved."""
        return (self.home / "data" / "backups").resolve()

    def reason(self, path: str | os.PathLike[str]) -> str | None:
        """Why ``path`` may not be read or written (None: it may, as far as this rule
        goes). A relative path is taken relative to the home."""
        given = Path(path)
        if not given.is_absolute():
            given = self.home / given
        try:
            real = given.resolve()
        except (OSError, RuntimeError):
            real = Path(os.path.abspath(given))
        name = _norm(real)
        backups = self.backups()
        if name == _norm(backups) or name.startswith(_norm(backups) + os.sep):
            return "a backup of the store"
        for private in self.files():
            if name == _norm(private):
                return f"{private.name}"
        try:
            info = os.stat(real)
        except OSError:
            return None  # nothing there: no other name of a private file
        for private in self.files():
            try:
                if os.path.samefile(real, private):
                    return f"{private.name}"
            except OSError:
                continue
        if info.st_nlink > 1 and backups.is_dir():
            for count, found in enumerate(backups.rglob("*")):
                if count >= _MAX_BACKUP_FILES:
                    break
                try:
                    if os.path.samefile(real, found):
                        return "a backup of the store"
                except OSError:
                    continue
        return None

    def check(self, path: str | os.PathLike[str], what: str) -> None:
        """Raise :class:`~cadenza.domain.errors.Fatal` when ``path`` is private; ``what``
        names the step and the field (``"step 'x': template"``)."""
        why = self.reason(path)
        if why is not None:
            from cadenza.domain.errors import Fatal

            raise Fatal(f"{what}: {path!s} is refused: it {RULE} ({why})")


def of_settings(home: Path, settings: object) -> PrivateFiles:
    """The private files of ``home`` with its loaded ``settings`` (a ``Settings``)."""
    store_url = getattr(settings, "store_url", None)
    return PrivateFiles.of(home, store_url(home) if callable(store_url) else None)
