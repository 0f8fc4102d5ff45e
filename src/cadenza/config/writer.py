"""Writing a configuration file safely: validate, refuse stale saves, replace atomically.

The sequence of :func:`write_document`:

1. validate the new text (``validate``); any error → :class:`ConfigError`, nothing written;
2. compare the file's current sha256 with ``base_hash`` (what the editor read); a
   difference → :class:`StaleConfigError`, nothing written;
3. write a temporary file in the same directory, flush and fsync it, give it the old
   file's permission bits, ``os.replace`` it over the file, then fsync the directory.

A crash at any point leaves either the old file or the new one, never a mix. Steps 2-3
hold a per-file lock, so two saves from one process cannot interleave. The file's line
endings (CRLF or LF) and UTF-8 byte order mark are kept. Comments and order are kept by
editing the tomlkit document (:func:`set_job`, :func:`delete_job`, :func:`set_preset`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import tomlkit
from tomlkit.exceptions import ParseError
from tomlkit.toml_document import TOMLDocument

from cadenza.clock import Clock, SystemClock
from cadenza.config.problems import Problem, has_errors
from cadenza.config.reader import BOM, decode
from cadenza.config.tomlbody import kept_spacing
from cadenza.config.tomledit import delete_job, set_job, set_preset
from cadenza.domain.errors import ConfigError, StaleConfigError

__all__ = [
    "delete_job",
    "file_hash",
    "read_document",
    "set_job",
    "set_preset",
    "write_document",
]

Validator = Callable[[str], list[Problem]]

_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()
_REPLACE_TRIES = 10


def file_hash(data: bytes) -> str:
    """The sha256 (hex) of a file's bytes: the ``base_hash`` of later writes."""
    return hashlib.sha256(data).hexdigest()


def read_document(path: Path) -> tuple[TOMLDocument, str]:
    """Parse ``path`` with tomlkit; return the document and the hash of the bytes read.

    Raises :class:`ConfigError` (one located problem) when the file is missing, not
    UTF-8, too big or not TOML.
    """
    path = Path(path)
    name = path.name
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([Problem(name, 1, 1, f"file not found: {path}")]) from None
    text, problem = decode(raw, name)
    if text is None:
        raise ConfigError([problem or Problem(name, 1, 1, "unreadable file")])
    try:
        doc = tomlkit.parse(text)
    except ParseError as exc:
        message = str(exc).split(" at line ")[0]
        raise ConfigError([Problem(name, exc.line, exc.col, f"syntax error: {message}")]) \
            from None
    return doc, file_hash(raw)


def write_document(path: Path, content: str | TOMLDocument, *, base_hash: str | None,
                   validate: Validator | None = None, clock: Clock | None = None) -> str:
    """Validate ``content`` and write it to ``path`` atomically; return the new hash.

    ``base_hash`` is the hash returned by :func:`read_document` (or an earlier write);
    when the file changed since, :class:`StaleConfigError` is raised. ``None`` skips the
    check (creating a file). ``validate(text)`` returns the problems of the new text;
    any error raises :class:`ConfigError` and leaves the file untouched. ``clock`` paces
    the retries of a replace that Windows refuses while another program holds the file.
    """
    path = Path(path)
    text = content if isinstance(content, str) else rendered(path, content)
    if validate is not None:
        problems = validate(text)
        if has_errors(problems):
            raise ConfigError([*problems])
    with _lock_for(path):
        try:
            current: bytes | None = path.read_bytes()
        except FileNotFoundError:
            current = None
        if base_hash is not None and (current is None or file_hash(current) != base_hash):
            raise StaleConfigError(f"{path.name} changed on disk since it was read; reload "
                                   "it and apply the change again")
        data = _encode(text, current)
        _atomic_write(path, data, clock or SystemClock())
    return file_hash(data)


def rendered(path: Path, doc: TOMLDocument) -> str:
    """``doc`` (read from ``path``, then changed) as text, with the lines tomlkit rewrote
    on its own given back as the file ``path`` has them
    (:func:`~cadenza.config.tomlbody.kept_spacing`)."""
    text = doc.as_string()
    try:
        original, _ = decode(path.read_bytes(), path.name)
    except FileNotFoundError:
        return text
    return text if original is None else kept_spacing(original, text)


def _encode(text: str, current: bytes | None) -> bytes:
    """``text`` as bytes in the style of the current file (CRLF, byte order mark): the
    lines an edit adds (``\n``) or a browser posts (``\r\n``) end like the file's."""
    if current is not None and b"\r\n" in current:
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    elif current is not None:
        text = text.replace("\r\n", "\n")
    if current is not None and current.startswith(BOM.encode()) and not text.startswith(BOM):
        text = BOM + text
    return text.encode("utf-8")


def _lock_for(path: Path) -> threading.Lock:
    key = path.resolve()
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


def _atomic_write(path: Path, data: bytes, clock: Clock) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        _replace(tmp, path, clock)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_directory(path.parent)


def _replace(source: Path, target: Path, clock: Clock) -> None:
    """``os.replace``, retried briefly when Windows reports the target in use (an editor or
    a virus scanner holding it open); POSIX never raises that here."""
    for attempt in range(_REPLACE_TRIES):
        try:
            os.replace(source, target)
            return
        except PermissionError:
            if attempt == _REPLACE_TRIES - 1:
                raise
            clock.sleep(0.05 * (attempt + 1))


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable. POSIX: fsync the directory. Windows: a directory cannot be
    opened for fsync; NTFS journals the rename itself, so there is nothing to do."""
    if os.name == "nt":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on directories
            os.fsync(fd)
    finally:
        os.close(fd)
