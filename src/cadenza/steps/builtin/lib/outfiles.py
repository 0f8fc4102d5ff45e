"""Files that steps write (``file_export``, ``report``): where they go inside
``[files].roots`` and how they are written so that no partial file is ever seen at the path.

Where: the path is checked as text by :func:`cadenza.steps.builtin.lib.files.clean` (no ``..``, NUL,
control or percent-encoded characters, Unicode lookalikes, UNC paths...), may not be a
glob, and must name a file inside a root:

- an absolute path must lie inside one of the roots;
- a relative path goes under the first root whose directory for it exists already, else
  under the first root (its missing directories are made);
- the directory is resolved (symbolic links followed) and must still be inside that root;
  an existing entry at the path must be a regular file (not a directory, a link or a
  device).

How (:class:`AtomicFile`): the content goes to a hidden temporary file in the same
directory (``.NAME.<random>.cadenza-part``), is flushed and fsynced, then renamed onto the
path in one step (``os.replace``, atomic on POSIX and on Windows for the same volume), and
the directory is fsynced (POSIX). A step killed midway (kill -9, power loss) leaves at most
a temporary file, never a half-written file at the path; the next write to the same path
removes temporaries of it that have not changed for :data:`STALE_PART` (a live writer
touches its own continuously). Without ``overwrite`` an existing file is an error naming
it, checked before the work and again at the rename, which then never replaces a file
that appeared meanwhile (a hard link, or Windows' rename, refuses an existing name).
"""

from __future__ import annotations

import os
import re
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import TracebackType
from typing import Any, BinaryIO

from cadenza.domain.errors import Fatal, Retryable
from cadenza.private_files import PrivateFiles
from cadenza.steps.builtin.lib import files

PART_SUFFIX = ".cadenza-part"
STALE_PART = timedelta(hours=1)
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Target:
    """Where a step writes: the final path (absolute, its directory resolved), the root it
    lies in, and how it is shown (relative to the root, with ``/``)."""

    path: Path
    root: Path
    display: str


def _refuse(path: str, why: str) -> Fatal:
    return Fatal(f"output path {path!r} refused: {why} (paths must stay inside "
                 "[files].roots)")


def target(path: str, roots: list[Path], private: PrivateFiles | None = None,
           what: str = "path") -> Target:
    """The checked place of ``path`` (see the module docstring), its directory made; a
    place that is one of ``private`` is refused (``what`` names the step and field)."""
    text = files.clean(path)
    if path.replace("\\", "/").rstrip().endswith("/"):
        raise _refuse(path, "it names a directory; it names no file")
    if _GLOB.search(text):
        raise _refuse(path, "an output path cannot hold the glob characters * ? [")
    if not roots:
        raise _refuse(path, "no [files].roots are configured")
    root, relative = _place(text, roots, path)
    parts = relative.split("/")
    if not relative or not parts[-1]:
        raise _refuse(path, "it names no file")
    directory = root.joinpath(*parts[:-1])
    if not directory.exists():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise Fatal(f"cannot make the directory of {path!r}: {exc.strerror or exc}") from None
    real = directory.resolve(strict=True)
    if not real.is_relative_to(root):
        raise _refuse(path, "its directory resolves outside its root (a symbolic link?)")
    if not real.is_dir():
        raise _refuse(path, f"{'/'.join(parts[:-1])!r} is not a directory")
    final = real / parts[-1]
    if private is not None:
        private.check(final, what)
    try:
        mode = os.lstat(final).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise _refuse(path, "something that is not a regular file (a directory, a link...) "
                            "is at that path")
    return Target(final, root, final.relative_to(root).as_posix())


def _place(text: str, roots: list[Path], path: str) -> tuple[Path, str]:
    drive = re.match(r"[A-Za-z]:/", text)
    if not (text.startswith("/") or drive):
        for root in roots:
            parent = text.rpartition("/")[0]
            if not parent or (root / parent).is_dir():
                return root, text
        return roots[0], text
    pure = PureWindowsPath(text) if drive else PurePosixPath(text)
    for root in roots:
        base = PureWindowsPath(root) if drive else PurePosixPath(root.as_posix())
        try:
            return root, pure.relative_to(base).as_posix()
        except ValueError:
            continue
    raise _refuse(path, "the absolute path is outside every root")


def refuse_existing(place: Target) -> None:
    """:class:`Fatal` naming the path when a file is there already (``overwrite = false``)."""
    if os.path.lexists(place.path):
        raise Fatal(f"{place.display!r} exists already (in {place.root}); set overwrite = "
                    "true to replace it")


class AtomicFile:
    """A temporary file next to ``place`` that becomes ``place`` on :meth:`commit` (see
    the module docstring); removed if the block ends without a commit."""

    def __init__(self, place: Target, overwrite: bool, now: datetime) -> None:
        self.place, self.overwrite = place, overwrite
        _remove_stale(place, now)
        self.part = place.path.with_name(f".{place.path.name}.{uuid.uuid4().hex[:12]}"
                                         f"{PART_SUFFIX}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(self.part, flags, 0o666)
        except OSError as exc:
            raise os_error(exc, f"cannot create a temporary file next to {place.display!r}"
                            ) from None
        self.fh: BinaryIO = os.fdopen(fd, "wb")
        self.committed = False
        self.sealed: os.stat_result | None = None

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self.committed:
            self.discard()

    def discard(self) -> None:
        """Close and remove the temporary file (nothing appears at the path)."""
        if not self.fh.closed:
            try:
                self.fh.close()
            except OSError:
                pass  # its buffer could not be written (a full disk): the file goes anyway
        try:
            os.unlink(self.part)
        except FileNotFoundError:
            pass
        except OSError:
            return  # best effort: a leftover temporary is removed by a later write

    def seal(self) -> os.stat_result:
        """Flush and fsync the temporary file; its ``stat`` (size, and the device and inode
        that the path will have once renamed)."""
        if self.sealed is not None:
            return self.sealed
        try:
            if not self.fh.closed:
                self.fh.flush()
                os.fsync(self.fh.fileno())
                self.fh.close()
            else:  # a writer closed it: sync through a new handle
                fd = os.open(self.part, os.O_RDWR | getattr(os, "O_BINARY", 0))
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self.sealed = os.stat(self.part)
            return self.sealed
        except OSError as exc:
            raise os_error(exc, f"cannot write {self.place.display!r}") from None

    def commit(self) -> int:
        """Seal the file (:meth:`seal`) and rename it onto the path; its size in bytes."""
        size = self.seal().st_size
        try:
            if self.overwrite:
                os.replace(self.part, self.place.path)
            else:
                self._no_clobber()
        except Fatal:
            raise
        except OSError as exc:
            raise os_error(exc, f"cannot write {self.place.display!r}") from None
        self.committed = True
        _sync_directory(self.place.path.parent)
        return size


    def _no_clobber(self) -> None:
        if os.name == "nt":
            try:
                os.rename(self.part, self.place.path)  # Windows: never replaces a file
            except FileExistsError:
                refuse_existing(self.place)
                raise
            return
        try:
            os.link(self.part, self.place.path)  # fails if the name exists: no race
        except FileExistsError:
            refuse_existing(self.place)
            raise
        except OSError:
            # a file system without hard links: check, then rename (a narrow race, said so
            # in docs/steps.md)
            refuse_existing(self.place)
            os.replace(self.part, self.place.path)
            return
        os.unlink(self.part)


def same_file(place: Target, sealed: dict[str, Any]) -> bool:
    """Whether the file at ``place`` is the one described by :func:`identity` (a file this
    step renamed there: a rename keeps device, inode, size and modification time)."""
    try:
        info = os.lstat(place.path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and identity(info) == sealed


def identity(info: os.stat_result) -> dict[str, Any]:
    """What tells a file apart (JSON-able): device, inode, size, modification time."""
    return {"device": info.st_dev, "inode": info.st_ino, "size": info.st_size,
            "mtime_ns": info.st_mtime_ns}


def os_error(exc: OSError, what: str) -> Fatal | Retryable:
    """An error of the file system as a step error: a full disk or a file held open by
    another program (Windows) may pass (retryable); permissions, read-only file systems and
    missing directories do not (fatal)."""
    import errno

    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EBUSY, errno.EAGAIN) or (
            os.name == "nt" and isinstance(exc, PermissionError)):
        return Retryable(f"{what}: {reason}")
    return Fatal(f"{what}: {reason}")


@contextmanager
def file_errors(what: str) -> Iterator[None]:
    """Turn the file system's errors in the block into step errors (:func:`os_error`)."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, what) from None


def _sync_directory(directory: Path) -> None:
    """fsync the directory so that the rename survives a power loss (POSIX; Windows has
    no directory handles to sync, and NTFS journals the rename)."""
    if os.name == "nt":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename is done
    finally:
        os.close(fd)


def _remove_stale(place: Target, now: datetime) -> None:
    """Remove temporaries of ``place`` left by killed writers (unchanged for a while)."""
    prefix = f".{place.path.name}."
    try:
        entries = list(os.scandir(place.path.parent))
    except OSError:
        return
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(PART_SUFFIX)):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            changed = datetime.fromtimestamp(info.st_mtime, tz=now.tzinfo)
            if stat.S_ISREG(info.st_mode) and now - changed > STALE_PART:
                os.unlink(entry.path)
        except OSError:
            continue
