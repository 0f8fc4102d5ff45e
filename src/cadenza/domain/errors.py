"""Cadenza's exceptions, as one tree.

::

    CadenzaError
     ├── ConfigError            a config file is unreadable or invalid (has every problem)
     ├── StaleConfigError       a config write was based on a version that changed on disk
     ├── InvalidTransition      a state change the transition tables do not allow
     ├── StoreError             the store cannot be opened or used
     │    ├── UnsafeStoreLocation  SQLite data dir on a network file system
     │    ├── StaleEpoch        a write refused: the lease epoch moved on (fencing)
     │    └── StoreWriteFailed  the store could not record a change (also a WriteFailed)
     │         ├── StoreFull    ... because its disk is full (also a DiskFull)
     │         └── StoreReadOnly  ... because it is read-only (also a ReadOnlyStorage)
     ├── WriteFailed            a write to a file or to the store did not happen
     │    ├── DiskFull          the disk (or a quota) is full
     │    ├── ReadOnlyStorage   the file system or the database is read-only
     │    └── FileWriteFailed   a file was not written (also an OSError, with its errno)
     │         ├── FileDiskFull    (also a DiskFull)
     │         └── FileReadOnly    (also a ReadOnlyStorage)
     ├── SecretError            a secret is missing, or the key file is unusable
     └── StepError              raised by steps; the class decides what happens next
          ├── Retryable         try again after the retry policy's backoff
          ├── Deferred          wait until ``until``, then retry without spending an attempt
          ├── Fatal             the run fails at once
          └── ResourceFault     the leased resource is faulty; retry on another one

Every class's docstring is its default message.
"""

from __future__ import annotations

import errno
from datetime import datetime


class CadenzaError(Exception):
    """Cadenza failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip().splitlines()[0])


class ConfigError(CadenzaError):
    """The configuration is invalid."""

    def __init__(self, problems: list[object], message: str | None = None) -> None:
        self.problems = problems
        super().__init__(message or "\n".join(str(p) for p in problems) or None)


class StaleConfigError(CadenzaError):
    """The file changed on disk since it was read; reload it and apply the change again."""


class InvalidTransition(CadenzaError):
    """This state change is not allowed."""

    def __init__(self, machine: str, frm: str | None, to: str) -> None:
        self.machine, self.frm, self.to = machine, frm, to
        super().__init__(f"{machine}: transition {frm or '(new)'} -> {to} is not allowed")


class StoreError(CadenzaError):
    """The store cannot be used."""


class StoreConflict(StoreError):
    """A write transaction the database rolled back because it conflicted with another one
    (PostgreSQL: a deadlock, a serialization failure, a lock wait past ``lock_timeout``).
    Nothing of it was applied, so it may be written again."""


class StoreOutcomeUnknown(StoreError):
    """The connection was lost while a write transaction's COMMIT was on its way: the
    database may have applied it or not, and the writer cannot tell which."""


class LeadershipLost(StoreError):
    """A write made as the scheduler's leader was refused: this node's term ended or another
    node took the role (its lease ran out while this node was stopped, slow or cut off)."""


class UnsafeStoreLocation(StoreError):
    """SQLite needs a local file system; this data directory is on a network file system."""


class StaleEpoch(StoreError):
    """The change was refused: the lease epoch moved on (another holder took over)."""


class WriteFailed(CadenzaError):
    """A write did not happen: the disk is full, read-only, or refused it.

    ``kind`` is one of :data:`WRITE_FAILURE_KINDS` (``"write failed"`` when the cause is
    another one); ``detail`` the operating system's or the database's own words."""

    kind = "write failed"

    def __init__(self, message: str | None = None, *, kind: str | None = None,
                 detail: str = "") -> None:
        if kind is not None:
            self.kind = kind
        self.detail = detail
        super().__init__(message)


class DiskFull(WriteFailed):
    """The disk is full."""

    kind = "disk full"


class ReadOnlyStorage(WriteFailed):
    """The file system or the database is read-only."""

    kind = "read-only"


class StoreWriteFailed(StoreError, WriteFailed):
    """The store could not record a change; nothing of that change was written."""


class StoreFull(StoreWriteFailed, DiskFull):
    """The store could not record a change: its disk is full."""

    kind = "disk full"


class StoreReadOnly(StoreWriteFailed, ReadOnlyStorage):
    """The store could not record a change: it is read-only."""

    kind = "read-only"


class FileWriteFailed(WriteFailed, OSError):
    """A file was not written. Also an :class:`OSError` carrying the system's ``errno``,
    so that a caller that catches OSError around a file write still does."""


class FileDiskFull(FileWriteFailed, DiskFull):
    """A file was not written: the disk is full."""

    kind = "disk full"


class FileReadOnly(FileWriteFailed, ReadOnlyStorage):
    """A file was not written: the file system is read-only."""

    kind = "read-only"


DISK_FULL = "disk full"
READ_ONLY = "read-only"
NO_PERMISSION = "permission denied"
IO_ERROR = "I/O error"
WRITE_FAILURE_KINDS = (DISK_FULL, READ_ONLY, NO_PERMISSION, IO_ERROR)
"""The causes of a write failure that :func:`write_failure_kind` recognises."""

# Windows' own codes (OSError.winerror), for the errors Python does not map to an errno.
_WIN_DISK_FULL = {112, 39}  # ERROR_DISK_FULL, ERROR_HANDLE_DISK_FULL
_WIN_READ_ONLY = {19}  # ERROR_WRITE_PROTECT
_WIN_NO_PERMISSION = {5}  # ERROR_ACCESS_DENIED
_ERRNO_KINDS = {
    errno.ENOSPC: DISK_FULL,
    getattr(errno, "EDQUOT", -1): DISK_FULL,
    errno.EROFS: READ_ONLY,
    errno.EACCES: NO_PERMISSION,
    errno.EPERM: NO_PERMISSION,
    errno.EIO: IO_ERROR,
}
# SQLite's primary result codes (the low byte of an extended code).
_SQLITE_KINDS = {13: DISK_FULL, 8: READ_ONLY, 3: NO_PERMISSION, 10: IO_ERROR}
# SQLite's messages, for a driver that does not give the code.
_SQLITE_TEXTS = (("database or disk is full", DISK_FULL), ("readonly database", READ_ONLY),
                 ("disk i/o error", IO_ERROR))
# PostgreSQL's SQLSTATEs: disk_full, read_only_sql_transaction, io_error,
# insufficient_privilege.
_SQLSTATE_KINDS = {"53100": DISK_FULL, "25006": READ_ONLY, "58030": IO_ERROR,
                   "42501": NO_PERMISSION}


def write_failure_kind(exc: BaseException | None) -> str | None:
    """What made a write fail, as one of :data:`WRITE_FAILURE_KINDS`, or None when
    ``exc`` (or what caused it: ``__cause__``, ``__context__``, a database driver's
    ``orig``) is not a write failure: an ``OSError`` by its errno or Windows code, a
    SQLite error by its result code or message, a PostgreSQL error by its SQLSTATE, a
    :class:`WriteFailed` by its kind."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        kind = _own_kind(exc)
        if kind is not None:
            return kind
        orig = getattr(exc, "orig", None)
        if isinstance(orig, BaseException):
            kind = _own_kind(orig)
            if kind is not None:
                return kind
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return None


def _own_kind(exc: BaseException) -> str | None:
    if isinstance(exc, WriteFailed):
        return exc.kind if exc.kind in WRITE_FAILURE_KINDS else None
    if isinstance(exc, OSError):
        winerror = getattr(exc, "winerror", None)
        if winerror in _WIN_DISK_FULL:
            return DISK_FULL
        if winerror in _WIN_READ_ONLY:
            return READ_ONLY
        if winerror in _WIN_NO_PERMISSION:
            return NO_PERMISSION
        return _ERRNO_KINDS.get(exc.errno) if exc.errno is not None else None
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _SQLITE_KINDS:
        return _SQLITE_KINDS[code & 0xFF]
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate in _SQLSTATE_KINDS:
        return _SQLSTATE_KINDS[sqlstate]
    if type(exc).__module__.startswith("sqlite3"):
        text = str(exc).lower()
        return next((kind for words, kind in _SQLITE_TEXTS if words in text), None)
    return None


def store_write_failed(kind: str | None, message: str, detail: str = "") -> StoreWriteFailed:
    """The store's error for a write that failed for ``kind`` (see
    :func:`write_failure_kind`): StoreFull, StoreReadOnly, or StoreWriteFailed."""
    if kind == DISK_FULL:
        return StoreFull(message, detail=detail)
    if kind == READ_ONLY:
        return StoreReadOnly(message, detail=detail)
    return StoreWriteFailed(message, kind=kind or WriteFailed.kind, detail=detail)


def file_write_failed(kind: str | None, message: str, detail: str = "",
                      errno_: int | None = None) -> FileWriteFailed:
    """The error for a file write that failed for ``kind`` with the system's ``errno_``:
    FileDiskFull, FileReadOnly, or FileWriteFailed."""
    failed: FileWriteFailed
    if kind == DISK_FULL:
        failed = FileDiskFull(message, detail=detail)
    elif kind == READ_ONLY:
        failed = FileReadOnly(message, detail=detail)
    else:
        failed = FileWriteFailed(message, kind=kind or WriteFailed.kind, detail=detail)
    failed.errno = errno_  # not strerror: OSError's str() would then drop the message
    return failed


class SecretError(CadenzaError):
    """A secret is missing or cannot be decrypted."""


class StepError(CadenzaError):
    """A step failed."""


class Retryable(StepError):
    """A transient failure: the step is tried again after the retry policy's backoff."""


class Deferred(StepError):
    """Not now: the step is tried again later without spending an attempt."""

    def __init__(self, until: datetime | None = None, message: str | None = None) -> None:
        self.until = until
        super().__init__(message)


class Fatal(StepError):
    """A permanent failure: the run fails at once."""


class ResourceFault(StepError):
    """The leased resource is at fault: it is marked FAULT and the run tries another one.

    ``resource_id`` names the member at fault (a route whose proxy refused); without it,
    every route the step used is taken to be at fault."""

    def __init__(self, message: str | None = None, *, resource_id: str | None = None) -> None:
        self.resource_id = resource_id
        super().__init__(message)
