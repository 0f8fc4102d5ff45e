"""A demo home served in-process (FastAPI's TestClient over httpx), with one user per role."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    # Starlette 1.x announces a move of its TestClient to httpx2; httpx is what we have.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from cadenza.clock import Clock, FakeClock
from cadenza.security import hash_password
from cadenza.services import Actor, Services
from cadenza.services.config import init_home
from cadenza.web.app import create_app

START = "2027-03-10T09:00:00+00:00"
ORIGIN = "http://testserver"
PASSWORD = "correct horse battery"
ROLES = ("viewer", "operator", "editor", "admin")


@dataclass
class ApiEnv:
    """The home's services (store owner), the app, and what the tests captured."""

    services: Services
    client: TestClient
    reloads: list[int]

    @property
    def store(self) -> Any:
        return self.services.store()

    def session(self, username: str) -> TestClient:
        """A client logged in as ``username`` sending its CSRF token and this Origin."""
        client = TestClient(self.client.app, base_url=ORIGIN)
        answer = client.post("/api/login", json={"username": username, "password": PASSWORD})
        assert answer.status_code == 200, answer.text
        client.headers.update({"X-CSRF-Token": answer.json()["csrf_token"],
                               "Origin": ORIGIN})
        return client

    def token_client(self, token: str) -> TestClient:
        client = TestClient(self.client.app, base_url=ORIGIN)
        client.headers["Authorization"] = f"Bearer {token}"
        return client


@contextmanager
def api_env(root: Path, clock: Clock | None = None,
            store_url: str | None = None) -> Iterator[ApiEnv]:
    """A demo home with users ``viewer``, ``operator``, ``editor`` and ``admin2`` (their
    role) and an app over its store (``store_url``: another store than the home's SQLite
    file, e.g. a fresh PostgreSQL database)."""
    clock = clock or FakeClock(START)
    created = init_home(root / "home", example=True, actor=Actor("cli", "init"), clock=clock)
    if store_url is not None:
        settings = created.path / "cadenza.toml"
        settings.write_text(settings.read_text(encoding="utf-8").replace(
            'url = "sqlite:///data/cadenza.db"', f'url = "{store_url}"'), encoding="utf-8")
    services = Services.at(created.path, actor=Actor("cli", "test"), clock=clock)
    store = services.store()
    for role in ROLES:
        name = "admin2" if role == "admin" else role
        store.add_user(name, hash_password(PASSWORD), [role])
    reloads: list[int] = []
    app = create_app(store, home=services.home, reload=lambda: reloads.append(1) or True)
    try:
        with TestClient(app, base_url=ORIGIN) as client:
            yield ApiEnv(services, client, reloads)
    finally:
        services.close()


def user_of(role: str) -> str:
    return "admin2" if role == "admin" else role


def without_demo_pools(home: Path) -> None:
    """Remove the demo home's ``[pools]`` from cadenza.toml, and its job that rents a unit
    from jobs.toml (for tests that declare their own pools and count members or pools)."""
    import tomlkit

    for name, key, inner in (("cadenza.toml", "pools", None),
                             ("jobs.toml", "jobs", "profile-check")):
        path = home / name
        doc = tomlkit.parse(path.read_text(encoding="utf-8"))
        table: Any = doc.get(key)
        if table is not None:
            (table.pop(inner, None) if inner else doc.pop(key, None))
        path.write_text(tomlkit.dumps(doc), encoding="utf-8")
