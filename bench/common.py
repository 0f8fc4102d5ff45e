"""What the benchmarks share: a scratch PostgreSQL database, created and dropped."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def scratch_pg_database(admin_url: str = PG_ADMIN, *, keep: bool = False) -> Iterator[str]:
    """A fresh, empty PostgreSQL database's URL; the database is dropped afterwards (unless
    ``keep``: then its name is printed to stderr, to inspect it; drop it yourself)."""
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"cadenza_bench_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        if keep:
            print(f"kept database {name}", file=sys.stderr)
        else:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
