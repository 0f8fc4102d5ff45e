"""Shared fixtures: real services; skipped with a reason locally, failed under CI=true."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get(
    "CADENZA_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
MARIADB_URL = os.environ.get("CADENZA_TEST_MARIADB", "mysql+pymysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def service_missing(what: str, why: object) -> None:
    """Skip (on a person's machine) or fail (under CI=true) for a missing service."""
    message = f"{what} is not reachable ({why}); start it or set the CADENZA_TEST_* URL"
    if IN_CI:
        pytest.fail(f"CI=true: {message}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def _pg_admin() -> Iterator[object]:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with engine.connect() as c:
            c.execute(sa.text("select 1"))
    except Exception as exc:  # any driver or network error means "no server"
        service_missing("PostgreSQL", exc)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_url(_pg_admin: object) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    import sqlalchemy as sa

    engine = _pg_admin
    assert isinstance(engine, sa.Engine)
    name = f"cadenza_t_{uuid.uuid4().hex[:12]}"
    with engine.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = engine.url.set(database=name).render_as_string(hide_password=False)
    yield url
    with engine.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file URL in the test's temporary directory."""
    return f"sqlite:///{(tmp_path / 'cadenza.db').as_posix()}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Run a test once per supported store: a SQLite file and a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / 'cadenza.db').as_posix()}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def mariadb_url() -> str:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(MARIADB_URL)
        with engine.connect() as c:
            c.execute(sa.text("select 1"))
        engine.dispose()
    except Exception as exc:
        service_missing("MariaDB", exc)
    return MARIADB_URL


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """The fault harness's files wait for real minutes (boundaries, leases, the soak): they go
    first, so that the suite's other process runs the rest beside them."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/faults/") else 1)
