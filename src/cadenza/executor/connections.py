"""Named connections of ``cadenza.toml``, opened for steps: SQL engines and HTTP clients.

One :class:`Connections` per process (or per worker pool) caches one SQLAlchemy engine per
``sql`` connection, so that runs share connection pools. Relative SQLite paths resolve
against the home. Drivers: SQLite (stdlib), PostgreSQL (psycopg 3), MariaDB/MySQL (PyMySQL).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from cadenza.config.schema_settings import (
    HttpConnection,
    Settings,
    SqlConnection,
    absolute_sqlite_url,
)
from cadenza.domain.errors import Fatal

SQLITE_BUSY_TIMEOUT_S = 30


class Connections:
    """SQL engines (cached) and HTTP clients (one per call) for the home's connections."""

    def __init__(self, home: Path, settings: Settings) -> None:
        self.home = home
        self.settings = settings
        self._engines: dict[str, sa.Engine] = {}
        self._lock = threading.Lock()

    def definition(self, name: str) -> Any:
        """The connection's settings; :class:`Fatal` when it is not defined."""
        try:
            return self.settings.connections[name]
        except KeyError:
            known = ", ".join(self.settings.connections) or "none"
            raise Fatal(f"unknown connection {name!r} (defined: {known})") from None

    def sql_engine(self, name: str) -> sa.Engine:
        """The engine of the ``sql`` connection ``name`` (created once, then shared)."""
        with self._lock:
            engine = self._engines.get(name)
            if engine is not None:
                return engine
            definition = self.definition(name)
            if not isinstance(definition, SqlConnection):
                raise Fatal(f"connection {name!r} is of type {definition.type!r}, not sql")
            url = sa.make_url(absolute_sqlite_url(definition.url, self.home))
            kwargs: dict[str, Any] = {"pool_pre_ping": True}
            if url.get_backend_name() == "sqlite":
                kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S,
                                          "check_same_thread": False}
            engine = sa.create_engine(url, **kwargs)
            self._engines[name] = engine
            return engine

    def http_client(self, name: str, **kwargs: Any) -> httpx.Client:
        """A new httpx Client for the ``http`` connection ``name``: its base URL, headers,
        timeout and TLS verification. The caller closes it."""
        definition = self.definition(name)
        if not isinstance(definition, HttpConnection):
            raise Fatal(f"connection {name!r} is of type {definition.type!r}, not http")
        return httpx.Client(
            base_url=definition.base_url,
            headers=dict(definition.headers),
            timeout=definition.timeout.total_seconds(),
            verify=definition.verify_tls,
            **kwargs,
        )

    def close(self) -> None:
        """Dispose of every engine."""
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.dispose()
