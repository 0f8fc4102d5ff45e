"""File paths of file steps, resolved inside ``[files].roots`` (docs/configuration.md),
opened safely, checked (checksums, zip bombs) and recorded once loaded (``cadenza_loaded_files``).

A path (already rendered by the executor) is checked as text first, then on disk:

- refused as text: NUL and other control characters, percent-encoded characters (``%2e``,
  ``%252e``...: nothing decodes them, so they only ever serve to trick a check), ``..``
  segments (also after Unicode NFKC normalisation, which turns lookalikes such as
  ``．．`` or ``‥`` into dots), and on Windows reserved device names and ``:`` streams;
- backslashes are separators on every OS;
- a relative path (or glob) is looked up under each root in order; the first root where it
  matches something is used; an absolute path must lie inside a root;
- every match is resolved (symlinks followed) and must still be inside that root and be a
  regular file, else the whole step is refused;
- :func:`open_checked` opens with ``O_NOFOLLOW`` where the OS has it, then checks that the
  opened file is the one that was checked (same device and inode) and, where the OS says
  (``/proc/self/fd``), that its real path is inside the root.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import re
import stat
import unicodedata
import zipfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import BinaryIO
from urllib.parse import unquote

import sqlalchemy as sa

from cadenza.clock import SystemClock
from cadenza.domain.errors import Fatal
from cadenza.private_files import PrivateFiles

MAX_MATCHES = 10_000
#: xlsx limits: total uncompressed size, compression ratio of big members, members
XLSX_MAX_BYTES = 1 << 30
XLSX_MAX_RATIO = 100
XLSX_MAX_MEMBERS = 10_000
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_GLOB = re.compile(r"[*?\[]")
_WINDOWS_RESERVED = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(\..*)?", re.I)
#: files loaded into a table, kept in the target database by ``skip_if_loaded``
LOADED = sa.Table(
    "cadenza_loaded_files", sa.MetaData(),
    sa.Column("table_name", sa.String(255), primary_key=True),
    sa.Column("checksum", sa.String(64), primary_key=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("loaded_at", sa.DateTime(timezone=True), nullable=False),
    mysql_charset="utf8mb4",
)


@dataclass(frozen=True)
class FoundFile:
    """One file to read: its resolved path, its root, and how it is shown (relative to the
    root, with ``/``)."""

    path: Path
    root: Path
    display: str


def _refuse(path: str, why: str) -> Fatal:
    return Fatal(f"file path {path!r} refused: {why} (paths must stay inside [files].roots)")


def clean(path: str) -> str:
    """The path with ``/`` separators and no empty or ``.`` segments, or :class:`Fatal`."""
    if "\x00" in path:
        raise _refuse(path, "it contains a NUL byte")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        raise _refuse(path, "it contains control characters")
    if _PERCENT.search(path):
        decoded = path
        while _PERCENT.search(decoded) and unquote(decoded) != decoded:
            decoded = unquote(decoded)
        raise _refuse(path, f"percent-encoded characters are not allowed (it decodes to "
                            f"{decoded!r})")
    text = path.replace("\\", "/")
    folded = unicodedata.normalize("NFKC", text).replace("\\", "/")
    for candidate in (text, folded):
        if ".." in candidate.split("/"):
            raise _refuse(path, "'..' segments are not allowed"
                          + ("" if candidate is text else " (after Unicode normalisation)"))
    if folded.count("/") != text.count("/"):
        raise _refuse(path, "it contains characters that look like '/'")
    if os.name == "nt":
        for part in text.split("/")[1:] if _drive(text) else text.split("/"):
            if ":" in part or _WINDOWS_RESERVED.fullmatch(part.rstrip(" .")):
                raise _refuse(path, f"{part!r} is a reserved name or a stream on Windows")
    if text.startswith("//"):
        raise _refuse(path, "network (UNC) paths are not allowed")
    drive = _drive(text)
    parts = [p for p in text.split("/") if p not in ("", ".")][1 if drive else 0:]
    if not parts:
        raise _refuse(path, "it names no file")
    if drive or text.startswith("/"):
        return f"{drive or ''}/" + "/".join(parts)
    return "/".join(parts)


def _drive(text: str) -> str | None:
    match = re.match(r"[A-Za-z]:", text)
    if match is None:
        return None
    if not text[2:3] == "/":
        raise _refuse(text, "drive-relative paths like 'C:file' are not allowed")
    return match.group(0)


def _relative_to_root(text: str, roots: list[Path]) -> list[tuple[Path, str]]:
    """(root, relative pattern) pairs to try, in order."""
    if not (text.startswith("/") or _drive(text)):
        return [(root, text) for root in roots]
    pure = PureWindowsPath(text) if _drive(text) else PurePosixPath(text)
    for root in roots:
        try:
            relative = pure.relative_to(PureWindowsPath(root) if _drive(text) else
                                        PurePosixPath(root.as_posix()))
        except ValueError:
            continue
        return [(root, relative.as_posix())]
    raise _refuse(text, "the absolute path is outside every root")


def find(path: str, roots: list[Path], private: PrivateFiles | None = None,
         what: str = "path") -> list[FoundFile]:
    """The files that ``path`` (a path or glob) names, sorted; empty when none exists.
    Anything that resolves outside its root, or is not a regular file, refuses the step,
    and so does a match that is one of ``private`` (``what`` names the step and field)."""
    text = clean(path)
    for root, relative in _relative_to_root(text, roots):
        if _GLOB.search(relative):
            candidates = sorted(root.glob(relative))
        else:
            candidate = root / relative
            candidates = [candidate] if os.path.lexists(candidate) else []
        found: list[FoundFile] = []
        for candidate in candidates:
            if len(found) >= MAX_MATCHES:
                raise Fatal(f"{path!r} matches more than {MAX_MATCHES} files")
            checked = _check(candidate, root, path)
            if checked is not None:
                if private is not None:
                    private.check(checked.path, what)
                found.append(checked)
        if found:
            return found
    return []


def _check(candidate: Path, root: Path, path: str) -> FoundFile | None:
    display = candidate.relative_to(root).as_posix()
    try:
        real = candidate.resolve(strict=True)
    except FileNotFoundError:
        raise _refuse(path, f"{display!r} is a link to a missing file") from None
    except (OSError, RuntimeError) as exc:
        raise _refuse(path, f"{display!r} cannot be resolved ({exc})") from None
    if not real.is_relative_to(root):
        raise _refuse(path, f"{display!r} resolves outside its root (a symbolic link?)")
    try:
        mode = real.stat().st_mode
    except PermissionError:
        raise Fatal(f"permission denied reading {display!r}") from None
    if stat.S_ISDIR(mode):
        return None  # a glob matched a directory: not a file to load
    if not stat.S_ISREG(mode):
        raise _refuse(path, f"{display!r} is not a regular file")
    return FoundFile(real, root, display)


def open_checked(found: FoundFile) -> BinaryIO:
    """Open a found file for reading, refusing it if it was swapped since :func:`find`."""
    flags = (os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_NONBLOCK", 0))
    try:
        fd = os.open(found.path, flags)
    except PermissionError:
        raise Fatal(f"permission denied reading {found.display!r}") from None
    except FileNotFoundError:
        raise Fatal(f"file {found.display!r} is missing (removed while the step ran)") from None
    except OSError as exc:
        raise Fatal(f"file {found.display!r} changed while it was opened ({exc})") from None
    try:
        opened = os.fstat(fd)
        checked = os.stat(found.path)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (
                checked.st_dev, checked.st_ino):
            raise Fatal(f"file {found.display!r} changed while it was opened")
        proc = Path(f"/proc/self/fd/{fd}")
        if proc.is_symlink() and not Path(os.readlink(proc)).is_relative_to(found.root):
            raise Fatal(f"file {found.display!r} resolves outside its root once opened")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def digest(fh: BinaryIO) -> str:
    """The SHA-256 of an open file's content (hex), read in chunks."""
    sha = hashlib.sha256()
    while chunk := fh.read(1 << 20):
        sha.update(chunk)
    return sha.hexdigest()


def recorded(conn: sa.Connection, table: str) -> set[str] | None:
    """The checksums recorded as loaded into ``table`` (None: no record table yet)."""
    if not sa.inspect(conn).has_table(LOADED.name):
        return None
    query = sa.select(LOADED.c.checksum).where(LOADED.c.table_name == table)
    return {str(c) for c in conn.execute(query).scalars()}


def record(conn: sa.Connection, table: str, loaded: list[tuple[FoundFile, str]],
           replace: bool, now: datetime | None = None) -> None:
    """Record files as loaded into ``table`` at ``now`` (the step's clock; default: the
    system clock's) (``replace``: instead of what was recorded)."""
    now = now if now is not None else SystemClock().now()
    if replace:
        conn.execute(sa.delete(LOADED).where(LOADED.c.table_name == table))
    conn.execute(LOADED.insert(), [{"table_name": table, "checksum": c, "path": f.display,
                                    "loaded_at": now} for f, c in loaded])


def count_char(fh: BinaryIO, char: str, encoding: str) -> int:
    """How many times ``char`` occurs in the file's text (on the bytes when the encoding
    writes it as one ASCII byte, as UTF-8 and Latin-1 do). Leaves ``fh`` at its end."""
    fh.seek(0)
    count = 0
    if char.isascii() and f"a{char}\n".encode(encoding) == f"a{char}\n".encode("ascii"):
        needle = char.encode("ascii")
        while block := fh.read(1 << 20):
            count += block.count(needle)
        return count
    text = io.TextIOWrapper(fh, encoding=encoding, newline="", errors="replace")
    while chunk := text.read(1 << 20):
        count += chunk.count(char)
    text.detach()
    return count


def undecodable_line(fh: BinaryIO, encoding: str) -> int:
    """The (physical) line holding the first bytes that ``encoding`` cannot decode (0 when
    every byte decodes)."""
    fh.seek(0)
    decoder = codecs.getincrementaldecoder(encoding)()
    for number, raw in enumerate(iter(lambda: fh.readline(1 << 20), b""), 1):
        try:
            decoder.decode(raw)
        except UnicodeError:
            return number
    return 0


def choose(sums: list[tuple[FoundFile, str]], recorded: set[str], skip: bool,
           overwrite: bool) -> tuple[list[tuple[FoundFile, str]], list[dict[str, str]]]:
    """Which of the (file, checksum) pairs to load, and the skipped ones with a reason.

    With ``skip`` (``skip_if_loaded``): a file with the same content as an earlier one is
    skipped, and so is a file whose checksum is ``recorded`` for the table; on overwrite
    the files are skipped only all together, when the table holds exactly them already."""
    todo: list[tuple[FoundFile, str]] = []
    skipped: list[dict[str, str]] = []
    first_of: dict[str, str] = {}
    for item, checksum in sums:
        if skip and checksum in first_of:
            skipped.append({"path": item.display, "checksum": checksum,
                            "reason": f"same content as {first_of[checksum]}"})
            continue
        first_of.setdefault(checksum, item.display)
        todo.append((item, checksum))
    done = {c for _, c in todo} & recorded if skip else set()
    if overwrite and done != {c for _, c in todo}:
        done = set()  # the table must end up holding all of them
    skipped += [{"path": f.display, "checksum": c, "reason": "already loaded"}
                for f, c in todo if c in done]
    return [(f, c) for f, c in todo if c not in done], skipped


def check_zip(fh: BinaryIO, display: str) -> None:
    """Refuse an xlsx (zip) archive whose declared sizes make it a zip bomb: more than
    :data:`XLSX_MAX_BYTES` uncompressed, a member over 1 MiB expanding more than
    :data:`XLSX_MAX_RATIO` times, or more than :data:`XLSX_MAX_MEMBERS` members. (Python's
    zipfile never inflates a member past its declared size.) Leaves ``fh`` at 0."""
    try:
        with zipfile.ZipFile(fh) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise Fatal(f"{display}: not an xlsx file ({exc})") from None
    if len(members) > XLSX_MAX_MEMBERS:
        raise Fatal(f"{display}: refused: {len(members)} archive members (zip bomb?)")
    total = 0
    for info in members:
        total += info.file_size
        if info.file_size > 1 << 20 and info.file_size > XLSX_MAX_RATIO * max(
                info.compress_size, 1):
            raise Fatal(f"{display}: refused: {info.filename} expands {info.compress_size} "
                        f"bytes to {info.file_size} (zip bomb?)")
    if total > XLSX_MAX_BYTES:
        raise Fatal(f"{display}: refused: {total} bytes uncompressed, more than "
                    f"{XLSX_MAX_BYTES} (zip bomb?)")
    fh.seek(0)
