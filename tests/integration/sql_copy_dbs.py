"""The two ends of a sql_copy test: a SQLite file, a fresh PostgreSQL database (two, for
PostgreSQL → PostgreSQL), or the shared MariaDB ``test`` database (tables dropped after)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_ctx import Db, database, execute


@pytest.fixture
def pg_url2(_pg_admin: Any) -> Iterator[str]:
    """A second fresh PostgreSQL database (the other end of a copy)."""
    name = f"cadenza_t_{uuid.uuid4().hex[:12]}"
    with _pg_admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield _pg_admin.url.set(database=name).render_as_string(hide_password=False)
    with _pg_admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def endpoint(request: pytest.FixtureRequest, kind: str, tmp_path: Path,
             which: str) -> Iterator[Db]:
    if kind == "sqlite":
        url = f"sqlite:///{(tmp_path / f'{which}.db').as_posix()}"
    elif kind == "postgresql":
        url = str(request.getfixturevalue("pg_url" if which == "src" else "pg_url2"))
    else:
        url = str(request.getfixturevalue("mariadb_url"))
    made = database(kind, url)
    yield next(made)
    if kind == "mariadb":
        execute(url, "DROP TABLE IF EXISTS cadenza_load_progress")
    next(made, None)
