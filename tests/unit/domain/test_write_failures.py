"""Which errors are write failures, and of which kind: by errno and Windows code, by
SQLite's result code or words, by PostgreSQL's SQLSTATE, through causes."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from cadenza.domain.errors import (
    DiskFull,
    FileDiskFull,
    FileWriteFailed,
    ReadOnlyStorage,
    StoreError,
    StoreFull,
    StoreReadOnly,
    StoreWriteFailed,
    WriteFailed,
    file_write_failed,
    store_write_failed,
    write_failure_kind,
)


class WindowsError_(OSError):
    """An OSError as Windows raises it: its own code beside an errno."""

    def __init__(self, winerror: int) -> None:
        super().__init__(errno.EINVAL, "windows")
        self.winerror = winerror


class PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


def sqlite_error(message: str, code: int | None) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    if code is not None:
        exc.sqlite_errorcode = code
    return exc


@pytest.mark.parametrize(("exc", "kind"), [
    (OSError(errno.ENOSPC, "No space left on device"), "disk full"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk full"),
    (OSError(errno.EROFS, "Read-only file system"), "read-only"),
    (PermissionError(errno.EACCES, "Permission denied"), "permission denied"),
    (OSError(errno.EIO, "Input/output error"), "I/O error"),
    (WindowsError_(112), "disk full"),  # ERROR_DISK_FULL
    (WindowsError_(39), "disk full"),  # ERROR_HANDLE_DISK_FULL
    (WindowsError_(19), "read-only"),  # ERROR_WRITE_PROTECT
    (sqlite_error("database or disk is full", 13), "disk full"),
    (sqlite_error("attempt to write a readonly database", 8), "read-only"),
    (sqlite_error("attempt to write a readonly database", 8 | (1 << 8)), "read-only"),
    (sqlite_error("disk I/O error", 10 | (3 << 8)), "I/O error"),
    (sqlite_error("database or disk is full", None), "disk full"),  # words only
    (PgError("53100"), "disk full"),
    (PgError("25006"), "read-only"),
    (StoreFull("x"), "disk full"),
    (OSError(errno.ENOENT, "No such file or directory"), None),
    (sqlite_error("database is locked", 5), None),
    (PgError("23505"), None),
    (ValueError("database or disk is full"), None),  # not a driver's error
])
def test_kinds(exc: BaseException, kind: str | None) -> None:
    assert write_failure_kind(exc) == kind


def test_a_cause_is_followed_but_not_a_suppressed_context() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("writing failed") from inner
    except RuntimeError as outer:
        assert write_failure_kind(outer) == "disk full"
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise KeyError("unrelated") from None
    except KeyError as outer:
        assert write_failure_kind(outer) is None


def test_the_classes_of_each_kind() -> None:
    full = store_write_failed("disk full", "m", "database or disk is full")
    assert isinstance(full, StoreFull) and isinstance(full, DiskFull)
    assert isinstance(full, StoreError) and full.detail == "database or disk is full"
    assert isinstance(store_write_failed("read-only", "m"), StoreReadOnly)
    other = store_write_failed("I/O error", "m")
    assert type(other) is StoreWriteFailed and other.kind == "I/O error"
    assert isinstance(file_write_failed("read-only", "m"), ReadOnlyStorage)
    plain = file_write_failed(None, "m")
    assert type(plain) is FileWriteFailed and plain.kind == "write failed"
    assert isinstance(plain, WriteFailed)


def test_a_file_write_failure_is_still_an_oserror_with_its_errno() -> None:
    failed = file_write_failed("disk full", "secret 'a' was not stored: disk full: No space "
                               "left on device", "No space left on device", errno.ENOSPC)
    assert isinstance(failed, FileDiskFull) and isinstance(failed, DiskFull)
    assert isinstance(failed, OSError) and failed.errno == errno.ENOSPC
    assert str(failed) == "secret 'a' was not stored: disk full: No space left on device"
    assert write_failure_kind(failed) == "disk full"
