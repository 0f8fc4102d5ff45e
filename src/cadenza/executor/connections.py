"""Named connections of ``cadenza.toml``, opened for steps: SQL engines and HTTP clients.

One :class:`Connections` per process (or per worker pool) caches one SQLAlchemy engine per
``sql`` connection, so that runs share connection pools. Relative SQLite paths resolve
against the home. Drivers: SQLite (stdlib), PostgreSQL (psycopg 3), MariaDB/MySQL (PyMySQL).
HTTP clients go through the egress policy of :mod:`cadenza.netguard`, or to a WSGI
application in-process when the connection names one (``app``).
"""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import httpx
import sqlalchemy as sa

from cadenza.config.schema_settings import (
    HttpConnection,
    Settings,
    SqlConnection,
    absolute_sqlite_url,
)
from cadenza.domain.errors import Fatal
from cadenza.netguard import (
    EgressPolicy,
    GuardedTransport,
    PublicPolicy,
    Resolver,
    default_is_public,
    system_resolver,
)

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

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

    def http_client(self, name: str, *, resolver: Resolver | None = None,
                    is_public: PublicPolicy | None = None, **kwargs: Any) -> httpx.Client:
        """A new httpx Client for the ``http`` connection ``name``: its base URL, headers,
        timeout and TLS verification. The caller closes it.

        Requests go through the egress policy (:mod:`cadenza.netguard`: private
        targets refused unless ``allow_private``, every hop checked, DNS pinned), or,
        when the connection names a WSGI ``app``, to that application in-process.
        ``resolver`` and ``is_public`` replace the policy's defaults (tests).
        """
        definition = self.definition(name)
        if not isinstance(definition, HttpConnection):
            raise Fatal(f"connection {name!r} is of type {definition.type!r}, not http")
        transport: httpx.BaseTransport
        if definition.app is not None:
            transport = httpx.WSGITransport(app=self.wsgi_app(definition.app))
        else:
            policy = EgressPolicy(allow_private=definition.allow_private,
                                  resolver=resolver or system_resolver,
                                  is_public=is_public or default_is_public)
            transport = GuardedTransport(policy, verify=definition.verify_tls)
        options: dict[str, Any] = {"transport": transport, "trust_env": False, **kwargs}
        return httpx.Client(
            base_url=definition.base_url,
            headers=dict(definition.headers),
            timeout=definition.timeout.total_seconds(),
            **options,
        )

    def wsgi_app(self, spec: str) -> WSGIApplication:
        """The WSGI application ``module:attribute``, imported with the home's ``plugins/``
        first on ``sys.path``; :class:`Fatal` when it cannot be imported or is not callable."""
        plugins = str(self.home / "plugins")
        if plugins not in sys.path:
            sys.path.insert(0, plugins)
        module_name, _, attribute = spec.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attribute.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as exc:
            raise Fatal(f"cannot load the in-process HTTP app {spec!r} from "
                        f"{plugins}: {type(exc).__name__}: {exc}") from exc
        if not callable(target):
            raise Fatal(f"the in-process HTTP app {spec!r} is not a WSGI callable")
        return cast("WSGIApplication", target)

    def close(self) -> None:
        """Dispose of every engine."""
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.dispose()
