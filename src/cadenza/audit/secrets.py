"""Encrypted secret storage: ``data/secrets.json`` sealed with the key in ``data/secret.key``.

Each value is encrypted with AES-256-GCM under a fresh 12-byte random nonce, with the secret's
name as associated data, so a ciphertext moved to another name does not decrypt. The key is 32
random bytes, created on the first :meth:`SecretStore.set`, written base64-encoded in
``data/secret.key`` with mode 0600; the store refuses a key file that group or others can
read. ``secrets.json`` holds no plaintext and is replaced atomically (temp file, fsync,
``os.replace``). Writers take a lock file (``data/secrets.lock``) so that two processes
setting secrets at once do not lose one another's change. A write that fails (a full or
read-only disk) raises :class:`~cadenza.domain.errors.WriteFailed` and leaves
``secrets.json`` as it was.

On Windows, POSIX modes do not exist: the files get the access rules inherited from the data
directory, and the mode check is skipped (see ``docs/security.md``).

A value holds at most :data:`MAX_SECRET_BYTES` (64 KiB of UTF-8): every text a run writes is
searched for every secret, so a larger one is refused by :meth:`SecretStore.set`, and one
stored before the limit existed is refused by :meth:`SecretStore.get` (a configuration
that uses it does not load) and left out of :meth:`SecretStore.values` (nothing can use it).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import secrets as _random
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from cadenza.clock import Clock, SystemClock
from cadenza.domain.errors import (
    DISK_FULL,
    NO_PERMISSION,
    READ_ONLY,
    SecretError,
    file_write_failed,
    write_failure_kind,
)

NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
KEY_BYTES = 32
NONCE_BYTES = 12
FORMAT_VERSION = 1
_POSIX = os.name == "posix"
MAX_SECRET_BYTES = 64 * 1024
"""The largest secret value, in bytes of UTF-8 (see the module docstring)."""
MIN_SECRET_CHARS = 8
"""A shorter value is refused by ``cadenza secrets set`` unless ``--allow-short`` is given."""


def short_secret_reason(name: str, value: str) -> str | None:
    """Why ``value`` is too short to be a good secret (None when it is long enough).

    A short value is easy to guess and occurs by chance in ordinary text; the redactor
    masks it only where it stands as a whole token (docs/security.md)."""
    length = len(value)
    if length >= MIN_SECRET_CHARS:
        return None
    return (f"secret {name} is {length} character{'s' if length != 1 else ''}; a secret "
            f"should have at least {MIN_SECRET_CHARS}: a short value is easy to guess, and "
            "it is masked in logs only where it stands as a whole word")


_SEAL_BYTES = NONCE_BYTES + 16  # what sealing adds to a value: its nonce and the GCM tag
_StrSet = set[str]  # SecretStore.set shadows the builtin inside the class body


def validate_secret_name(name: str) -> str:
    """Return ``name`` if it is a valid secret name, else raise ``ValueError`` saying why."""
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"invalid secret name {name!r}: use 1 to 64 characters among letters, digits, "
            "'_', '.' and '-'"
        )
    return name


class SecretStore:
    """The secrets of one Cadenza home, encrypted at rest.

    ``home`` is the home directory; files live in ``home/data``. Values are never part of
    an error message, a ``repr`` or a listing.
    """

    def __init__(self, home: Path, clock: Clock | None = None) -> None:
        self.home = Path(home)
        self.data_dir = self.home / "data"
        self.key_path = self.data_dir / "secret.key"
        self.path = self.data_dir / "secrets.json"
        self._lock_path = self.data_dir / "secrets.lock"
        self._clock: Clock = clock or SystemClock()
        self._thread_lock = threading.RLock()

    def __repr__(self) -> str:
        return f"SecretStore({str(self.home)!r})"

    # --- public API -------------------------------------------------------------------------

    def set(self, name: str, value: str) -> None:
        """Store ``value`` under ``name``, replacing any previous value."""
        validate_secret_name(name)
        if not isinstance(value, str):
            raise TypeError(f"a secret value must be a str, not {type(value).__name__}")
        if value == "":
            raise ValueError(f"secret {name!r}: an empty value cannot be stored")
        size = len(value.encode("utf-8"))
        if size > MAX_SECRET_BYTES:
            raise ValueError(_too_large(name, size))
        # The name unquoted: a redactor masks a quoted value after the word "secret".
        with self._writing(f"secret {name} was not stored"), self._write_lock():
            entries = self._load()
            key = self._load_key(create=True, existing_entries=bool(entries))
            nonce = _random.token_bytes(NONCE_BYTES)
            sealed = nonce + AESGCM(key).encrypt(nonce, value.encode("utf-8"), name.encode("utf-8"))
            entries[name] = {
                "value": base64.b64encode(sealed).decode("ascii"),
                "updated_at": self._clock.now().isoformat(timespec="seconds"),
            }
            self._save(entries)

    def get(self, name: str) -> str | None:
        """The value of ``name``, or None when there is no such secret."""
        validate_secret_name(name)
        entries = self._load()
        if name not in entries:
            return None
        return self._decrypt(self._load_key(create=False), name, entries[name])

    def names(self) -> list[str]:
        """The names of the stored secrets, sorted. Decrypts nothing."""
        return sorted(self._load())

    def updated_at(self, name: str) -> str | None:
        """When ``name`` was last set (ISO 8601, UTC), or None when there is no such secret."""
        validate_secret_name(name)
        entry = self._load().get(name)
        return None if entry is None else entry["updated_at"]

    def delete(self, name: str) -> bool:
        """Remove ``name``; True if it existed."""
        validate_secret_name(name)
        with self._writing(f"secret {name} was not deleted"), self._write_lock():
            entries = self._load()
            if name not in entries:
                return False
            del entries[name]
            self._save(entries)
            return True

    def values(self) -> _StrSet:
        """Every decrypted value, to register with a :class:`~cadenza.audit.Redactor`."""
        entries = self._load()
        if not entries:
            return set()
        key = self._load_key(create=False)
        return {self._decrypt(key, name, entry) for name, entry in entries.items()
                if _sealed_size(entry) <= MAX_SECRET_BYTES}

    # --- the key ----------------------------------------------------------------------------

    def _load_key(self, *, create: bool, existing_entries: bool = True) -> bytes:
        """Read the key, creating it when allowed and no encrypted value depends on another key."""
        if not self.key_path.exists():
            if not create or existing_entries:
                raise SecretError(
                    f"the key file {self.key_path} is missing, so the secrets in {self.path} "
                    "cannot be decrypted; restore secret.key from the backup it was saved with"
                )
            self._create_key()
        self._check_key_mode()
        try:
            raw = self.key_path.read_bytes()
        except OSError as exc:
            raise SecretError(
                f"the key file {self.key_path} cannot be read: {exc.strerror}"
            ) from None
        try:
            key = base64.b64decode(raw.strip(), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != KEY_BYTES:
            raise SecretError(
                f"the key file {self.key_path} is damaged: "
                f"expected {KEY_BYTES} base64-encoded bytes"
            )
        return key

    def _check_key_mode(self) -> None:
        if not _POSIX:
            return  # Windows: no POSIX modes; the file inherits the data directory's ACL
        mode = stat.S_IMODE(self.key_path.stat().st_mode)
        if mode & 0o077:
            raise SecretError(
                f"the key file {self.key_path} can be read by other users (mode {mode:04o}); "
                f"restrict it with: chmod 600 {self.key_path}"
            )

    def _create_key(self) -> None:
        """Write a new key without ever replacing one another process created meanwhile."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        content = base64.b64encode(_random.token_bytes(KEY_BYTES)) + b"\n"
        tmp = self._write_private_temp(self.key_path, content)
        try:
            if _POSIX:
                os.link(tmp, self.key_path)  # fails if the key appeared meanwhile: keep that one
            else:
                os.rename(tmp, self.key_path)  # on Windows, rename never replaces a file
        except FileExistsError:
            pass
        except OSError:
            # A file system without hard links (some network or FAT mounts): create the key
            # in place, still exclusively; a reader could only see it half-written for an
            # instant, and would get a "damaged" error rather than a wrong key.
            self._write_key_in_place(content)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_dir(self.data_dir)

    def _write_key_in_place(self, content: bytes) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(self.key_path, flags, 0o600)
        except FileExistsError:
            return
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())

    # --- the file ---------------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, str]]:
        """The entries of ``secrets.json`` (name → value and updated_at), checked for shape."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise SecretError(f"{self.path} cannot be read: {exc.strerror}") from None
        try:
            doc: Any = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise SecretError(f"{self.path} is not valid JSON; restore it from a backup") from None
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            raise SecretError(f"{self.path} is not a version {FORMAT_VERSION} Cadenza secrets file")
        entries = doc.get("secrets")
        if not isinstance(entries, dict):
            raise SecretError(f"{self.path} is damaged: 'secrets' is not a table")
        for name, entry in entries.items():
            if (
                NAME_RE.fullmatch(name) is None
                or not isinstance(entry, dict)
                or not isinstance(entry.get("value"), str)
                or not isinstance(entry.get("updated_at"), str)
            ):
                raise SecretError(f"{self.path} is damaged: the entry {name[:64]!r} is malformed")
        return entries

    def _save(self, entries: dict[str, dict[str, str]]) -> None:
        doc = {"version": FORMAT_VERSION, "secrets": dict(sorted(entries.items()))}
        content = (json.dumps(doc, indent=2) + "\n").encode("utf-8")
        tmp = self._write_private_temp(self.path, content)
        try:
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(self.data_dir)

    def _write_private_temp(self, target: Path, content: bytes) -> Path:
        """Write ``content`` to a new 0600 file next to ``target``, flushed to disk."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{_random.token_hex(8)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        fd = os.open(tmp, flags, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(content)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return tmp

    def _decrypt(self, key: bytes, name: str, entry: dict[str, str]) -> str:
        try:
            sealed = base64.b64decode(entry["value"], validate=True)
        except (binascii.Error, ValueError):
            sealed = b""
        if len(sealed) < _SEAL_BYTES:
            raise SecretError(f"secret {name!r} in {self.path} is damaged (not a sealed value)")
        if len(sealed) - _SEAL_BYTES > MAX_SECRET_BYTES:
            raise SecretError(_too_large(name, len(sealed) - _SEAL_BYTES))
        try:
            plain = AESGCM(key).decrypt(
                sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], name.encode("utf-8")
            )
        except InvalidTag:
            raise SecretError(
                f"secret {name!r} cannot be decrypted: {self.path} was altered, or "
                f"{self.key_path} is not the key it was encrypted with"
            ) from None
        return plain.decode("utf-8")

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """A write of the secrets: an OSError (a full or read-only disk, a refused
        permission) becomes a :class:`~cadenza.domain.errors.FileWriteFailed` (a
        WriteFailed and still an OSError with its errno) saying ``what`` did not happen,
        that ``secrets.json`` is as it was, and what to do."""
        try:
            yield
        except OSError as exc:
            kind = write_failure_kind(exc)
            detail = exc.strerror or str(exc)
            place = f" ({exc.filename})" if exc.filename else ""
            todo = {DISK_FULL: "free space on that disk", READ_ONLY: "make it writable",
                    NO_PERMISSION: "give this user write access to it"}.get(
                        kind or "", "check that disk")
            raise file_write_failed(
                kind, f"{what}: {kind or 'write failed'}: {detail}{place}; {self.path} is "
                      f"as it was (the secrets stored before are kept); {todo} "
                      f"({self.data_dir}) and try again", detail, exc.errno) from None

    @contextlib.contextmanager
    def _write_lock(self) -> Iterator[None]:
        """Exclusive across threads and processes, for read-modify-write of the file."""
        with self._thread_lock:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                _lock_fd(fd)
                try:
                    yield
                finally:
                    _unlock_fd(fd)
            finally:
                os.close(fd)


def _sealed_size(entry: dict[str, str]) -> int:
    """The size of the value sealed in ``entry``, in bytes, without decrypting it."""
    text = entry["value"]
    return len(text) * 3 // 4 - text[-2:].count("=") - _SEAL_BYTES


def _too_large(name: str, size: int) -> str:
    # The name unquoted: a redactor masks a quoted value after the word "secret".
    return (f"secret {name} is {size:,} bytes; a secret holds at most {MAX_SECRET_BYTES:,} "
            "bytes (64 KiB), since everything a run writes is searched for every secret; "
            f"store a smaller value with `cadenza secrets set {name}`")


if sys.platform == "win32":
    import msvcrt

    def _lock_fd(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)  # msvcrt locks bytes from the current position
        try:
            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)  # retries for about 10 seconds
        except OSError:
            raise SecretError("another process is writing the secrets file; try again") from None

    def _unlock_fd(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)

    def _unlock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable (POSIX); Windows cannot open a directory, and needs no such call."""
    if not _POSIX:
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
