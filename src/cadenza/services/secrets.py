"""Encrypted secrets of a home, referenced as ``${secret.NAME}`` in cadenza.toml.

Operations::

    set(name, value, allow_short) -> warning | None
                                     InvalidRequest for a bad name, an empty value, or one
                                     shorter than 8 characters without allow_short
    names() -> list[str]             never a value
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadenza.audit.secrets import short_secret_reason
from cadenza.services.errors import InvalidRequest, NotAHome

if TYPE_CHECKING:
    from cadenza.home import Home


class SecretService:
    def __init__(self, home: Home) -> None:
        self.home = home

    def require_directory(self) -> None:
        """NotAHome unless the home is a directory."""
        if not self.home.path.is_dir():
            raise NotAHome(f"{self.home.path} is not a directory")

    def set(self, name: str, value: str, *, allow_short: bool = False) -> str | None:
        """Store ``value`` under ``name`` (AES-GCM, key in data/secret.key).

        A value shorter than :data:`MIN_SECRET_CHARS` is refused (InvalidRequest) unless
        ``allow_short``; then it is stored and the warning to show is returned."""
        self.require_directory()
        if not value:
            raise InvalidRequest("empty value; nothing stored")
        short = short_secret_reason(name, value)
        if short is not None and not allow_short:
            raise InvalidRequest(f"{short}; nothing stored (choose a longer value, or "
                                 "give --allow-short to store it anyway)")
        try:
            self.home.secrets.set(name, value)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        return short

    def names(self) -> list[str]:
        return list(self.home.secrets.names())
