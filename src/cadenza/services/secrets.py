"""Encrypted secrets of a home, referenced as ``${secret.NAME}`` in cadenza.toml.

Operations::

    set(name, value) -> None         InvalidRequest for a bad name or an empty value
    names() -> list[str]             never a value
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

    def set(self, name: str, value: str) -> None:
        """Store ``value`` under ``name`` (AES-GCM, key in data/secret.key)."""
        self.require_directory()
        if not value:
            raise InvalidRequest("empty value; nothing stored")
        try:
            self.home.secrets.set(name, value)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None

    def names(self) -> list[str]:
        return list(self.home.secrets.names())
