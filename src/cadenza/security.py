"""Passwords, API tokens and user names (docs/security.md).

* Passwords are hashed with argon2id (argon2-cffi's ``PasswordHasher``, RFC 9106 low-memory
  profile by default); :func:`needs_rehash` tells when a stored hash uses weaker parameters
  than the current ones, so that login can upgrade it.
* API tokens are random, shown once, and stored as their SHA-256: a token has 256 bits of
  entropy, so a fast hash is enough (a slow one would only slow down every API call).
  Tokens start with ``cdz_`` so that secret scanners and :class:`cadenza.audit.Redactor`
  recognise them in text.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

TOKEN_PREFIX = "cdz_"
USERNAME_RE = re.compile(r"[A-Za-z0-9_.@\-]{1,64}")
MAX_PASSWORD_LENGTH = 4096  # a bound on the work one login request can ask for

_hasher = PasswordHasher()  # argon2id; parameters from argon2-cffi's RFC 9106 profile


def hash_password(password: str) -> str:
    """The argon2id hash of ``password`` (a ``$argon2id$...`` string with its own salt)."""
    _check_password(password)
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """True when ``password`` matches ``password_hash``; False on mismatch or a malformed hash."""
    if not isinstance(password, str) or not password or len(password) > MAX_PASSWORD_LENGTH:
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def needs_rehash(password_hash: str) -> bool:
    """True when ``password_hash`` should be recomputed at the next successful login.

    That is when it was made with other parameters than the current ones, or is not an
    argon2id hash that can be read.
    """
    try:
        return _hasher.check_needs_rehash(password_hash)
    except (InvalidHashError, ValueError):
        return True


def generate_password() -> str:
    """A random password for a new account: 24 URL-safe characters (144 bits)."""
    return secrets.token_urlsafe(18)


def generate_token() -> str:
    """A new API token: ``cdz_`` and 43 URL-safe characters (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The SHA-256 hex digest of ``token``, the form in which API tokens are stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def validate_username(name: str) -> str:
    """Return ``name`` if it is a valid user name, else raise ``ValueError`` saying why."""
    if not isinstance(name, str) or USERNAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"invalid user name {name!r}: use 1 to 64 characters among letters, digits, "
            "'_', '.', '@' and '-'"
        )
    return name


def _check_password(password: str) -> None:
    if not isinstance(password, str):
        raise TypeError(f"a password must be a str, not {type(password).__name__}")
    if not password:
        raise ValueError("a password cannot be empty")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise ValueError(f"a password cannot be longer than {MAX_PASSWORD_LENGTH} characters")
